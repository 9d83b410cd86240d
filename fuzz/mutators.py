"""Structure-aware mutators: captures, streams and payload frames damaged as users meet them.

Input: a `random.Random` and seeds from `fuzz.seeds` (packet records of the sample captures,
reassembled Pulsar byte streams with their frame offsets, payload frames).
Output: capture file bytes (pcap or pcapng, sometimes gzip) from `mutate_capture`, damaged
byte streams from `mutate_stream`, damaged payload frames from `mutate_payload_frames`; each
with the list of operations applied (what the campaign report shows for a failure).
Rules:
- Everything is a function of the Random given: the same seed gives the same bytes.
- Damage is the kind real captures carry: bit flips anywhere or only in TCP payloads, bytes
  inserted or deleted inside payloads (with the IP lengths and later sequence numbers moved,
  so the stream itself changes), records cut short or lying about their lengths (past the
  file end, above 2**31), packets shuffled, duplicated, dropped or spliced from another
  capture, sequence numbers wrapping, other link layers and IPv6, pcapng blocks corrupted,
  gzip streams cut, and adversarial Pulsar frames (sizes of 4 GiB, 2**31 batch entries or
  chunks, decompression bombs with a lying `uncompressed_size`, invalid UTF-8, deep protobuf).
- Inputs stay small (a window of at most MAX_WINDOW packets): each costs milliseconds.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Sequence
from functools import cache
from random import Random
from typing import Any, NamedTuple

import cramjam

from dissector.capture._source import MAX_RECORD_SIZE, MAX_TS_US
from dissector.pulsar.decompression import DEFAULT_MAX_UNCOMPRESSED, decompress
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.pulsar.wire import (
    COMMAND_TYPES,
    COMPRESSION_TYPES,
    BaseCommand,
    BrokerEntryMetadata,
    MessageMetadata,
    SingleMessageMetadata,
)

#: Most packets in one pipeline input (a window of a sample capture).
MAX_WINDOW = 40
#: Most bytes of packet data in one window (the 64 KiB packets of the large samples).
MAX_WINDOW_BYTES = 200_000
#: Most bytes of one stream input of the framing level.
MAX_STREAM_BYTES = 24_000

U32 = struct.Struct(">I")
MASK32 = 0xFFFFFFFF
#: Values that break size and count fields: around 0, 2**7/2**8 (varints), 2**31, 2**32.
INTERESTING_U32 = (
    0,
    1,
    2,
    4,
    7,
    8,
    127,
    128,
    255,
    256,
    0x7FFF,
    0xFFFF,
    0x10000,
    0x7FFFFFFF,
    0x80000000,
    0x80000001,
    0xFFFFFFFE,
    0xFFFFFFFF,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_FRAME_SIZE + 1,
    MAX_RECORD_SIZE,
    MAX_RECORD_SIZE + 1,
)
INTERESTING_I32 = (0, 1, 2, -1, 2, 3, 100, 65536, 65537, 0x7FFFFFFF, -0x80000000, -2)
INTERESTING_U64 = (
    0,
    1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
    MAX_TS_US // 1000,  # the last millisecond of 9999
    MAX_TS_US // 1000 + 1,
    MAX_TS_US,
    ((1 << 63) // 1000) - 1,
    (1 << 63) // 1000,
    1_700_000_000_000,
)


class Rec(NamedTuple):
    """One packet record before it is written: time (µs), link type, bytes, wire length."""

    ts: int
    linktype: int
    data: bytes
    orig_len: int


class Span(NamedTuple):
    """Where the layers of a TCP packet lie in its record's bytes."""

    ip: int
    tcp: int
    payload: int
    end: int  # end of the TCP payload (IP length, or the captured bytes when shorter)
    v6: bool


Ops = list[str]  # what was done to an input, in order (for the report)

# --------------------------------------------------------------------------- packets

ETHER, RAW, SLL, SLL2, NULL, LOOP, RAW4 = 1, 101, 113, 276, 0, 108, 228
_VLAN = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def l3_start(linktype: int, data: bytes) -> int:
    """Offset of the IP header in a record of `linktype`, or -1."""
    if linktype == ETHER:
        if len(data) < 14:
            return -1
        etype, off = data[12] << 8 | data[13], 14
        while etype in _VLAN and len(data) >= off + 4:
            etype, off = data[off + 2] << 8 | data[off + 3], off + 4
        return off if etype in (0x0800, 0x86DD) else -1
    return {RAW: 0, 12: 0, 14: 0, RAW4: 0, 229: 0, SLL: 16, SLL2: 20, NULL: 4, LOOP: 4}.get(
        linktype, -1
    )


def tcp_span(rec: Rec) -> Span | None:
    """The layers of a TCP/IP packet (no IPv6 extension headers), or None."""
    data = rec.data
    ip = l3_start(rec.linktype, data)
    if ip < 0 or len(data) < ip + 20:
        return None
    version = data[ip] >> 4
    if version == 4:
        ihl = (data[ip] & 15) * 4
        if ihl < 20 or data[ip + 9] != 6:
            return None
        total = data[ip + 2] << 8 | data[ip + 3]
        tcp, end, v6 = ip + ihl, (ip + total if total else len(data)), False
    elif version == 6:
        if len(data) < ip + 40 or data[ip + 6] != 6:
            return None
        tcp, v6 = ip + 40, True
        end = tcp + (data[ip + 4] << 8 | data[ip + 5])
    else:
        return None
    if len(data) < tcp + 20:
        return None
    payload = tcp + (data[tcp + 12] >> 4) * 4
    end = min(end, len(data))
    if payload - tcp < 20 or payload > end:
        return None
    return Span(ip, tcp, payload, end, v6)


def flow_of(rec: Rec, span: Span) -> tuple[bytes, bytes, bytes, bytes]:
    """(source address, destination address, source port, destination port) as bytes."""
    d, ip, tcp = rec.data, span.ip, span.tcp
    if span.v6:
        return d[ip + 8 : ip + 24], d[ip + 24 : ip + 40], d[tcp : tcp + 2], d[tcp + 2 : tcp + 4]
    return d[ip + 12 : ip + 16], d[ip + 16 : ip + 20], d[tcp : tcp + 2], d[tcp + 2 : tcp + 4]


def _u32_at(data: bytes | bytearray, pos: int) -> int:
    return int(U32.unpack_from(data, pos)[0])


def _put(data: bytes, pos: int, raw: bytes) -> bytes:
    return data[:pos] + raw + data[pos + len(raw) :]


def _ip_length(data: bytes, span: Span, payload_len: int) -> bytes:
    """`data` with its IP length field saying the TCP payload is `payload_len` bytes."""
    if span.v6:
        size = span.payload - span.tcp + payload_len
        return _put(data, span.ip + 4, struct.pack(">H", min(size, 0xFFFF)))
    size = span.payload - span.ip + payload_len
    return _put(data, span.ip + 2, struct.pack(">H", min(size, 0xFFFF)))


