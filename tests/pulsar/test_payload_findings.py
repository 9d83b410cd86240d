"""Payload findings of the fuzzing campaign (issue 20), crafted by hand.

Finding 6: a payload that would expand past the bound is a `payload.decompression_bomb`
whatever its codec (LZ4 bombs were reported as `payload.decompression_failed`).
Finding 8: `num_chunks_from_msg = 2**31` is an int32 on the wire and wraps to a negative
number; it and other out-of-range chunk counts or chunk ids are reported as
`payload.chunk_count_invalid`, and the message row still appears, incomplete.
Expected values come from what was crafted (sizes, codes), never from the dissector.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

import cramjam
import pytest

from dissector import FrameDecoder, command, encode_frame
from dissector.anomalies import REGISTRY, Severity
from dissector.events import Anomaly, AppMessage, Frame
from dissector.pulsar.chunks import MAX_CHUNKS, ChunkAssembler, is_chunk
from dissector.pulsar.decompression import LZ4, SNAPPY, ZLIB, ZSTD, decompress
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.wire import MessageMetadata

LIMIT = 4096

COMPRESSORS: dict[int, Callable[[bytes], bytes]] = {
    LZ4: lambda d: bytes(cramjam.lz4.compress_block(d, store_size=False)),
    ZLIB: zlib.compress,
    ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
    SNAPPY: lambda d: bytes(cramjam.snappy.compress_raw(d)),
}

_rng = random.Random(6)
#: Shapes of data larger than LIMIT: literals only, one long match, literals then matches.
DATA = {
    "random": _rng.randbytes(3 * LIMIT),
    "zeros": bytes(64 * LIMIT),
    "mixed": _rng.randbytes(LIMIT // 2) + b"z" * (16 * LIMIT) + _rng.randbytes(100),
    "just_over": _rng.randbytes(LIMIT + 1),
}


@pytest.mark.parametrize("shape", sorted(DATA))
@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
def test_output_past_the_bound_is_a_bomb_for_every_codec(codec: int, shape: str) -> None:
    data = COMPRESSORS[codec](DATA[shape])
    for claimed in (None, LIMIT):  # no uncompressed_size, or one that lies within the bound
        out, problems = decompress(codec, data, claimed, LIMIT)
        assert out is None
        assert [code for code, _ in problems] == ["payload.decompression_bomb"], problems


@pytest.mark.parametrize("codec", sorted(COMPRESSORS))
def test_payload_within_the_bound_still_decompresses(codec: int) -> None:
    plain = DATA["random"][:LIMIT]
    out, problems = decompress(codec, COMPRESSORS[codec](plain), None, LIMIT)
    assert (out, problems) == (plain, [])


def test_corrupt_lz4_within_the_bound_is_still_a_failure() -> None:
    plain = b"pulsar " * 100  # 700 bytes, well within the bound
    block = COMPRESSORS[LZ4](plain)
    for bad in (block[:-3], b"\xf0" + b"\xff" * 3, b"\x1f\x41\x00\x00"):  # cut; no literals
        out, problems = decompress(LZ4, bad, None, LIMIT)
        assert out is None
        assert [code for code, _ in problems] == ["payload.decompression_failed"], bad


# --------------------------------------------------------------------------- finding 8

#: MessageMetadata field 27 (num_chunks_from_msg), varint: tag 27 << 3 = 0xd8 0x01.
_NUM_CHUNKS_TAG = b"\xd8\x01"


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def chunk_meta_bytes(num_chunks_on_wire: int, chunk_id: int = 0, total: int = 6) -> bytes:
    """MessageMetadata of a chunk whose num_chunks_from_msg is written as a raw varint."""
    meta = MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, uuid="W", chunk_id=chunk_id,
        total_chunk_msg_size=total,
    )  # fmt: skip
    return meta.SerializeToString() + _NUM_CHUNKS_TAG + varint(num_chunks_on_wire)


def test_chunk_count_invalid_is_registered_as_an_error() -> None:
    assert REGISTRY["payload.chunk_count_invalid"].severity is Severity.ERROR


def test_wrapped_chunk_count_is_still_a_chunk() -> None:
    meta = MessageMetadata.FromString(chunk_meta_bytes(2**31))
    assert meta.num_chunks_from_msg == -(2**31)  # what int32 makes of it
    assert is_chunk(meta)
    whole = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, uuid="W",
                            num_chunks_from_msg=1, chunk_id=0)  # fmt: skip
    assert not is_chunk(whole)
    assert not is_chunk(MessageMetadata(producer_name="p", sequence_id=1, publish_time=1))


@pytest.mark.parametrize(
    ("num_chunks", "chunk_id"),
    [
        (2**31, 0),  # wraps to -2**31
        (2**32 - 1, 0),  # wraps to -1
        (0, 0),
        (MAX_CHUNKS + 1, 0),
        (3, 3),  # chunk_id >= num_chunks
        (3, -1),
    ],
)
def test_out_of_range_chunk_counts_are_reported_with_an_incomplete_message(
    num_chunks: int, chunk_id: int
) -> None:
    meta = MessageMetadata.FromString(chunk_meta_bytes(num_chunks, chunk_id))
    asm = ChunkAssembler()
    done, problems = asm.add(("conn",), meta, b"abc", "frame-0")
    assert [code for code, _ in problems] == ["payload.chunk_count_invalid"]
    assert done is not None and done.data is None
    assert (done.uuid, done.chunks_seen, done.first_frame) == ("W", 1, "frame-0")
    assert asm.open_bytes == 0 and asm.close() == []


def test_later_chunk_out_of_range_ends_the_open_message() -> None:
    asm = ChunkAssembler()
    first = MessageMetadata.FromString(chunk_meta_bytes(3, 0))
    assert asm.add(("conn",), first, b"ab", "frame-0") == (None, [])
    for bad in (chunk_meta_bytes(3, 7), chunk_meta_bytes(2**31, 1), chunk_meta_bytes(5, 1)):
        asm.add(("conn",), first, b"ab", "frame-0")
        done, problems = asm.add(("conn",), MessageMetadata.FromString(bad), b"cd", "frame-1")
        assert [code for code, _ in problems] == ["payload.chunk_count_invalid"]
        assert done is not None and done.data is None and done.first_frame == "frame-0"
        assert asm.open_bytes == 0


def frames_of(*raw: bytes) -> list[Frame]:
    dec = FrameDecoder()
    events = dec.feed(b"".join(raw)) + dec.close()
    assert not [e for e in events if isinstance(e, Anomaly)]
    return [e for e in events if isinstance(e, Frame)]


def test_wrapped_chunk_count_gives_an_incomplete_row_and_an_anomaly() -> None:
    frame = encode_frame(
        command("SEND", producer_id=7, sequence_id=1),
        metadata=chunk_meta_bytes(2**31),
        payload=b"abcdef",
    )
    ex = MessageExtractor()
    out = ex.feed(frames_of(frame)[0]) + ex.close_conn(0)
    codes = [e.code for e in out if isinstance(e, Anomaly)]
    rows = [e for e in out if isinstance(e, AppMessage)]
    assert codes == ["payload.chunk_count_invalid"]
    assert len(rows) == 1 and rows[0].chunked and not rows[0].complete
    assert rows[0].payload_sha256 is None
