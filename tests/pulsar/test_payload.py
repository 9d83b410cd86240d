"""Payload decoding: every codec, every payload anomaly, batches and chunks, crafted by hand."""

from __future__ import annotations

import hashlib
import struct
import zlib
from typing import Any

import cramjam
import pytest

from dissector import FrameDecoder, command, encode_frame
from dissector.events import Anomaly, AppMessage, Frame
from dissector.pulsar.batches import split_batch
from dissector.pulsar.chunks import ChunkAssembler
from dissector.pulsar.decompression import LZ4, NONE, SNAPPY, ZLIB, ZSTD, decompress
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata

TEXT = b"pulsar dissector payload " * 200


def compress(codec: int, data: bytes) -> bytes:
    if codec == LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    return data


@pytest.mark.parametrize("codec", [NONE, LZ4, ZLIB, ZSTD, SNAPPY])
def test_every_codec_round_trips(codec: int) -> None:
    out, problems = decompress(codec, compress(codec, TEXT), len(TEXT), 1 << 20)
    assert (out, problems) == (TEXT, [])


@pytest.mark.parametrize("codec", [LZ4, ZLIB, ZSTD, SNAPPY])
def test_wrong_uncompressed_size(codec: int) -> None:
    data = compress(codec, TEXT)
    _, small = decompress(codec, data, len(TEXT) - 10, 1 << 20)
    assert [c for c, _ in small] == ["payload.size_mismatch"]
    out, big = decompress(codec, data, len(TEXT) + 10, 1 << 20)
    assert [c for c, _ in big] == ["payload.size_mismatch"]
    if out is not None:
        assert out == TEXT


@pytest.mark.parametrize("codec", [LZ4, ZLIB, ZSTD, SNAPPY])
def test_corrupt_data_fails_cleanly(codec: int) -> None:
    data = bytearray(compress(codec, TEXT))
    data[len(data) // 2 :] = b"\xff" * (len(data) - len(data) // 2)
    out, problems = decompress(codec, bytes(data), len(TEXT), 1 << 20)
    assert out is None or out != TEXT
    assert problems and problems[0][0] in ("payload.decompression_failed", "payload.size_mismatch")


@pytest.mark.parametrize("codec", [LZ4, ZLIB, ZSTD, SNAPPY])
def test_bomb_is_not_expanded(codec: int) -> None:
    bomb = b"\0" * (4 << 20)
    data = compress(codec, bomb)
    out, problems = decompress(codec, data, len(bomb), 1 << 20)  # claims more than the bound
    assert out is None and [c for c, _ in problems] == ["payload.decompression_bomb"]
    out, problems = decompress(codec, data, 1000, 1 << 20)  # claims little, expands to 4 MiB
    assert out is None or len(out) <= 1000
    # Snappy streams state their own length (4 MiB here): that claim is the bomb.
    assert [c for c, _ in problems] in (["payload.size_mismatch"], ["payload.decompression_bomb"])
    out, problems = decompress(codec, data, None, 1 << 20)  # metadata claims nothing
    assert out is None
    assert [c for c, _ in problems] == ["payload.decompression_bomb"]  # LZ4 too (finding 6)


def batch(*entries: tuple[bytes, dict[str, str]]) -> bytes:
    out = b""
    for payload, props in entries:
        meta = SingleMessageMetadata(payload_size=len(payload))
        for k, v in props.items():
            meta.properties.add(key=k, value=v)
        raw = meta.SerializeToString()
        out += struct.pack(">I", len(raw)) + raw + payload
    return out


def test_batch_split() -> None:
    data = batch((b"one", {"a": "1"}), (b"", {}), (b"three", {}))
    entries, problems = split_batch(data, 3)
    assert problems == []
    assert [e.payload for e in entries] == [b"one", b"", b"three"]
    assert entries[0].meta.properties[0].value == "1"


def test_inconsistent_batches() -> None:
    data = batch((b"one", {}), (b"two", {}))
    assert [c for c, _ in split_batch(data, 3)[1]] == ["payload.batch_invalid"]  # too few
    entries, problems = split_batch(data + b"xyz", 2)  # stray bytes
    assert len(entries) == 2 and [c for c, _ in problems] == ["payload.batch_invalid"]
    entries, problems = split_batch(data[:-1], 2)  # last payload cut
    assert len(entries) == 1 and problems
    entries, problems = split_batch(b"\x00\x00\x10\x00junk", 1)  # size beyond the data
    assert entries == [] and problems


def chunk_meta(uuid: str, chunk_id: int, num: int, total: int) -> MessageMetadata:
    return MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, uuid=uuid, chunk_id=chunk_id,
        num_chunks_from_msg=num, total_chunk_msg_size=total,
    )  # fmt: skip


