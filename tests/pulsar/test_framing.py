"""FrameDecoder on hand-computed bytes, each incremental case checked three ways."""

from __future__ import annotations

import pytest
from crc32c import crc32c

from dissector import Checksum, FrameDecoder, UsageError, command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from tests.support.framehelpers import (
    BROKER_ENTRY,
    CONNECT,
    CONNECT_CMD,
    MESSAGE,
    MESSAGE_BEM,
    PING,
    SEND,
    SEND_CRC,
    SEND_META,
    accounted,
    decode,
    frame_key,
    one_byte_at_a_time,
)

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