def edit_payload(recs: list[Rec], i: int, new: bytes) -> None:
    """Give record i the TCP payload `new` as if it had been sent: IP length and wire length
    follow, and later packets of its flow (and the peer's acknowledgements) move by the
    difference, so the byte stream itself changes (no gap, no overlap)."""
    rec = recs[i]
    span = tcp_span(rec)
    if span is None:
        return
    old = span.end - span.payload
    delta = len(new) - old
    data = rec.data[: span.payload] + new + rec.data[span.end :]
    data = _ip_length(data, span, len(new))
    recs[i] = rec._replace(data=data, orig_len=max(len(data), rec.orig_len + delta))
    if not delta:
        return
    src, dst, sport, dport = flow_of(rec, span)
    for j in range(i + 1, len(recs)):
        other = recs[j]
        s = tcp_span(other)
        if s is None:
            continue
        f = flow_of(other, s)
        d = other.data
        if f == (src, dst, sport, dport):
            seq = (_u32_at(d, s.tcp + 4) + delta) & MASK32
            recs[j] = other._replace(data=_put(d, s.tcp + 4, U32.pack(seq)))
        elif f == (dst, src, dport, sport) and d[s.tcp + 13] & ACK:
            ack = (_u32_at(d, s.tcp + 8) + delta) & MASK32
            recs[j] = other._replace(data=_put(d, s.tcp + 8, U32.pack(ack)))


def _with_payload(recs: list[Rec]) -> list[int]:
    out = []
    for i, r in enumerate(recs):
        s = tcp_span(r)
        if s is not None and s.end > s.payload:
            out.append(i)
    return out


def _tcp_indices(recs: list[Rec]) -> list[int]:
    return [i for i, r in enumerate(recs) if tcp_span(r) is not None]


def flip_bits(rng: Random, data: bytes, start: int, end: int, count: int) -> bytes:
    """`data` with `count` random bits flipped in data[start:end]."""
    end = min(end, len(data))
    if end <= start:
        return data
    buf = bytearray(data)
    for _ in range(count):
        pos = rng.randrange(start, end)
        buf[pos] ^= 1 << rng.randrange(8)
    return bytes(buf)


def _flips(rng: Random) -> int:
    return rng.choice((1, 1, 1, 1, 2, 2, 3, 4, 8, 16))


# ------------------------------------------------------------------ adversarial frames


@cache
def _bomb(codec: str) -> tuple[bytes, int]:
    """(compressed bytes, their real size) of zeros whose output exceeds the default bound."""
    size = DEFAULT_MAX_UNCOMPRESSED + (1 << 20)
    zeros = bytes(size)
    if codec == "ZLIB":
        return zlib.compress(zeros, 9), size
    if codec == "ZSTD":
        return bytes(cramjam.zstd.compress(zeros)), size
    if codec == "LZ4":
        return bytes(cramjam.lz4.compress_block(zeros, store_size=False)), size
    small = bytes(cramjam.snappy.compress_raw(bytes(1 << 16)))  # its varint can lie
    return small, 1 << 16


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, wire: int, value: bytes | int) -> bytes:
    """One raw protobuf field (wire 0: varint, 2: length-delimited)."""
    tag = _varint(number << 3 | wire)
    if wire == 0:
        assert isinstance(value, int)
        return tag + _varint(value)
    assert isinstance(value, bytes)
    return tag + _varint(len(value)) + value


def _nested(depth: int, number: int) -> bytes:
    """A length-delimited field holding itself `depth` times (deep protobuf)."""
    inner = b""
    for _ in range(depth):
        inner = _field(number, 2, inner)
    return inner


_COMMANDS = sorted(COMMAND_TYPES)
_CODECS = ("LZ4", "ZLIB", "ZSTD", "SNAPPY")
#: String fields of commands a user sees in every table (topic, names, versions, errors).
_STRING_COMMANDS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("CONNECT", {"client_version": "QQQQ", "protocol_version": 21, "auth_method_name": "QQQQ"}),
    ("CONNECTED", {"server_version": "QQQQ", "protocol_version": 21}),
    ("LOOKUP", {"topic": "QQQQ", "request_id": 1}),
    ("PRODUCER", {"topic": "QQQQ", "producer_id": 1, "request_id": 2, "producer_name": "QQQQ"}),
    ("PRODUCER_SUCCESS", {"request_id": 2, "producer_name": "QQQQ"}),
    (
        "SUBSCRIBE",
        {"topic": "QQQQ", "subscription": "QQQQ", "subType": 0, "consumer_id": 2, "request_id": 3},
    ),
    ("ERROR", {"request_id": 3, "error": 1, "message": "QQQQ"}),
)


def _spoil(raw: bytes, rng: Random) -> bytes:
    while b"QQQQ" in raw:
        raw = raw.replace(b"QQQQ", rng.randbytes(4), 1)
    return raw


def _meta(rng: Random, **fields: Any) -> MessageMetadata:
    meta = MessageMetadata(producer_name="p", sequence_id=rng.randrange(4), publish_time=1)
    for k, v in fields.items():
        setattr(meta, k, v)
    return meta


def _send(
    meta: MessageMetadata | bytes,
    payload: bytes,
    rng: Random,
    checksum: bool | None = None,
    broker_entry: bytes | None = None,
) -> bytes:
    """A SEND (checksummed) or MESSAGE (checksummed or not) frame carrying `payload`."""
    if rng.random() < 0.5:
        cmd = command("SEND", producer_id=rng.randrange(3), sequence_id=rng.randrange(4))
        check = True if checksum is None else checksum
    else:
        cmd = command(
            "MESSAGE",
            consumer_id=rng.randrange(3),
            message_id={"ledgerId": rng.randrange(9), "entryId": rng.randrange(9)},
        )
        check = rng.random() < 0.5 if checksum is None else checksum
    return encode_frame(
        cmd, metadata=meta, payload=payload, checksum=check, broker_entry=broker_entry
    )


def bomb_frame(rng: Random) -> tuple[str, bytes]:
    """A payload frame whose payload decompresses past the bound, its size lying or not."""
    codec = rng.choice(_CODECS)
    data, real = _bomb(codec)
    if codec == "SNAPPY" and rng.random() < 0.7:  # the stream's own length varint lies
        claim = rng.choice((DEFAULT_MAX_UNCOMPRESSED + 1, 1 << 31, (1 << 32) - 1))
        n = 0
        while data[n] & 0x80:
            n += 1
        data = _varint(claim) + data[n + 1 :]
    meta = _meta(rng, compression=COMPRESSION_TYPES[codec])
    lie = rng.choice(("absent", "small", "zero", "exact", "huge"))
    if lie != "absent":
        size = {"small": 100, "zero": 0, "exact": real, "huge": MASK32}[lie]
        meta.uncompressed_size = size
    return f"bomb {codec} uncompressed_size={lie}", _send(meta, data, rng)