def test_chunks_join_across_interleaved_messages() -> None:
    asm = ChunkAssembler()
    a = [b"aaaa", b"bbbb", b"cc"]
    b = [b"XX", b"YY"]
    results = []
    for meta, part in [
        (chunk_meta("A", 0, 3, 10), a[0]),
        (chunk_meta("B", 0, 2, 4), b[0]),
        (chunk_meta("A", 1, 3, 10), a[1]),
        (chunk_meta("B", 1, 2, 4), b[1]),
        (chunk_meta("A", 2, 3, 10), a[2]),
    ]:
        done, problems = asm.add(("conn",), meta, part, None)
        assert problems == []
        if done:
            results.append((done.uuid, done.data))
    assert results == [("B", b"XXYY"), ("A", b"aaaabbbbcc")]


def test_missing_duplicate_and_mismatched_chunks() -> None:
    asm = ChunkAssembler()
    asm.add((1,), chunk_meta("M", 0, 3, 6), b"aa", None)
    done, problems = asm.add((1,), chunk_meta("M", 0, 3, 6), b"aa", None)
    assert done is None and [c for c, _ in problems] == ["payload.chunk_duplicate"]
    done, problems = asm.add((1,), chunk_meta("M", 2, 3, 6), b"cc", None)  # chunk 1 missing
    assert [c for c, _ in problems] == ["payload.chunk_missing"]
    assert done is not None and done.data is None and done.chunks_seen == 1
    done, problems = asm.add((1,), chunk_meta("N", 1, 2, 4), b"zz", None)  # no chunk 0
    assert [c for c, _ in problems] == ["payload.chunk_missing"]
    asm.add((1,), chunk_meta("S", 0, 2, 3), b"aa", None)
    done, problems = asm.add((1,), chunk_meta("S", 1, 2, 3), b"bb", None)  # 4 bytes, not 3
    assert [c for c, _ in problems] == ["payload.chunk_size_mismatch"]
    asm.add((1,), chunk_meta("OPEN", 0, 2, 4), b"aa", None)
    (closed,) = asm.close((1,))
    assert closed[1][0] == "payload.chunk_missing" and closed[0].chunks_seen == 1


def frames_of(*raw: bytes) -> list[Frame]:
    dec = FrameDecoder()
    events = dec.feed(b"".join(raw)) + dec.close()
    assert not [e for e in events if isinstance(e, Anomaly)]
    return [e for e in events if isinstance(e, Frame)]


def extract(frames: list[Frame], **kw: Any) -> tuple[list[AppMessage], list[str]]:
    ex = MessageExtractor(**kw)
    out: list[AppMessage | Anomaly] = []
    for f in frames:
        out += ex.feed(f)
    out += ex.close_conn(0)
    return [m for m in out if isinstance(m, AppMessage)], [
        a.code for a in out if isinstance(a, Anomaly)
    ]


def send(meta: MessageMetadata, payload: bytes) -> bytes:
    return encode_frame(command("SEND", producer_id=7, sequence_id=meta.sequence_id),
                        metadata=meta, payload=payload)  # fmt: skip


def test_compressed_batch_becomes_one_row_per_message() -> None:
    entries = batch((b"first", {"k": "1"}), (b"second", {"k": "2"}))
    meta = MessageMetadata(producer_name="p", sequence_id=10, publish_time=1700000000000,
                           num_messages_in_batch=2, compression="ZSTD",
                           uncompressed_size=len(entries))  # fmt: skip
    msgs, codes = extract(frames_of(send(meta, compress(ZSTD, entries))))
    assert codes == []
    assert [(m.sequence_id, m.batch_index, m.payload_size) for m in msgs] == [
        (10, 0, 5),
        (11, 1, 6),
    ]
    assert msgs[1].payload_sha256 == hashlib.sha256(b"second").hexdigest()
    assert msgs[0].properties == [("k", "1")] and msgs[0].compression == "ZSTD"


