"""EDGE: the packets between the capturing and the dissecting process of `live`, as records.

Input: packets (µs since the epoch, captured bytes) on the capturer's side; on the
dissector's side, buffers of whole records and the number of the last packet dissected.
Output: `records`: the packets as pcap records (`RECORD`: little-endian seconds,
microseconds, captured and wire length, then the bytes), what the capturer writes into the
pipe; `Walk`: a buffer of them back to packets in order, each a `Segment` (a plain TCP
segment whose headers the compiled record walk parsed: the one offline reads of pcap files
use, dissector._core) or a `RawPacket` (for the pipeline to parse with
dissector.net.headers), numbered on.
Rule: the same packets whichever way they are walked: without the compiled stage (pure
package, PULSAR_DISSECTOR_CORE=0) every packet is a RawPacket; a record the compiled walk
leaves (it stops before it) is made a RawPacket here, then the walk goes on.
"""

from __future__ import annotations

import struct

from dissector import _core
from dissector._core import Walked
from dissector.capture.bpf import SNAPLEN
from dissector.capture.pcap import PcapHeader
from dissector.events import RawPacket

RECORD = struct.Struct("<IIII")  # a pcap record header: seconds, µs, captured, wire length


def records(batch: list[tuple[int, bytes]]) -> bytes:
    """Packets (µs since the epoch, bytes) as pcap records, one after the other."""
    pack, parts = RECORD.pack, []
    for ts, data in batch:
        seconds, micros = divmod(ts, 1_000_000)
        parts.append(pack(seconds, micros, len(data), len(data)))
        parts.append(data)
    return b"".join(parts)


def whole(buf: bytes | bytearray) -> int:
    """How many bytes at the start of `buf` are whole records."""
    pos, end, unpack, head = 0, len(buf), RECORD.unpack_from, RECORD.size
    while end - pos >= head:
        length = unpack(buf, pos)[2]
        if end - pos - head < length:
            break
        pos += head + length
    return pos


def split_records(buf: bytes) -> list[tuple[int, bytes]]:
    """Whole records back to (µs since the epoch, bytes)."""
    out: list[tuple[int, bytes]] = []
    pos, unpack, head = 0, RECORD.unpack_from, RECORD.size
    while pos < len(buf):
        seconds, micros, length, _ = unpack(buf, pos)
        start = pos + head
        out.append((seconds * 1_000_000 + micros, buf[start : start + length]))
        pos = start + length
    return out


class Walk:
    """Buffers of whole records of one link type -> packets (see the module rules)."""

    def __init__(self, linktype: int, *, compiled: bool | None = None) -> None:
        """compiled: use the compiled walk (None: when `_core.active()`)."""
        self.linktype = linktype
        header = PcapHeader("<", False, (2, 4), SNAPLEN, linktype)
        use = _core.active() if compiled is None else compiled
        self._walk = _core.pcap_walk(header) if use else None

    def __call__(self, buf: bytes, number: int) -> list[Walked]:
        """The packets of `buf`, numbered from `number + 1`."""
        items: list[Walked] = []
        pos = 0
        if self._walk is not None:
            pos, number, items = self._walk(buf, 0, number)
        for ts, data in split_records(buf[pos:]):  # all of them without the compiled walk
            number += 1
            items.append(RawPacket(number, ts, self.linktype, data, len(data)))
        return items