def adversarial_frame(rng: Random) -> tuple[str, bytes]:
    """(name, bytes) of one hostile or malformed Pulsar frame."""
    kind = rng.randrange(15)
    if kind == 0:  # a frame claiming up to 4 GiB, then a dribble of bytes
        size = rng.choice((0xFFFFFFFF, 0x80000000, 0x7FFFFFFF, DEFAULT_MAX_FRAME_SIZE + 1))
        return f"total_size {size}", U32.pack(size) + rng.randbytes(rng.randrange(64))
    if kind == 1:  # sizes too small or contradicting each other
        total, csize = rng.choice(INTERESTING_U32[:8]), rng.choice(INTERESTING_U32)
        return f"sizes {total}/{csize}", U32.pack(total) + U32.pack(csize) + rng.randbytes(8)
    if kind == 2:  # a command that is not a protobuf, or a deep one
        if rng.random() < 0.5:
            raw = rng.randbytes(rng.randrange(1, 40))
            return "random command", encode_frame(raw)
        depth = rng.choice((20, 64, 100, 101, 200, 1000))
        raw = _field(1, 0, COMMAND_TYPES["PING"]) + _nested(depth, rng.choice((3, 18, 1000)))
        return f"nested command depth {depth}", encode_frame(raw)
    if kind == 3:  # an unknown command type, or a known one without its body
        if rng.random() < 0.5:
            value = rng.choice((0, 1, 99, 1000, 1 << 31, (1 << 64) - 1))
            return f"type {value}", encode_frame(_field(1, 0, value))
        name = rng.choice(_COMMANDS)
        cmd = BaseCommand(type=COMMAND_TYPES[name])  # type: ignore[arg-type]
        if name in ("SEND", "MESSAGE"):
            return f"{name} without body", encode_frame(cmd, metadata=_meta(rng), payload=b"x")
        return f"{name} without body", encode_frame(cmd)
    if kind == 4:  # strings that are not UTF-8
        name, fields = rng.choice(_STRING_COMMANDS)
        return f"{name} invalid utf8", encode_frame(
            _spoil(command(name, **fields).SerializeToString(), rng)
        )
    if kind == 5:  # num_messages_in_batch 2**31 - 1 (or wrapped negative)
        count = rng.choice((0x7FFFFFFF, -0x80000000, -1, 0, 2, 1000))
        meta = _meta(rng, num_messages_in_batch=count)
        return f"batch of {count}", _send(meta, rng.randbytes(rng.randrange(40)), rng)
    if kind == 6:  # chunks that cannot add up
        meta = _meta(
            rng,
            uuid="u-" + str(rng.randrange(3)),
            num_chunks_from_msg=rng.choice(INTERESTING_I32),
            chunk_id=rng.choice(INTERESTING_I32),
            total_chunk_msg_size=rng.choice(INTERESTING_I32),
        )
        return "chunk out of range", _send(meta, rng.randbytes(rng.randrange(40)), rng)
    if kind == 7:
        return bomb_frame(rng)
    if kind == 8:  # a huge properties map
        meta = _meta(rng)
        n = rng.choice((100, 1000, 3000))
        for i in range(n):
            meta.properties.add(key=f"k{i}", value="v" * rng.randrange(8))
        return f"{n} properties", _send(meta, b"x", rng)
    if kind == 9:  # metadataSize past the frame
        frame = bytearray(_send(_meta(rng), rng.randbytes(8), rng, checksum=False))
        cmd_size = _u32_at(frame, 4)
        at = 8 + cmd_size
        frame[at : at + 4] = U32.pack(rng.choice(INTERESTING_U32))
        return "metadata_size lies", bytes(frame)
    if kind == 10:  # broker entry metadata whose size lies or does not decode
        entry = BrokerEntryMetadata(broker_timestamp=rng.choice(INTERESTING_U64), index=7)
        raw = entry.SerializeToString()
        if rng.random() < 0.5:
            raw = rng.randbytes(rng.randrange(1, 12))
        frame = bytearray(_send(_meta(rng), b"x", rng, broker_entry=raw))
        if rng.random() < 0.5:
            at = 8 + _u32_at(frame, 4) + 2
            frame[at : at + 4] = U32.pack(rng.choice(INTERESTING_U32))
        return "broker entry", bytes(frame)
    if kind == 11:  # times no date holds
        meta = _meta(rng, publish_time=rng.choice(INTERESTING_U64))
        meta.event_time = rng.choice(INTERESTING_U64)
        return "extreme times", _send(meta, b"x", rng)
    if kind == 12:  # a batch whose entries lie
        return "lying batch", _send(_meta(rng, num_messages_in_batch=3), lying_batch(rng), rng)
    if kind == 13:  # metadata with strings that are not UTF-8
        meta = _meta(rng, partition_key="QQQQ", producer_name="QQQQ")
        meta.properties.add(key="QQQQ", value="QQQQ")
        if rng.random() < 0.3:
            meta.encryption_keys.add(key="QQQQ", value=b"k")
        return "metadata invalid utf8", _send(_spoil(meta.SerializeToString(), rng), b"x", rng)
    name = rng.choice(_COMMANDS)  # a command with random fields appended
    extra = b"".join(
        _field(rng.randrange(1, 60), 0, rng.randrange(1 << 40))
        if rng.random() < 0.5
        else _field(rng.randrange(1, 60), 2, rng.randbytes(rng.randrange(12)))
        for _ in range(rng.randrange(1, 4))
    )
    raw = BaseCommand(type=COMMAND_TYPES[name]).SerializeToString() + extra  # type: ignore[arg-type]
    return f"{name} with random fields", encode_frame(raw)


def lying_batch(rng: Random) -> bytes:
    """Batch entries ([u32 size][SingleMessageMetadata][payload]) whose sizes may lie."""
    out = b""
    for i in range(rng.randrange(1, 5)):
        payload = rng.randbytes(rng.randrange(10))
        single = SingleMessageMetadata(payload_size=len(payload))
        if rng.random() < 0.3:
            single.payload_size = rng.choice(INTERESTING_I32)
        if rng.random() < 0.3:
            single.partition_key = "QQQQ"
            single.properties.add(key=f"k{i}", value="QQQQ")
        raw = _spoil(single.SerializeToString(), rng)
        size = len(raw) if rng.random() < 0.8 else rng.choice(INTERESTING_U32)
        out += U32.pack(size) + raw + payload
    return out


# --------------------------------------------------------------------------- record ops

RecordOp = Callable[[Random, list[Rec], Sequence[Rec]], str | None]