def test_bomb_frame_stays_and_message_is_incomplete() -> None:
    bomb = compress(ZLIB, b"\0" * (8 << 20))
    meta = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, compression="ZLIB",
                           uncompressed_size=8 << 20)  # fmt: skip
    frames = frames_of(send(meta, bomb))
    msgs, codes = extract(frames, max_uncompressed=1 << 20)
    assert codes == ["payload.decompression_bomb"]
    assert len(msgs) == 1 and not msgs[0].complete and msgs[0].payload_sha256 is None
    assert frames[0].command_name == "SEND"


def test_encrypted_message_is_flagged_not_decoded() -> None:
    meta = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                           encryption_algo="RSA")  # fmt: skip
    meta.encryption_keys.add(key="my-key", value=b"\x01\x02")
    msgs, codes = extract(frames_of(send(meta, b"\x8a\x91ciphertext")))
    assert codes == ["payload.encrypted"]
    assert msgs[0].encrypted and msgs[0].encryption_keys == ["my-key"]
    assert msgs[0].payload_sha256 is None


def test_chunked_message_with_missing_chunk_still_reports_what_was_seen() -> None:
    frames = frames_of(
        send(chunk_meta("U", 0, 3, 9), b"abc"), send(chunk_meta("U", 1, 3, 9), b"def")
    )
    msgs, codes = extract(frames)
    assert codes == ["payload.chunk_missing"]
    assert len(msgs) == 1 and msgs[0].chunked and not msgs[0].complete


def test_open_chunk_bytes_are_bounded() -> None:
    asm = ChunkAssembler(max_open_bytes=10)
    asm.add((1,), chunk_meta("A", 0, 3, 12), b"aaaa", None)
    asm.add((1,), chunk_meta("B", 0, 3, 12), b"bbbb", None)
    done, problems = asm.add((1,), chunk_meta("C", 0, 3, 12), b"cccc", None)  # 12 > 10 held
    assert done is None
    assert [c for c, _ in problems] == ["payload.chunk_missing"] and "A" in problems[0][1]
    assert asm.open_bytes == 8
    done, problems = asm.add((1,), chunk_meta("A", 1, 3, 12), b"aaaa", None)  # A is gone
    assert [c for c, _ in problems] == ["payload.chunk_missing"]
    closed = asm.close()
    assert sorted(partial.uuid for partial, _ in closed) == ["B", "C"]
    assert asm.open_bytes == 0


def test_a_batch_entrys_broker_index_is_its_own() -> None:
    """The broker's index (AppendIndexMetadataInterceptor) is that of the entry's last message:
    a batch entry's own is index - batch size + its batch index + 1, as the Java client's
    Message.getIndex() gives it (found against Apache's broker: tests/test_apache_broker.py).
    A message that is not batched keeps the broker's index."""
    from dissector.pulsar.wire import BrokerEntryMetadata

    mid = {"ledgerId": 5, "entryId": 7}
    entries = batch((b"a", {}), (b"b", {}), (b"c", {}))
    meta = MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3
    )
    bem = BrokerEntryMetadata(broker_timestamp=1000, index=42)
    batched = encode_frame(command("MESSAGE", consumer_id=1, message_id=mid), metadata=meta,
                           payload=entries, broker_entry=bem, checksum=False)  # fmt: skip
    single = MessageMetadata(producer_name="p", sequence_id=3, publish_time=1)
    alone = encode_frame(command("MESSAGE", consumer_id=1, message_id=mid), metadata=single,
                         payload=b"d", broker_entry=BrokerEntryMetadata(index=43),
                         checksum=False)  # fmt: skip
    msgs, codes = extract(frames_of(batched, alone))
    assert codes == []
    assert [(m.batch_index, m.broker_entry_index) for m in msgs] == [
        (0, 40),
        (1, 41),
        (2, 42),
        (None, 43),
    ]
