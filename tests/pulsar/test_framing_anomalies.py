"""Every framing anomaly, crafted by hand: reported as data, and decoding goes on after it."""

from __future__ import annotations

import struct

import pytest

from dissector import Checksum, FrameDecoder, command, encode_frame
from dissector.anomalies import REGISTRY
from dissector.pulsar.wire import MessageMetadata
from tests.support.framehelpers import (
    CONNECT,
    MESSAGE_CMD,
    PING,
    SEND,
    SEND_CRC,
    accounted,
    anomaly_key,
    decode,
    frame_key,
    names,
    one_byte_at_a_time,
)


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


META = MessageMetadata(producer_name="p", sequence_id=3, publish_time=1)
SEND_CMD = command("SEND", producer_id=1, sequence_id=3)


def raw_frame(cmd: bytes, rest: bytes = b"") -> bytes:
    return u32(4 + len(cmd) + len(rest)) + u32(len(cmd)) + cmd + rest


# name -> (stream, frame commands, anomaly codes, skipped bytes)
CASES: dict[str, tuple[bytes, list[str], list[str], int]] = {
    "frame_too_large": (
        PING + u32(10**9) + b"\0" * 8 + SEND + PING,
        ["PING", "SEND", "PING"],
        ["pulsar.frame_too_large", "pulsar.skipped_bytes"],
        12,
    ),
    "frame_too_small": (
        PING + u32(2) + b"\0" * 6 + PING,
        ["PING", "PING"],
        ["pulsar.frame_too_small", "pulsar.skipped_bytes"],
        10,
    ),
    "command_size_invalid": (
        PING + u32(10) + u32(50) + b"\0" * 6 + PING,
        ["PING", "PING"],
        ["pulsar.command_size_invalid", "pulsar.skipped_bytes"],
        14,
    ),
    "command_undecodable": (
        PING + raw_frame(b"\xff\xff\xff") + CONNECT,
        ["PING", "CONNECT"],
        ["pulsar.command_undecodable", "pulsar.skipped_bytes"],
        11,
    ),
    "unknown_command_type": (
        raw_frame(bytes.fromhex("08 e7 07")) + PING,
        ["UNKNOWN_999", "PING"],
        ["pulsar.unknown_command_type"],
        0,
    ),
    "command_missing_body": (
        raw_frame(bytes.fromhex("08 12")) + PING,
        ["PING", "PING"],
        ["pulsar.command_missing_body"],
        0,
    ),
    "trailing_bytes": (
        encode_frame(command("PING"), trailing=b"xyz") + PING,
        ["PING", "PING"],
        ["pulsar.trailing_bytes"],
        0,
    ),
    "payload_missing": (
        raw_frame(MESSAGE_CMD) + PING,
        ["MESSAGE", "PING"],
        ["pulsar.payload_missing"],
        0,
    ),
    "bad_magic": (
        raw_frame(MESSAGE_CMD, b"\x0e\x05\x00\x00abc") + PING,
        ["MESSAGE", "PING"],
        ["pulsar.bad_magic"],
        0,
    ),
    "bad_checksum": (
        encode_frame(SEND_CMD, metadata=META, payload=b"x", checksum=0x1234) + PING,
        ["SEND", "PING"],
        ["pulsar.bad_checksum"],
        0,
    ),
    "metadata_size_invalid": (
        raw_frame(MESSAGE_CMD, b"\x0e\x01" + u32(0) + u32(1000) + b"ab") + PING,
        ["MESSAGE", "PING"],
        ["pulsar.bad_checksum", "pulsar.metadata_size_invalid"],
        0,
    ),
    "metadata_undecodable": (
        encode_frame(SEND_CMD, metadata=b"\xff\xff", payload=b"x", checksum=False) + PING,
        ["SEND", "PING"],
        ["pulsar.metadata_undecodable"],
        0,
    ),
    "broker_entry_metadata_invalid": (
        raw_frame(MESSAGE_CMD, b"\x0e\x02" + u32(1000) + b"abc") + PING,
        ["MESSAGE", "PING"],
        ["pulsar.broker_entry_metadata_invalid", "pulsar.bad_magic"],
        0,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_anomaly_case(name: str) -> None:
    stream, commands, codes, skipped = CASES[name]
    frames, anomalies, dec = decode([stream])
    assert [f.command_name for f in frames] == commands
    assert [a.code for a in anomalies] == codes
    assert dec.stats.skipped_bytes == skipped
    assert accounted(dec, len(stream))
    for a in anomalies:
        assert a.severity == REGISTRY[a.code].severity
        assert a.stream_offset is not None and 0 <= a.stream_offset < len(stream)
    skips = [a for a in anomalies if a.code == "pulsar.skipped_bytes"]
    assert sum(a.length for a in skips) == skipped
    # The same stream one byte at a time gives the same frames and anomalies.
    frames1, anomalies1, dec1 = decode(one_byte_at_a_time(stream))
    assert [frame_key(f) for f in frames1] == [frame_key(f) for f in frames]
    assert [anomaly_key(a) for a in anomalies1] == [anomaly_key(a) for a in anomalies]
    assert accounted(dec1, len(stream))


def test_bad_checksum_records_expected_and_computed() -> None:
    frames, anomalies, _ = decode([encode_frame(SEND_CMD, metadata=META, checksum=0x1234)])
    (f,) = frames
    assert f.checksum is Checksum.INVALID
    assert f.checksum_expected == 0x1234
    assert f.checksum_computed is not None and f.checksum_computed != 0x1234
    assert "0x00001234" in anomalies[0].detail


def test_corrupted_payload_byte_fails_checksum() -> None:
    broken = bytearray(SEND)
    broken[-1] ^= 0x01
    frames, anomalies, _ = decode([bytes(broken)])
    assert frames[0].checksum is Checksum.INVALID
    assert frames[0].checksum_expected == SEND_CRC
    assert [a.code for a in anomalies] == ["pulsar.bad_checksum"]


def test_stream_ending_mid_frame_reports_partial_frame() -> None:
    stream = PING + SEND[:-3]
    frames, anomalies, dec = decode([stream])
    assert [f.command_name for f in frames] == ["PING", "SEND"]
    partial = frames[1]
    assert not partial.complete and partial.checksum is Checksum.UNKNOWN
    assert partial.metadata is not None and partial.metadata.producer_name == "p"
    assert partial.payload is None
    assert [a.code for a in anomalies] == ["pulsar.truncated_frame"]
    assert anomalies[0].length == len(SEND) - 3
    assert accounted(dec, len(stream))


def test_stream_ending_inside_a_header_is_skipped_and_reported() -> None:
    frames, anomalies, dec = decode([PING + SEND[:5]])
    assert [f.command_name for f in frames] == ["PING"]
    assert [a.code for a in anomalies] == ["pulsar.truncated_frame", "pulsar.skipped_bytes"]
    assert dec.stats.skipped_bytes == 5
    assert accounted(dec, len(PING) + 5)


def test_gap_inside_a_frame_keeps_sync() -> None:
    dec = FrameDecoder()
    events = dec.feed(PING + SEND[:20]) + dec.gap(5) + dec.feed(SEND[25:] + CONNECT)
    events += dec.close()
    assert names(events) == ["PING", "SEND", "pulsar.truncated_frame", "CONNECT"]
    send = events[1]
    assert send.complete is False and send.checksum is Checksum.UNKNOWN  # type: ignore[union-attr]
    assert dec.stats.skipped_bytes == 0 and dec.stats.gap_bytes == 5
    assert accounted(dec, len(PING + SEND + CONNECT))


def test_gap_at_a_frame_boundary_resyncs() -> None:
    dec = FrameDecoder()
    tail = SEND[10:]
    events = dec.feed(PING) + dec.gap(10) + dec.feed(tail + CONNECT + PING) + dec.close()
    assert names(events) == ["PING", "pulsar.skipped_bytes", "CONNECT", "PING"]
    assert dec.stats.skipped_bytes == len(tail)
    assert accounted(dec, len(PING) + 10 + len(tail + CONNECT + PING))


def test_gap_larger_than_the_rest_of_the_frame_resyncs() -> None:
    dec = FrameDecoder()
    events = dec.feed(PING + SEND[:20]) + dec.gap(len(SEND) - 20 + 3)
    events += dec.feed(PING[3:] + CONNECT) + dec.close()
    assert names(events) == [
        "PING",
        "SEND",
        "pulsar.truncated_frame",
        "pulsar.skipped_bytes",
        "CONNECT",
    ]
    assert dec.stats.skipped_bytes == len(PING) - 3
    assert accounted(dec, len(PING + SEND + PING + CONNECT))


def test_mid_stream_start_resyncs() -> None:
    stream = SEND[7:] + CONNECT + PING
    frames, anomalies, dec = decode([stream], decoder=FrameDecoder(synced=False))
    assert [f.command_name for f in frames] == ["CONNECT", "PING"]
    assert [a.code for a in anomalies] == ["pulsar.skipped_bytes"]
    assert anomalies[0].length == len(SEND) - 7
    assert "mid-stream" in anomalies[0].detail
    assert accounted(dec, len(stream))


def test_resync_rejects_candidates_with_a_bad_checksum() -> None:
    fake = encode_frame(SEND_CMD, metadata=META, payload=b"zz", checksum=0xDEAD)
    stream = fake + PING
    frames, anomalies, _ = decode([stream], decoder=FrameDecoder(synced=False))
    assert [f.command_name for f in frames] == ["PING"]
    assert [a.code for a in anomalies] == ["pulsar.skipped_bytes"]
    assert anomalies[0].length == len(fake)


def test_configured_frame_limit() -> None:
    big = encode_frame(SEND_CMD, metadata=META, payload=b"x" * 200)
    frames, anomalies, _ = decode([PING + big + PING], decoder=FrameDecoder(max_frame_size=100))
    assert [f.command_name for f in frames] == ["PING", "PING"]
    assert anomalies[0].code == "pulsar.frame_too_large"
