"""What the TLS stage hands on to Pulsar framing, per direction and in order.

Input: none (types only).
Output: `Plain` (decrypted application data), `PlainGap` (bytes of the decrypted stream that
cannot be known: records that did not open, or waited for a key in vain) and `TlsEvent`,
either of them or an `Anomaly`.
Rule: a direction's decrypted stream is its Plain bytes and PlainGap lengths, in order.
"""

from __future__ import annotations

from typing import NamedTuple

from dissector.events import Anomaly, Direction


class Plain(NamedTuple):
    direction: Direction
    data: bytes
    packet: int
    ts: int


class PlainGap(NamedTuple):
    direction: Direction
    length: int
    packet: int
    ts: int


TlsEvent = Plain | PlainGap | Anomaly
