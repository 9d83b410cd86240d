"""Pulsar conversations from scratch for the levels of issue 42 (values, journeys, diagnoses).

Input: commands by name and fields (nested dicts allowed), metadata and payloads.
Output: `Talk`, a TCP connection whose frames are sent at chosen times, turned into packet
records (`recs`) and a pcap (`capture`); `frame` encodes one frame; `schema` a Schema field.
Rules: frames are encoded with dissector.pulsar.encoder (a faithful encoder of the wire
format, as the tests' crafted captures use); the expected values of the invariants come from
what the makers put in, never from the dissector's reading. Times are µs since the epoch.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from dissector.values.model import WIRE_TYPE_NAMES
from fuzz.mutators import ETHER, Rec
from fuzz.packets import B2C, C2B, Conn, Pkt, pcap

__all__ = ["B2C", "C2B", "T0", "Talk", "batch", "capture", "frame", "meta", "schema", "version"]

WIRE_NUMBERS = {name: number for number, name in WIRE_TYPE_NAMES.items()}
T0 = 1_700_000_000_000_000


def frame(
    name: str,
    *,
    payload: bytes | None = None,
    metadata: MessageMetadata | None = None,
    **fields: Any,
) -> bytes:
    """One frame: a simple command, or SEND/MESSAGE with metadata and payload (SEND with its
    checksum, MESSAGE without, as clients and brokers write them)."""
    cmd = command(name, **fields)
    if payload is None and metadata is None:
        return encode_frame(cmd)
    meta_ = metadata if metadata is not None else MessageMetadata()
    return encode_frame(cmd, metadata=meta_, payload=payload or b"", checksum=name == "SEND")


def meta(seq: int = 0, schema_version: bytes | None = None, **extra: Any) -> MessageMetadata:
    out = MessageMetadata(
        producer_name="fuzz-producer", sequence_id=seq, publish_time=T0 // 1000, **extra
    )
    if schema_version is not None:
        out.schema_version = schema_version
    return out


def version(n: int) -> bytes:
    """A schema version as Pulsar writes it: an 8-byte big-endian long."""
    return struct.pack(">q", n)


def schema(type_name: str, data: bytes = b"", props: dict[str, str] | None = None) -> Any:
    """A Schema field (for PRODUCER, SUBSCRIBE ...) as a dict for `frame`."""
    return {
        "name": type_name.lower(),
        "type": WIRE_NUMBERS[type_name],
        "schema_data": data,
        "properties": [{"key": k, "value": v} for k, v in (props or {}).items()],
    }


def batch(payloads: Sequence[bytes]) -> bytes:
    """A batch payload as Pulsar writes it: per entry [size][SingleMessageMetadata][data]."""
    out = []
    for i, data in enumerate(payloads):
        single = SingleMessageMetadata(payload_size=len(data), sequence_id=i).SerializeToString()
        out.append(struct.pack(">I", len(single)) + single + data)
    return b"".join(out)


class Talk:
    """A connection whose frames are sent one packet each (split at `mss`), at `now` µs,
    each packet `step` µs after the previous one unless `at` moves the clock."""

    def __init__(self, client_port: int = 40000, step: int = 100) -> None:
        self.conn = Conn(client_port=client_port)
        self.step = step
        self.now = T0
        self.recs: list[Rec] = []
        self.frames = 0
        self._add(self.conn.handshake())
        self.send(C2B, frame("CONNECT", client_version="fuzz", protocol_version=21)).send(
            B2C, frame("CONNECTED", server_version="fuzz", protocol_version=21)
        )

    def _add(self, pkts: Sequence[Pkt]) -> None:
        for p in pkts:
            self.recs.append(Rec(self.now, ETHER, p.data, len(p.data)))
            self.now += self.step

    def at(self, ts: int) -> Talk:
        self.now = max(self.now, ts)
        return self

    def send(self, direction: int, *frames: bytes) -> Talk:
        for data in frames:
            self.frames += 1
            self._add(self.conn.send(direction, data, mss=65000))
        return self

    def close(self) -> list[Rec]:
        self._add(self.conn.close())
        return self.recs


def capture(*talks: Talk) -> bytes:
    """The talks' packets in time order, as one pcap (talks left open stay open)."""
    recs = sorted((r for t in talks for r in t.recs), key=lambda r: r.ts)
    return pcap(recs)
