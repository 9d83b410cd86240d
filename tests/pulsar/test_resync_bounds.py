"""Resync work is linear in the input (fuzzing finding 5): counted, never timed.

A flood of fake SEND headers (one every 22 bytes, each claiming a frame as large as the limit),
a run of 0x08 bytes, random bytes and fake payload frames whose metadata decodes but whose
checksum is wrong are fed to a decoder that starts mid-stream. The costly steps are counted
through the functions the decoder calls: the bytes handed to CRC32C, the protobuf decodes, and
the candidate headers the resync loop reads one at a time in Python. Each count must stay
within a small constant times the input length. Expected frames come from what was crafted:
one real frame put right after the garbage.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from crc32c import crc32c

from dissector import Checksum, FrameDecoder, command, encode_frame
from dissector.pulsar import framing, sections
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.pulsar.sections import HEADER
from dissector.pulsar.wire import MessageMetadata
from tests.support.framehelpers import accounted, decode

GARBAGE = 300_000
PACKET = 1460  # TCP segment payload on an Ethernet link
#: At most this many bytes checksummed per input byte.
CRC_PER_BYTE = 8
#: At least this many input bytes per protobuf decode, and per header read in Python.
BYTES_PER_DECODE = 8
BYTES_PER_HEADER = 8

REAL_PAYLOAD = b"the real frame after the garbage"
REAL = encode_frame(
    command("SEND", producer_id=7, sequence_id=9),
    metadata=MessageMetadata(producer_name="real", sequence_id=9, publish_time=1),
    payload=REAL_PAYLOAD,
)
SEND_COMMAND = command("SEND", producer_id=1, sequence_id=1).SerializeToString()


def fake_send_header(claimed_total: int) -> bytes:
    """22 bytes: sizes, a SEND command that decodes, magic 0x0e01 and a made-up checksum."""
    head = struct.pack(">II", claimed_total, len(SEND_COMMAND)) + SEND_COMMAND
    out = head + b"\x0e\x01" + b"\xde\xad\xbe\xef"
    assert len(out) == 22
    return out


def fake_payload_frame(claimed_total: int) -> bytes:
    """A payload frame start whose command and metadata decode, with a wrong checksum; the
    frame it claims runs on over the next ones."""
    meta = MessageMetadata(producer_name="x", sequence_id=1, publish_time=1).SerializeToString()
    head = struct.pack(">II", claimed_total, len(SEND_COMMAND)) + SEND_COMMAND
    return head + b"\x0e\x01" + b"\xde\xad\xbe\xef" + struct.pack(">I", len(meta)) + meta


def repeat_to(unit: bytes, size: int) -> bytes:
    return (unit * (size // len(unit) + 1))[:size]


@dataclass
class Work:
    crc_bytes: int = 0
    decodes: int = 0
    headers: int = 0


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    counts = Work()
    parse_command = sections._parse_command
    parse = sections.parse

    def counting_crc(data: Any, *args: Any) -> int:
        counts.crc_bytes += len(data)
        return crc32c(data, *args)

    def counting_parse_command(data: Any) -> Any:
        counts.decodes += 1
        return parse_command(data)

    def counting_parse(cls: Any, data: Any) -> Any:
        counts.decodes += 1
        return parse(cls, data)

    class CountingHeader:
        size = HEADER.size

        @staticmethod
        def unpack_from(buf: Any, pos: int = 0) -> tuple[int, int]:
            counts.headers += 1
            total, csize = HEADER.unpack_from(buf, pos)
            return total, csize

    monkeypatch.setattr(sections, "crc32c", counting_crc)
    monkeypatch.setattr(sections, "_parse_command", counting_parse_command)
    monkeypatch.setattr(sections, "parse", counting_parse)
    monkeypatch.setattr(framing, "HEADER", CountingHeader)
    yield counts


CASES = {
    # the fuzzing finding: fake SEND headers claiming 5 MiB, one every 22 bytes
    "fake_5mib_sends": (repeat_to(fake_send_header(5 * 1024 * 1024), GARBAGE), None),
    # the same shape scaled to a 64 KiB limit, so that each claimed frame is whole in the input
    "fake_64kib_sends": (repeat_to(fake_send_header(64 * 1024), GARBAGE), 64 * 1024),
    # fake payload frames that pass every check but the checksum, each claiming 60,000 bytes
    "bad_checksum_payload_frames": (repeat_to(fake_payload_frame(60_000), GARBAGE), 64 * 1024),
    "run_of_0x08": (b"\x08" * GARBAGE, None),
    "random": (random.Random(20).randbytes(GARBAGE), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("piece", [PACKET, 65536])
def test_resync_work_is_linear_in_the_input(work: Work, name: str, piece: int) -> None:
    garbage, limit = CASES[name]
    stream = garbage + REAL
    pieces = [stream[i : i + piece] for i in range(0, len(stream), piece)]
    dec = FrameDecoder(synced=False, max_frame_size=limit or DEFAULT_MAX_FRAME_SIZE)
    frames, anomalies, dec = decode(pieces, decoder=dec)

    n = len(stream)
    assert work.crc_bytes <= CRC_PER_BYTE * n, work
    assert work.decodes <= n // BYTES_PER_DECODE, work
    assert work.headers <= n // BYTES_PER_HEADER, work
    assert accounted(dec, n)
    assert dec.pending == 0
    assert all(a.code == "pulsar.skipped_bytes" for a in anomalies)
    if name != "bad_checksum_payload_frames":
        # Nothing in the garbage passes for a frame: the real one is found right after it.
        assert [(f.stream_offset, f.command_name) for f in frames] == [(len(garbage), "SEND")]
        assert bytes(frames[0].payload or b"") == REAL_PAYLOAD
        assert frames[0].checksum is Checksum.VALID
        assert dec.stats.skipped_bytes == len(garbage)


def test_real_frames_between_floods_are_all_found(work: Work) -> None:
    """Each flood follows an impossible header (a run of 0x08: too large) and precedes a real
    frame; every real frame is found, whatever the split."""
    flood = repeat_to(fake_send_header(5 * 1024 * 1024), 20_000)
    bad = b"\x08" * 100
    stream = flood + REAL + (bad + flood + REAL) * 2
    step = len(bad) + len(flood) + len(REAL)
    expected = [len(flood), len(flood) + step, len(flood) + 2 * step]
    for piece in (1, 7, PACKET, len(stream)):
        pieces = [stream[i : i + piece] for i in range(0, len(stream), piece)]
        frames, anomalies, dec = decode(pieces, decoder=FrameDecoder(synced=False))
        assert [f.stream_offset for f in frames] == expected
        assert all(bytes(f.payload or b"") == REAL_PAYLOAD for f in frames)
        assert [a.code for a in anomalies] == ["pulsar.skipped_bytes"] + [
            "pulsar.frame_too_large",
            "pulsar.skipped_bytes",
        ] * 2
        assert dec.stats.skipped_bytes == len(flood) + 2 * (len(bad) + len(flood))
        assert accounted(dec, len(stream))


def test_missing_bytes_earn_no_resync_work(work: Work) -> None:
    """A gap (say a sequence number jump of 4 GiB) adds no bytes to decode, so no budget."""
    garbage, limit = CASES["bad_checksum_payload_frames"]
    stream = garbage + REAL
    dec = FrameDecoder(max_frame_size=limit or DEFAULT_MAX_FRAME_SIZE)
    dec.gap(1 << 32)
    pieces = [stream[i : i + PACKET] for i in range(0, len(stream), PACKET)]
    frames, _, dec = decode(pieces, decoder=dec)
    assert work.crc_bytes <= CRC_PER_BYTE * len(stream), work
    assert accounted(dec, (1 << 32) + len(stream))
    assert [f.stream_offset for f in frames] == [(1 << 32) + len(garbage)]
