"""FrameDecoder on hand-computed bytes, each incremental case checked three ways."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from dissector import Checksum, FrameDecoder, UsageError, command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from tests.framehelpers import accounted, decode, frame_key, one_byte_at_a_time


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

STREAM = CONNECT + PING + SEND + MESSAGE + MESSAGE_BEM


def test_crc32c_is_castagnoli_standard_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_spec_connect_example() -> None:
    frames, anomalies, _ = decode([CONNECT])
    assert anomalies == []
    (f,) = frames
    assert f.command_name == "CONNECT"
    assert (f.total_size, f.command_size) == (len(CONNECT) - 4, len(CONNECT_CMD))
    assert f.body is not None
    assert f.body.client_version == "Pulsar-Client-Java-v1.15.2"
    assert f.body.auth_method_name == "my-authentication-plugin"
    assert f.body.auth_data == b"my-auth-data"
    assert f.body.protocol_version == 6
    assert f.checksum is None and f.payload is None


def test_encoder_reproduces_hand_computed_bytes() -> None:
    connect = command(
        "CONNECT",
        client_version="Pulsar-Client-Java-v1.15.2",
        auth_data=b"my-auth-data",
        protocol_version=6,
        auth_method_name="my-authentication-plugin",
    )
    assert encode_frame(connect) == CONNECT
    assert encode_frame(command("PING")) == PING
    meta = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1000)
    send = command("SEND", producer_id=1, sequence_id=0, num_messages=1)
    assert encode_frame(send, metadata=meta, payload=b"hello") == SEND
    msg = command("MESSAGE", consumer_id=1, message_id={"ledgerId": 5, "entryId": 7})
    assert encode_frame(msg, metadata=meta, payload=b"hello", checksum=False) == MESSAGE
    entry = bytes(BROKER_ENTRY)
    assert encode_frame(msg, metadata=meta, payload=b"hello", broker_entry=entry) == MESSAGE_BEM


def test_payload_frames_decode_fully() -> None:
    frames, anomalies, dec = decode([STREAM])
    assert anomalies == []
    assert [f.command_name for f in frames] == ["CONNECT", "PING", "SEND", "MESSAGE", "MESSAGE"]
    send, msg, bem = frames[2], frames[3], frames[4]
    assert send.checksum is Checksum.VALID
    assert send.checksum_expected == send.checksum_computed == SEND_CRC
    assert send.metadata is not None and send.metadata.producer_name == "p"
    assert send.metadata.publish_time == 1000 and send.metadata_size == len(SEND_META)
    assert send.payload is not None and bytes(send.payload) == b"hello"
    assert msg.checksum is Checksum.ABSENT and msg.checksum_expected is None
    assert msg.body is not None and msg.body.message_id.ledgerId == 5
    assert msg.body.message_id.entryId == 7
    assert msg.payload is not None and bytes(msg.payload) == b"hello"
    assert bem.broker_entry is not None
    assert (bem.broker_entry.broker_timestamp, bem.broker_entry.index) == (1000, 42)
    assert bem.checksum is Checksum.VALID
    assert [f.stream_offset for f in frames] == [
        0,
        len(CONNECT),
        len(CONNECT + PING),
        len(CONNECT + PING + SEND),
        len(CONNECT + PING + SEND + MESSAGE),
    ]
    assert dec.stats.frames == 5 and dec.stats.frame_bytes == len(STREAM)
    assert accounted(dec, len(STREAM))


def test_payload_view_is_zero_copy() -> None:
    frames, _, _ = decode([SEND])
    payload = frames[0].payload
    assert isinstance(payload, memoryview) and payload.obj is not None
    assert payload.readonly


def test_three_ways_give_the_same_frames() -> None:
    whole, a1, _ = decode([STREAM])
    bytewise, a2, dec = decode(one_byte_at_a_time(STREAM))
    assert [frame_key(f) for f in bytewise] == [frame_key(f) for f in whole]
    assert a1 == a2 == []
    assert accounted(dec, len(STREAM))


def test_trailing_partial_frame_is_kept_until_complete() -> None:
    cut = len(STREAM) - 7
    frames, anomalies, dec = decode([STREAM[:cut]], close=False)
    assert [f.command_name for f in frames] == ["CONNECT", "PING", "SEND", "MESSAGE"]
    assert anomalies == []
    assert dec.pending == len(MESSAGE_BEM) - 7
    assert dec.offset == cut
    rest = dec.feed(STREAM[cut:])
    assert [e.command_name for e in rest] == ["MESSAGE"]  # type: ignore[union-attr]
    assert dec.pending == 0


def test_packet_and_time_provenance() -> None:
    pieces = [CONNECT + PING[:3], PING[3:], SEND]
    frames, _, _ = decode(pieces)
    assert [(f.first_packet, f.last_packet) for f in frames] == [(1, 1), (1, 2), (3, 3)]
    assert [(f.first_ts, f.last_ts) for f in frames] == [(1000, 1000), (1000, 2000), (3000, 3000)]


def test_closed_decoder_refuses_use() -> None:
    dec = FrameDecoder()
    dec.close()
    with pytest.raises(UsageError):
        dec.feed(b"x")


def test_bad_max_frame_size_is_misuse() -> None:
    with pytest.raises(UsageError):
        FrameDecoder(max_frame_size=3)