def op_payload_flip(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = _with_payload(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    n = _flips(rng)
    recs[i] = recs[i]._replace(data=flip_bits(rng, recs[i].data, s.payload, s.end, n))
    return f"payload_flip#{i}x{n}"


def op_payload_field(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    """A size field at the payload's start (totalSize, commandSize) or a random u32."""
    idx = _with_payload(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    if s.end - s.payload < 4:
        return None
    pos = s.payload + rng.choice((0, 0, 4, rng.randrange(s.end - s.payload - 3)))
    pos = min(pos, s.end - 4)
    value = rng.choice(INTERESTING_U32)
    recs[i] = recs[i]._replace(data=_put(recs[i].data, pos, U32.pack(value)))
    return f"payload_u32#{i}@{pos - s.payload}={value}"


def op_payload_insert(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = _with_payload(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    old = recs[i].data[s.payload : s.end]
    at = rng.randrange(len(old) + 1)
    extra = rng.randbytes(rng.randrange(1, 64)) if rng.random() < 0.5 else old[at : at + 40]
    edit_payload(recs, i, old[:at] + extra + old[at:])
    return f"payload_insert#{i}@{at}+{len(extra)}"


def op_payload_delete(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = _with_payload(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    old = recs[i].data[s.payload : s.end]
    at = rng.randrange(len(old))
    n = rng.randrange(1, min(64, len(old) - at) + 1) if rng.random() < 0.7 else len(old) - at
    edit_payload(recs, i, old[:at] + old[at + n :])
    return f"payload_delete#{i}@{at}-{n}"


def op_inject_frame(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = _with_payload(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    old = recs[i].data[s.payload : s.end]
    name, frame = adversarial_frame(rng)
    if len(frame) > 65000:
        frame = frame[:65000]
    how = rng.randrange(3)
    new = (frame, frame + old, old + frame)[how]
    edit_payload(recs, i, new)
    return f"inject#{i}:{('replace', 'before', 'after')[how]}:{name}"


def op_header_flip(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if not recs:
        return None
    i = rng.randrange(len(recs))
    s = tcp_span(recs[i])
    end = s.payload if s is not None else len(recs[i].data)
    n = _flips(rng)
    recs[i] = recs[i]._replace(data=flip_bits(rng, recs[i].data, 0, end, n))
    return f"header_flip#{i}x{n}"


def op_seq(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = _tcp_indices(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    field = rng.choice((4, 8))  # seq or ack
    delta = rng.choice((1, -1, 1000, -1000, 1 << 31, (1 << 31) - 1, rng.randrange(1 << 32)))
    value = (_u32_at(recs[i].data, s.tcp + field) + delta) & MASK32
    recs[i] = recs[i]._replace(data=_put(recs[i].data, s.tcp + field, U32.pack(value)))
    return f"{'seq' if field == 4 else 'ack'}#{i}{delta:+d}"


def op_seq_wrap(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    """Move one direction's sequence numbers (and the peer's acks) so that they wrap past
    2**32 in the middle of the window."""
    idx = _with_payload(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    rec = recs[i]
    s = tcp_span(rec)
    assert s is not None
    flow = flow_of(rec, s)
    back = (flow[1], flow[0], flow[3], flow[2])
    seq = _u32_at(rec.data, s.tcp + 4)
    delta = ((1 << 32) - seq - rng.randrange(max(1, s.end - s.payload))) & MASK32
    for j, other in enumerate(recs):
        t = tcp_span(other)
        if t is None:
            continue
        f = flow_of(other, t)
        d = other.data
        if f == flow:
            d = _put(d, t.tcp + 4, U32.pack((_u32_at(d, t.tcp + 4) + delta) & MASK32))
        elif f == back and d[t.tcp + 13] & ACK:
            d = _put(d, t.tcp + 8, U32.pack((_u32_at(d, t.tcp + 8) + delta) & MASK32))
        recs[j] = other._replace(data=d)
    return f"seq_wrap#{i}"


def op_flags(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = _tcp_indices(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    flag = rng.choice((FIN, SYN, RST, PSH, ACK))
    d = recs[i].data
    recs[i] = recs[i]._replace(data=_put(d, s.tcp + 13, bytes([d[s.tcp + 13] ^ flag])))
    return f"flag#{i}^{flag}"


def op_drop(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if len(recs) < 2:
        return None
    i = rng.randrange(len(recs))
    n = rng.choice((1, 1, 1, 2, 3, 5))
    del recs[i : i + n]
    return f"drop#{i}x{n}"


def op_duplicate(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if not recs:
        return None
    i = rng.randrange(len(recs))
    rec = recs[i]
    changed = ""
    s = tcp_span(rec)
    if s is not None and s.end > s.payload and rng.random() < 0.3:  # a retransmission that differs
        rec = rec._replace(data=flip_bits(rng, rec.data, s.payload, s.end, 1))
        changed = "~"
    j = rng.randrange(i, len(recs) + 1)
    recs.insert(j, rec)
    return f"dup#{i}->{j}{changed}"


def op_shuffle(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if len(recs) < 2:
        return None
    i = rng.randrange(len(recs) - 1)
    n = rng.randrange(2, min(10, len(recs) - i) + 1)
    part = recs[i : i + n]
    rng.shuffle(part)
    recs[i : i + n] = part
    return f"shuffle#{i}x{n}"


def op_splice(rng: Random, recs: list[Rec], donor: Sequence[Rec]) -> str | None:
    """Packets of another capture inserted, or interleaved one by one."""
    if not donor:
        return None
    n = rng.randrange(1, min(len(donor), 20) + 1)
    start = rng.randrange(len(donor) - n + 1)
    part = list(donor[start : start + n])
    if rng.random() < 0.5:
        at = rng.randrange(len(recs) + 1)
        recs[at:at] = part
        return f"splice@{at}+{n}"
    merged: list[Rec] = []
    a, b = list(recs), part
    while a or b:
        src = a if (a and (not b or rng.random() < 0.5)) else b
        merged.append(src.pop(0))
    recs[:] = merged
    return f"interleave+{n}"


def op_snap(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if not recs:
        return None
    i = rng.randrange(len(recs))
    rec = recs[i]
    keep = rng.randrange(len(rec.data) + 1)
    recs[i] = rec._replace(data=rec.data[:keep])
    return f"snap#{i}={keep}"


def op_orig_len(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if not recs:
        return None
    i = rng.randrange(len(recs))
    n = len(recs[i].data)
    value = rng.choice((0, max(0, n - 1), n + 1, n + 1000, 1 << 31, MASK32))
    recs[i] = recs[i]._replace(orig_len=value)
    return f"orig_len#{i}={value}"


def op_ts(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    if not recs:
        return None
    i = rng.randrange(len(recs))
    ts = recs[i].ts
    value = rng.choice(
        (0, ts - 3_600_000_000, ts - 1, ts + 10**9, MAX_TS_US, MAX_TS_US + 1, (1 << 63) - 1)
    )
    recs[i] = recs[i]._replace(ts=max(0, value))
    return f"ts#{i}={value}"


def _link_header(linktype: int, v6: bool, rng: Random) -> tuple[int, bytes]:
    etype = b"\x86\xdd" if v6 else b"\x08\x00"
    if linktype == ETHER:  # 802.1Q / 802.1ad tags (TPID, TCI) between addresses and type
        tags = b"".join(
            rng.choice((b"\x81\x00", b"\x88\xa8", b"\x91\x00")) + rng.randbytes(2)
            for _ in range(rng.randrange(3))
        )
        return ETHER, bytes.fromhex("020000000002020000000001") + tags + etype
    if linktype == SLL:
        return SLL, b"\x00\x00\x00\x01\x00\x06" + bytes(8) + etype
    if linktype == SLL2:
        return SLL2, etype + b"\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x01\x00\x06" + bytes(8)
    if linktype in (NULL, LOOP):
        family = rng.choice((24, 28, 30)) if v6 else 2
        order = "<" if linktype == NULL and rng.random() < 0.8 else ">"
        return linktype, struct.pack(order + "I", family)
    return (RAW4 if not v6 and rng.random() < 0.3 else RAW), b""


def op_relink(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    """Every packet carried by another link layer (as other capture points write them)."""
    target = rng.choice((ETHER, SLL, SLL2, NULL, LOOP, RAW))
    out = []
    for rec in recs:
        ip = l3_start(rec.linktype, rec.data)
        if ip < 0:
            out.append(rec)
            continue
        v6 = len(rec.data) > ip and rec.data[ip] >> 4 == 6
        link, head = _link_header(target, v6, rng)
        data = head + rec.data[ip:]
        out.append(rec._replace(linktype=link, data=data, orig_len=rec.orig_len - ip + len(head)))
    recs[:] = out
    return f"relink={target}"


def op_ipv6(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    """Every IPv4 TCP packet as IPv6 (addresses mapped), sometimes behind an extension."""
    ext = rng.random() < 0.3
    out = []
    for rec in recs:
        s = tcp_span(rec)
        if s is None or s.v6:
            out.append(rec)
            continue
        d = rec.data
        src = b"\x20\x01\x0d\xb8" + bytes(8) + d[s.ip + 12 : s.ip + 16]
        dst = b"\x20\x01\x0d\xb8" + bytes(8) + d[s.ip + 16 : s.ip + 20]
        tcp = d[s.tcp : s.end]
        nxt, extra = 6, b""
        if ext:  # hop-by-hop options: 8 bytes, next header TCP
            nxt, extra = 0, b"\x06\x00" + bytes(6)
        head = struct.pack(">IHBB", 0x60000000, len(extra) + len(tcp), nxt, 64) + src + dst
        link = d[: s.ip]
        if rec.linktype == ETHER and len(link) >= 14:
            link = link[:-2] + b"\x86\xdd"
        data = link + head + extra + tcp
        out.append(rec._replace(data=data, orig_len=len(data)))
    recs[:] = out
    return f"ipv6{'+ext' if ext else ''}"


def op_ip_fragment(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    idx = [i for i in _tcp_indices(recs) if not (s := tcp_span(recs[i])) or not s.v6]
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    value = rng.choice((0x2000, 0x0001, 0x2010, 0x4000))
    recs[i] = recs[i]._replace(data=_put(recs[i].data, s.ip + 6, struct.pack(">H", value)))
    return f"ip_frag#{i}={value:#x}"


def op_port(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    """One port of a connection changed in all its packets (TLS port, non-broker, 0)."""
    idx = _tcp_indices(recs)
    if not idx:
        return None
    i = rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    old = recs[i].data[s.tcp + 2 : s.tcp + 4]
    new = struct.pack(">H", rng.choice((6651, 6650, 8080, 0, 65535, 443)))
    for j, rec in enumerate(recs):
        t = tcp_span(rec)
        if t is None:
            continue
        d = rec.data
        for at in (t.tcp, t.tcp + 2):
            if d[at : at + 2] == old:
                d = _put(d, at, new)
        recs[j] = rec._replace(data=d)
    return f"port {int.from_bytes(old, 'big')}->{int.from_bytes(new, 'big')}"


#: PROXY headers and a TLS ClientHello start, as the client stream may begin.
_PREAMBLES = (
    b"PROXY TCP4 10.0.0.1 10.0.0.2 5555 6650\r\n",
    b"PROXY TCP6 ::1 ::2 5555 6650\r\n",
    b"PROXY UNKNOWN\r\n",
    b"PROXY TCP4 999.0.0.1 x 1 2\r\n",
    b"PROXY " + b"A" * 120,
    b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c" + bytes(12),
    b"\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24" + bytes(36),
    b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\xff\xff",
    b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00",
    bytes.fromhex("160301002e0100002a0303") + bytes(32) + b"\x00\x00\x02\x13\x01",
    b"\x16\x03",
)


def op_preamble(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    """A PROXY header (valid or not) or a TLS ClientHello before a stream's first bytes."""
    idx = _with_payload(recs)
    if not idx:
        return None
    i = idx[0] if rng.random() < 0.7 else rng.choice(idx)
    s = tcp_span(recs[i])
    assert s is not None
    pre = rng.choice(_PREAMBLES)
    if rng.random() < 0.2:
        pre = flip_bits(rng, pre, 0, len(pre), 1)
    edit_payload(recs, i, pre + recs[i].data[s.payload : s.end])
    return f"preamble#{i}:{pre[:12]!r}"


def op_garbage_record(rng: Random, recs: list[Rec], _d: Sequence[Rec]) -> str | None:
    at = rng.randrange(len(recs) + 1)
    ts = recs[min(at, len(recs) - 1)].ts if recs else 0
    link = rng.choice((ETHER, ETHER, RAW, SLL, 147, 65535))
    data = rng.randbytes(rng.randrange(80))
    recs.insert(at, Rec(ts, link, data, len(data)))
    return f"garbage_record@{at}/{link}"


#: Record operations with their weights (payload damage first: what the issue saw most).
RECORD_OPS: tuple[tuple[RecordOp, int], ...] = (
    (op_payload_flip, 10),
    (op_payload_field, 5),
    (op_payload_insert, 4),
    (op_payload_delete, 4),
    (op_inject_frame, 5),
    (op_header_flip, 3),
    (op_seq, 2),
    (op_seq_wrap, 2),
    (op_flags, 2),
    (op_drop, 3),
    (op_duplicate, 3),
    (op_shuffle, 3),
    (op_splice, 2),
    (op_snap, 2),
    (op_orig_len, 1),
    (op_ts, 1),
    (op_relink, 1),
    (op_ipv6, 1),
    (op_ip_fragment, 1),
    (op_port, 1),
    (op_preamble, 2),
    (op_garbage_record, 1),
)
_OPS = [op for op, _ in RECORD_OPS]
_WEIGHTS = [w for _, w in RECORD_OPS]


def window(rng: Random, records: Sequence[Rec], limit: int = MAX_WINDOW) -> list[Rec]:
    """A run of at most `limit` packets (and MAX_WINDOW_BYTES bytes), often from the start."""
    n = rng.randrange(1, min(limit, len(records)) + 1)
    start = 0 if rng.random() < 0.4 else rng.randrange(len(records) - n + 1)
    out: list[Rec] = []
    size = 0
    for rec in records[start : start + n]:
        size += len(rec.data)
        if out and size > MAX_WINDOW_BYTES:
            break
        out.append(rec)
    return out


def mutate_records(
    rng: Random, recs: list[Rec], donor: Sequence[Rec], ops: Ops, count: int | None = None
) -> list[Rec]:
    """Apply `count` (default 0 to 4, mostly 1 or 2) record operations in place."""
    if count is None:
        count = rng.choice((0, 1, 1, 1, 2, 2, 3, 4))
    for op in rng.choices(_OPS, _WEIGHTS, k=count):
        done = op(rng, recs, donor)
        if done is not None:
            ops.append(done)
    return recs


# --------------------------------------------------------------------------- writing


class Layout(NamedTuple):
    """Where the records (pcap) or blocks (pcapng) of a written file start and end."""

    kind: str  # "pcap" or "pcapng"
    order: str  # "<" or ">"
    spans: list[tuple[int, int, int]]  # (offset, length, block type; 0 for pcap records)


def write_pcap(rng: Random, recs: Sequence[Rec], ops: Ops) -> tuple[bytes, Layout]:
    order = "<" if rng.random() < 0.85 else ">"
    nano = rng.random() < 0.2
    link = recs[0].linktype if recs else ETHER
    snaplen = rng.choice((262144, 262144, 65535, 0, 1 << 31))
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    parts = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, link)]
    spans, at = [], 24
    rec_struct = struct.Struct(order + "IIII")
    for rec in recs:
        sec, frac = divmod(rec.ts, 1_000_000)
        if nano:
            frac *= 1000
        head = rec_struct.pack(sec & MASK32, frac, len(rec.data), rec.orig_len & MASK32)
        parts.append(head + rec.data)
        spans.append((at, 16 + len(rec.data), 0))
        at += 16 + len(rec.data)
    ops.append(f"pcap{order}{'ns' if nano else 'us'}")
    return b"".join(parts), Layout("pcap", order, spans)


def _block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    length = struct.pack(order + "I", 12 + len(body))
    return struct.pack(order + "I", btype) + length + body + length


def _option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def write_pcapng(rng: Random, recs: Sequence[Rec], ops: Ops) -> tuple[bytes, Layout]:
    order = "<" if rng.random() < 0.8 else ">"
    links = sorted({r.linktype & 0xFFFF for r in recs}) or [ETHER]
    resol = rng.choice((6, 6, 6, 9, 3, 0x80 | 20, 0, 0x80 | 10, 19))
    offset_s = rng.choice((0, 0, 0, 3600, -3600))
    blocks: list[tuple[int, bytes]] = []

    def section() -> None:
        section_len = rng.choice((-1, -1, 0, 1 << 40))
        blocks.append((0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, section_len)))
        for link in links:
            opts = b""
            if resol != 6:
                opts += _option(order, 9, bytes([resol]))
            if offset_s:
                opts += _option(order, 14, struct.pack(order + "q", offset_s))
            if opts or rng.random() < 0.1:
                opts += _option(order, 2, b"eth0") + _option(order, 0, b"")
            snap = rng.choice((0, 262144, 65535))
            blocks.append((1, struct.pack(order + "HHI", link, 0, snap) + opts))

    section()
    for n, rec in enumerate(recs):
        iface = links.index(rec.linktype & 0xFFFF)
        if n and rng.random() < 0.01:
            section()  # a second section restarts the interfaces
        if rng.random() < 0.02:
            btype = rng.choice((4, 5, 0x0A, 0xBAD, 0x40000BAD, 7))
            blocks.append((btype, rng.randbytes(rng.randrange(0, 24))))
        units = _ts_units(rec.ts - offset_s * 1_000_000, resol)
        kind = rng.random()
        if kind < 0.02 and iface == 0:  # Simple Packet Block: no time, no interface
            blocks.append((3, struct.pack(order + "I", rec.orig_len & MASK32) + rec.data))
            continue
        head = (iface, units >> 32 & MASK32, units & MASK32, len(rec.data), rec.orig_len & MASK32)
        if kind < 0.04:  # obsolete Packet Block
            body = struct.pack(order + "HHIIII", head[0], 0, *head[1:])
            blocks.append((2, body + rec.data))
            continue
        body = struct.pack(order + "IIIII", *head) + rec.data
        if rng.random() < 0.03:
            body += b"\0" * (-len(body) % 4) + _option(order, 1, b"c") + _option(order, 0, b"")
        blocks.append((6, body))
    out, spans, at = [], [], 0
    for btype, body in blocks:
        raw = _block(order, btype, body)
        out.append(raw)
        spans.append((at, len(raw), btype))
        at += len(raw)
    ops.append(f"pcapng{order} tsresol={resol}")
    return b"".join(out), Layout("pcapng", order, spans)


def _ts_units(ts_us: int, resol: int) -> int:
    if resol & 0x80:
        units = ts_us * (1 << (resol & 0x7F)) // 1_000_000
    else:
        exp = resol - 6
        units = ts_us * 10**exp if exp >= 0 else ts_us // 10 ** (-exp)
    return max(0, units) & ((1 << 64) - 1)


# ------------------------------------------------------------------------ file damage


def _file_flip(rng: Random, data: bytes, layout: Layout, ops: Ops) -> bytes:
    n = _flips(rng)
    ops.append(f"file_flip x{n}")
    return flip_bits(rng, data, 0, len(data), n)


def _file_truncate(rng: Random, data: bytes, layout: Layout, ops: Ops) -> bytes:
    if not data:
        return data
    if layout.spans and rng.random() < 0.5:  # inside or at the edge of a record
        at, length, _ = rng.choice(layout.spans)
        cut = at + rng.choice((0, 1, 4, 8, 12, 15, 16, 17, max(0, length - 1), length // 2))
    else:
        cut = rng.randrange(len(data))
    ops.append(f"truncate@{cut}/{len(data)}")
    return data[:cut]


def _pcap_lengths(rng: Random, data: bytes, layout: Layout, ops: Ops) -> bytes:
    """A record header whose caplen or len lies (past the file end, above 2**31, ...)."""
    if layout.kind != "pcap" or not layout.spans:
        return data
    at, length, _ = rng.choice(layout.spans)
    caplen = length - 16
    if rng.random() < 0.7:
        value = rng.choice(
            (
                len(data) - at - 16 + rng.randrange(1, 100),
                1 << 31,
                (1 << 31) + 1,
                MASK32,
                MAX_RECORD_SIZE,
                MAX_RECORD_SIZE + 1,
                0,
                caplen + 1,
                max(0, caplen - 1),
            )
        )
        field, what = 8, "caplen"
    else:
        value = rng.choice((0, max(0, caplen - 1), 1 << 31, MASK32, caplen + 1))
        field, what = 12, "len"
    ops.append(f"pcap_{what}@{at}={value}")
    return _put(data, at + field, struct.pack(layout.order + "I", value & MASK32))


def _pcap_header(rng: Random, data: bytes, layout: Layout, ops: Ops) -> bytes:
    if layout.kind != "pcap" or len(data) < 24:
        return data
    o = layout.order
    field = rng.randrange(4)
    if field == 0:  # the other resolution or byte order
        magic = rng.choice((b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1"))
        ops.append(f"pcap_magic={magic.hex()}")
        return magic + data[4:]
    if field == 1:
        ops.append("pcap_version")
        return _put(data, 4, struct.pack(o + "HH", rng.randrange(9), rng.randrange(9)))
    if field == 2:
        value = rng.choice((0, 1, 64, MASK32))
        ops.append(f"pcap_snaplen={value}")
        return _put(data, 16, struct.pack(o + "I", value))
    link = rng.choice((0, 101, 113, 276, 147, 0x10000001, 0xFFFF, 105, 228, 229))
    ops.append(f"pcap_linktype={link}")
    return _put(data, 20, struct.pack(o + "I", link))


def _pcapng_block(rng: Random, data: bytes, layout: Layout, ops: Ops) -> bytes:
    """One pcapng block corrupted: type, leading or trailing length, or a header field."""
    if layout.kind != "pcapng" or not layout.spans:
        return data
    at, length, btype = rng.choice(layout.spans)
    o = layout.order
    what = rng.randrange(6)
    if what == 0:
        value = rng.choice((0, 1, 2, 3, 5, 6, 0x0A0D0D0A, 0xDEADBEEF, 0x80000006))
        ops.append(f"pcapng_type@{at}:{btype}->{value}")
        return _put(data, at, struct.pack(o + "I", value))
    if what in (1, 2, 3):
        value = (
            rng.choice(
                (
                    0,
                    4,
                    8,
                    12,
                    13,
                    length - 4,
                    length + 4,
                    length + 1,
                    1 << 31,
                    MASK32,
                    MAX_RECORD_SIZE + 4,
                )
            )
            & MASK32
        )
        where = ("leading", "trailing", "both")[what - 1]
        ops.append(f"pcapng_len_{where}@{at}:{btype}={value}")
        if what in (1, 3):
            data = _put(data, at + 4, struct.pack(o + "I", value))
        if what in (2, 3):
            data = _put(data, at + length - 4, struct.pack(o + "I", value))
        return data
    if what == 4:  # the block's first body fields: interface, times, caplen, len, options
        n = _flips(rng)
        ops.append(f"pcapng_body_flip@{at}:{btype}x{n}")
        return flip_bits(rng, data, at + 8, min(at + length - 4, at + 36), n)
    if btype == 1:  # interface: link type, snap length, tsresol
        pos = rng.choice((8, 12))
        value = rng.choice((0, 147, 0xFFFF, 1, MASK32)) if pos == 8 else rng.choice((0, 1, 14))
        fmt = o + ("H" if pos == 8 else "I")
        ops.append(f"pcapng_idb@{at}+{pos}={value}")
        return _put(data, at + pos, struct.pack(fmt, value & (0xFFFF if pos == 8 else MASK32)))
    if btype == 6 and length >= 32:  # interface id or caplen past the block
        pos = rng.choice((8, 20, 24))
        value = rng.choice((1, 7, 1 << 31, MASK32, length))
        ops.append(f"pcapng_epb@{at}+{pos}={value}")
        return _put(data, at + pos, struct.pack(o + "I", value))
    if btype == 0x0A0D0D0A:  # byte-order magic or version
        pos = rng.choice((8, 12))
        ops.append(f"pcapng_shb@{at}+{pos}")
        return _put(data, at + pos, rng.randbytes(4))
    return _file_flip(rng, data, layout, ops)


def _splice_bytes(rng: Random, data: bytes, donor: bytes, ops: Ops) -> bytes:
    cut = rng.randrange(len(data) + 1)
    start = rng.randrange(len(donor) + 1)
    ops.append(f"byte_splice@{cut}+donor[{start}:]")
    return data[:cut] + donor[start:]


def _append_garbage(rng: Random, data: bytes, layout: Layout, ops: Ops) -> bytes:
    if rng.random() < 0.5 or not layout.spans:
        extra = rng.randbytes(rng.randrange(1, 40))
    else:
        at, length, _ = rng.choice(layout.spans)
        extra = data[at : at + rng.randrange(1, length + 1)]
    ops.append(f"append {len(extra)}")
    return data + extra


def _gzip(rng: Random, data: bytes, ops: Ops) -> bytes:
    packed = gzip.compress(data, compresslevel=1, mtime=0)
    how = rng.randrange(5)
    if how == 0 and packed:
        cut = rng.randrange(len(packed))
        ops.append(f"gzip cut@{cut}/{len(packed)}")
        return packed[:cut]
    if how == 1 and len(packed) > 10:
        ops.append("gzip flip")
        return flip_bits(rng, packed, 10, len(packed), 1)
    if how == 2:
        ops.append("gzip + junk")
        return packed + rng.randbytes(rng.randrange(1, 20))
    ops.append("gzip")
    return packed


FileOp = Callable[[Random, bytes, Layout, Ops], bytes]
FILE_OPS: tuple[tuple[FileOp, int], ...] = (
    (_file_flip, 5),
    (_file_truncate, 4),
    (_pcap_lengths, 4),
    (_pcap_header, 1),
    (_pcapng_block, 4),
    (_append_garbage, 1),
)


def write_capture(rng: Random, recs: Sequence[Rec], ops: Ops) -> tuple[bytes, Layout]:
    """The records as a pcap (mostly) or pcapng file."""
    if rng.random() < 0.3:
        return write_pcapng(rng, recs, ops)
    return write_pcap(rng, recs, ops)


def mutate_capture(
    rng: Random, records: Sequence[Rec], donor: Sequence[Rec], *, gz: bool = False
) -> tuple[bytes, int, Ops]:
    """A corrupted capture file made of a window of `records`.

    Returns (file bytes, size before gzip, operations). `donor` is another sample's packets
    (for splices). gz: the sample itself was gzip-compressed (so is its mutant, mostly).
    """
    ops: Ops = []
    recs = window(rng, records)
    other = window(rng, donor) if donor else []
    mutate_records(rng, recs, other, ops)
    data, layout = write_capture(rng, recs, ops)
    roll = rng.random()
    if roll < 0.55:  # file-level damage as well
        ops_f, weights = zip(*FILE_OPS, strict=True)
        for op in rng.choices(ops_f, weights, k=rng.choice((1, 1, 1, 2))):
            data = op(rng, data, layout, ops)
    elif roll < 0.6 and other:
        donor_bytes, _ = write_capture(rng, other, [])
        data = _splice_bytes(rng, data, donor_bytes, ops)
    size = len(data)
    if (gz and rng.random() < 0.8) or rng.random() < 0.05:
        data = _gzip(rng, data, ops)
    return data, size, ops


# --------------------------------------------------------------------------- streams


def mutate_stream(
    rng: Random, stream: bytes, offsets: Sequence[int], donor: bytes
) -> tuple[bytes, Ops]:
    """A window of a Pulsar byte stream (frame offsets known), damaged 1 to 4 times."""
    ops: Ops = []
    if len(stream) > MAX_STREAM_BYTES or rng.random() < 0.5:
        starts = [o for o in offsets if o < len(stream)] or [0]
        start = rng.choice(starts) if rng.random() < 0.8 else rng.randrange(len(stream) + 1)
        length = rng.randrange(1, MAX_STREAM_BYTES)
        data = stream[start : start + length]
        ops.append(f"window {start}+{len(data)}")
        offsets = [o - start for o in offsets if start <= o < start + len(data)]
    else:
        data = stream
    for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4))):
        data = _stream_op(rng, data, offsets, donor, ops)
    return data, ops


def _stream_op(rng: Random, data: bytes, offsets: Sequence[int], donor: bytes, ops: Ops) -> bytes:
    what = rng.randrange(11)
    n = len(data)
    frame_at = rng.choice(offsets) if offsets and rng.random() < 0.8 else rng.randrange(n + 1)
    frame_at = min(frame_at, n)
    if what == 0 and n:
        k = _flips(rng)
        ops.append(f"flip x{k}")
        return flip_bits(rng, data, 0, n, k)
    if what == 1 and n >= 8:  # a size field of a frame, or a u32 inside one
        pos = min(frame_at + rng.choice((0, 0, 4, 8 + rng.randrange(24))), n - 4)
        value = rng.choice(INTERESTING_U32)
        ops.append(f"u32@{pos}={value}")
        return _put(data, pos, U32.pack(value))
    if what == 2:
        extra = rng.randbytes(rng.randrange(1, 64))
        ops.append(f"insert@{frame_at}+{len(extra)}")
        return data[:frame_at] + extra + data[frame_at:]
    if what == 3 and n:
        k = rng.randrange(1, min(n, 200) + 1)
        at = rng.randrange(n)
        ops.append(f"delete@{at}-{k}")
        return data[:at] + data[at + k :]
    if what == 4:
        name, frame = adversarial_frame(rng)
        ops.append(f"inject@{frame_at}:{name}")
        return data[:frame_at] + frame + data[frame_at:]
    if what == 5 and offsets:  # a whole frame twice, or gone
        i = rng.randrange(len(offsets))
        start = offsets[i]
        end = offsets[i + 1] if i + 1 < len(offsets) else n
        if rng.random() < 0.5:
            ops.append(f"dup frame@{start}")
            return data[:end] + data[start:end] + data[end:]
        ops.append(f"drop frame@{start}")
        return data[:start] + data[end:]
    if what == 6 and offsets:  # the second half of a frame gone
        i = rng.randrange(len(offsets))
        start = offsets[i]
        end = offsets[i + 1] if i + 1 < len(offsets) else n
        cut = start + rng.randrange(max(1, end - start))
        ops.append(f"cut frame@{start}:{cut - start}")
        return data[:cut] + data[end:]
    if what == 7 and donor:
        start = rng.randrange(len(donor))
        piece = donor[start : start + rng.randrange(1, 4000)]
        ops.append(f"splice@{frame_at}+{len(piece)}")
        return data[:frame_at] + piece + data[frame_at:]
    if what == 8 and n:
        cut = rng.randrange(n)
        ops.append(f"truncate@{cut}")
        return data[:cut]
    if what == 9:
        garbage = rng.randbytes(rng.randrange(1, 40))
        ops.append(f"prefix {len(garbage)}")
        return garbage + data
    if what == 10 and n:  # a byte set to a value that starts varints or sizes
        pos = rng.randrange(n)
        value = rng.choice((0x00, 0x08, 0x0E, 0x7F, 0x80, 0xFF))
        ops.append(f"byte@{pos}={value:#x}")
        return _put(data, pos, bytes([value]))
    return data


# --------------------------------------------------------------------------- payloads


class PayloadFrame(NamedTuple):
    """The parts of one SEND or MESSAGE frame, to be changed and encoded again."""

    command: bytes  # serialized BaseCommand
    metadata: bytes  # serialized MessageMetadata
    payload: bytes
    broker_entry: bytes | None
    checksum: bool


def _decompressed(meta: MessageMetadata, payload: bytes) -> bytes | None:
    """A seed's payload decompressed with the dissector's own bounded decoder (None when it
    does not decompress): cramjam called directly aborts the process when a damaged size
    asks for more memory than it can have."""
    size = meta.uncompressed_size if meta.HasField("uncompressed_size") else None
    plain, _ = decompress(meta.compression, payload, size, DEFAULT_MAX_UNCOMPRESSED)
    return None if plain is None else bytes(plain)


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "ZLIB":
        return zlib.compress(data)
    if codec == "ZSTD":
        return bytes(cramjam.zstd.compress(data))
    if codec == "SNAPPY":
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == "LZ4":
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    return data


def _mutate_meta(rng: Random, meta: MessageMetadata, payload: bytes, ops: Ops) -> bytes:
    """Change one field of the metadata (or the payload with it); returns the payload."""
    what = rng.randrange(12)
    if what == 0:
        meta.uncompressed_size = rng.choice(INTERESTING_U32 + (len(payload), len(payload) + 1))
        ops.append(f"uncompressed_size={meta.uncompressed_size}")
    elif what == 1:
        meta.num_messages_in_batch = rng.choice(INTERESTING_I32)
        ops.append(f"num_messages_in_batch={meta.num_messages_in_batch}")
    elif what == 2:
        meta.uuid = rng.choice(("u", "u-1", meta.uuid or "x"))
        meta.num_chunks_from_msg = rng.choice(INTERESTING_I32)
        meta.chunk_id = rng.choice(INTERESTING_I32)
        meta.total_chunk_msg_size = rng.choice(INTERESTING_I32 + (len(payload),))
        ops.append(
            f"chunk {meta.chunk_id}/{meta.num_chunks_from_msg} total {meta.total_chunk_msg_size}"
        )
    elif what == 3:  # recompressed with another codec (right sizes): every decoder runs
        plain = _decompressed(meta, payload)
        if plain is not None:
            codec = rng.choice(_CODECS + ("NONE",))
            payload = _compress(codec, plain)
            meta.compression = COMPRESSION_TYPES[codec]  # type: ignore[assignment]
            meta.uncompressed_size = len(plain)
            ops.append(f"recompress {codec}")
    elif what == 4:
        meta.compression = rng.choice(list(COMPRESSION_TYPES.values()))  # type: ignore[assignment]
        ops.append(f"compression={meta.compression}")
    elif what == 5:
        n = rng.choice((1, 10, 500))
        for i in range(n):
            meta.properties.add(key=f"k{i}", value=str(i))
        ops.append(f"+{n} properties")
    elif what == 6:
        meta.encryption_keys.add(key="key", value=b"v")
        ops.append("encrypted")
    elif what == 7:
        meta.publish_time = rng.choice(INTERESTING_U64)
        meta.event_time = rng.choice(INTERESTING_U64)
        ops.append(f"times {meta.publish_time}/{meta.event_time}")
    elif what == 8:
        k = _flips(rng)
        payload = flip_bits(rng, payload, 0, len(payload), k)
        ops.append(f"payload flip x{k}")
    elif what == 9 and payload:
        cut = rng.randrange(len(payload))
        payload = payload[:cut] if rng.random() < 0.5 else payload[:cut] + payload[cut + 1 :]
        ops.append(f"payload cut@{cut}")
    elif what == 10:
        payload = lying_batch(rng)
        meta.num_messages_in_batch = rng.randrange(1, 6)
        meta.compression = 0  # type: ignore[assignment]
        ops.append("lying batch")
    else:
        meta.partition_key = "k"
        meta.ordering_key = rng.randbytes(4)
        meta.schema_version = rng.randbytes(4)
        meta.null_value = rng.random() < 0.5
        meta.partition_key_b64_encoded = rng.random() < 0.5
        ops.append("keys")
    return payload


def mutate_payload_frames(rng: Random, run: Sequence[PayloadFrame], ops: Ops) -> list[PayloadFrame]:
    """A run of payload frames (one connection's), each changed with probability 1/2."""
    out = []
    for pf in run:
        if rng.random() < 0.5:
            out.append(pf)
            continue
        meta = MessageMetadata()
        meta.ParseFromString(pf.metadata)
        payload = pf.payload
        for _ in range(rng.choice((1, 1, 2, 3))):
            payload = _mutate_meta(rng, meta, payload, ops)
        raw = meta.SerializePartialToString()
        roll = rng.random()
        if roll < 0.1:  # bytes of the metadata themselves
            raw = flip_bits(rng, raw, 0, len(raw), 1)
            ops.append("metadata flip")
        elif roll < 0.15:
            raw += _field(rng.randrange(1, 40), 0, rng.randrange(1 << 20))
            ops.append("metadata + raw field")
        out.append(pf._replace(metadata=raw, payload=payload))
    if rng.random() < 0.3:
        name, frame = bomb_frame(rng) if rng.random() < 0.5 else adversarial_frame(rng)
        ops.append(f"+{name}")
        out.insert(rng.randrange(len(out) + 1), _as_payload_frame(frame))
    if len(out) > 1 and rng.random() < 0.2:
        i, j = rng.randrange(len(out)), rng.randrange(len(out))
        out[i], out[j] = out[j], out[i]
        ops.append("swap")
    return out


def _as_payload_frame(frame: bytes) -> PayloadFrame:
    """A frame kept as its raw bytes (command field), encoded as they are."""
    return PayloadFrame(frame, b"", b"", None, False)


def encode_payload_frames(frames: Sequence[PayloadFrame]) -> bytes:
    out = []
    for pf in frames:
        if not pf.metadata and not pf.payload and pf.broker_entry is None:
            out.append(pf.command)  # a raw frame
            continue
        out.append(
            encode_frame(
                pf.command,
                metadata=pf.metadata,
                payload=pf.payload,
                broker_entry=pf.broker_entry,
                checksum=pf.checksum,
            )
        )
    return b"".join(out)
