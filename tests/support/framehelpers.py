"""Test helpers: feed a stream to a FrameDecoder in given pieces and collect what comes out,
and frames computed by hand from the spec (the expected bytes of the framing tests)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from crc32c import crc32c

from dissector import Anomaly, Frame, FrameDecoder
from dissector.events import Decoded
from dissector.pulsar.framing import plain


def decode(
    pieces: Iterable[bytes], *, decoder: FrameDecoder | None = None, close: bool = True
) -> tuple[list[Frame], list[Anomaly], FrameDecoder]:
    dec = decoder or FrameDecoder()
    events = []
    for i, piece in enumerate(pieces, start=1):
        events.extend(dec.feed(piece, packet=i, ts=i * 1000))
    if close:
        events.extend(dec.close())
    frames = [e for e in events if isinstance(e, Frame)]
    anomalies = [e for e in events if isinstance(e, Anomaly)]
    assert len(frames) + len(anomalies) == len(events)
    return frames, anomalies, dec


def accounted(dec: FrameDecoder, stream_length: int) -> bool:
    s = dec.stats
    return s.frame_bytes + s.skipped_bytes + s.gap_bytes + dec.pending == stream_length


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def frame_key(f: Frame) -> tuple[object, ...]:
    """What must not depend on how the stream was split."""
    return (
        f.stream_offset,
        f.total_size,
        f.command_size,
        f.command_name,
        f.command.SerializePartialToString(),
        f.checksum,
        f.checksum_expected,
        f.checksum_computed,
        None if f.metadata is None else f.metadata.SerializePartialToString(),
        None if f.payload is None else bytes(f.payload),
        f.complete,
    )


def anomaly_key(a: Anomaly) -> tuple[object, ...]:
    return (a.code, a.stream_offset, a.length)


def names(events: Iterable[Decoded]) -> list[str]:
    """Command name of each frame and code of each anomaly, in order."""
    return [e.command_name if isinstance(e, Frame) else e.code for e in plain(list(events))]


# ------------------------------------------------- frames computed by hand from the spec


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


# Hand-computed protobuf bytes (tag = field_number << 3 | wire_type).
PING_CMD = bytes.fromhex("08 12 92 01 00")  # type=PING(18); field 18 (ping), empty
PING = u32(9) + u32(5) + PING_CMD

# The spec's CONNECT example: client_version=1, auth_data=3, protocol_version=4,
# auth_method_name=5, serialized in field-number order inside BaseCommand field 2.
_CONNECT_INNER = (
    b"\x0a\x1a" + b"Pulsar-Client-Java-v1.15.2"
    + b"\x1a\x0c" + b"my-auth-data"
    + b"\x20\x06"
    + b"\x2a\x18" + b"my-authentication-plugin"
)  # fmt: skip
CONNECT_CMD = b"\x08\x02\x12" + bytes([len(_CONNECT_INNER)]) + _CONNECT_INNER
CONNECT = u32(4 + len(CONNECT_CMD)) + u32(len(CONNECT_CMD)) + CONNECT_CMD

# SEND producer_id=1 sequence_id=0 num_messages=1; metadata producer_name="p",
# sequence_id=0, publish_time=1000; payload "hello".
SEND_CMD = bytes.fromhex("08 06 32 06 08 01 10 00 18 01")
SEND_META = bytes.fromhex("0a 01 70 10 00 18 e8 07")
SEND_SECTION = u32(len(SEND_META)) + SEND_META + b"hello"
SEND_CRC = crc32c(SEND_SECTION)
SEND = (
    u32(4 + len(SEND_CMD) + 6 + len(SEND_SECTION))
    + u32(len(SEND_CMD))
    + SEND_CMD
    + b"\x0e\x01"
    + u32(SEND_CRC)
    + SEND_SECTION
)

# MESSAGE consumer_id=1 message_id={ledgerId=5, entryId=7}, no magic/checksum (as brokers send).
MESSAGE_CMD = bytes.fromhex("08 09 4a 08 08 01 12 04 08 05 10 07")
MESSAGE = u32(4 + len(MESSAGE_CMD) + len(SEND_SECTION)) + u32(len(MESSAGE_CMD)) + MESSAGE_CMD
MESSAGE += SEND_SECTION

# BrokerEntryMetadata broker_timestamp=1000, index=42 behind magic 0x0e02.
BROKER_ENTRY = bytes.fromhex("08 e8 07 10 2a")
MESSAGE_BEM_REST = b"\x0e\x02" + u32(len(BROKER_ENTRY)) + BROKER_ENTRY
MESSAGE_BEM_REST += b"\x0e\x01" + u32(SEND_CRC) + SEND_SECTION
MESSAGE_BEM = u32(4 + len(MESSAGE_CMD) + len(MESSAGE_BEM_REST)) + u32(len(MESSAGE_CMD))
MESSAGE_BEM += MESSAGE_CMD + MESSAGE_BEM_REST
