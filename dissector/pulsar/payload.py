"""Sans-IO payload decoding: decompression, batch splitting, chunked-message assembly.

Input: a payload frame's MessageMetadata and payload bytes.
Output: the application payload(s) with their per-message metadata, and problems as
(anomaly code, detail) pairs.
Rules:
- Decompression is bounded: a claimed or produced size above the limit is reported as a
  suspected decompression bomb and not expanded, whatever the codec (a failed LZ4 block is
  walked to tell a bomb from a corrupt block); output is checked against uncompressed_size.
  Without uncompressed_size the output buffer starts near the input's size and grows up to
  the limit, so memory and time follow the output, not the bound.
- A batch (num_messages_in_batch present) is a run of [u32 size][SingleMessageMetadata]
  [payload]; entries that do not add up are reported, the good ones still returned.
- Chunks are joined by key (connection, producer or consumer, uuid) in chunk_id order; a
  missing, duplicate or inconsistent chunk is reported and the open message dropped. A chunk
  count or id out of range (wrapped negative as int32, above MAX_CHUNKS, id >= count, a
  count that changes) is reported and the message returned incomplete; `is_chunk` says which
  frames go to the assembler. Open chunked messages are bounded in count (MAX_OPEN_CHUNKED),
  per message (max_message) and in total bytes (max_open_bytes); beyond a bound the oldest
  are dropped and reported.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

import cramjam

from dissector.anomalies import AnomalyCode
from dissector.pulsar.sections import parse
from dissector.pulsar.wire import (
    COMPRESSION_NAMES,
    COMPRESSION_TYPES,
    MessageMetadata,
    SingleMessageMetadata,
)

#: Largest decompressed payload by default: Pulsar's 5 MiB message limit plus framing slack.
DEFAULT_MAX_UNCOMPRESSED = 5 * 1024 * 1024 + 64 * 1024
#: Largest chunked message assembled (chunking exists to exceed the 5 MiB frame limit).
DEFAULT_MAX_CHUNKED_MESSAGE = 256 * 1024 * 1024
#: First output buffer for a payload whose metadata has no uncompressed_size (it grows).
FIRST_GUESS = 64 * 1024
#: Chunked messages open at once (per pipeline); the oldest is dropped beyond it.
MAX_OPEN_CHUNKED = 1024
#: Bytes held for open chunked messages at once; the oldest are dropped beyond it.
DEFAULT_MAX_OPEN_CHUNK_BYTES = 512 * 1024 * 1024
#: Most chunks per message: clients cut chunks of the max message size (5 MiB by default),
#: each with payload; 65,536 cover DEFAULT_MAX_CHUNKED_MESSAGE in 4 KiB chunks. It bounds the
#: parts held per open message too (an empty chunk adds a part but no bytes).
MAX_CHUNKS = 65536

_CODEC = COMPRESSION_TYPES
NONE, LZ4, ZLIB, ZSTD, SNAPPY = (_CODEC[n] for n in ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"))
#: CompressionType value -> name, from the schema.
CODEC_NAMES = COMPRESSION_NAMES

_U32 = struct.Struct(">I")

Problem = tuple[str, str]  # (anomaly code, detail)


def decompress(
    codec: int, data: bytes | memoryview, uncompressed_size: int | None, limit: int
) -> tuple[bytes | None, list[Problem]]:
    """The decompressed bytes (None on failure) and the problems found."""
    if codec == NONE:
        return bytes(data), []
    inflate = _DECOMPRESSORS.get(codec)
    if inflate is None:
        return None, [
            (AnomalyCode.PAYLOAD_DECOMPRESSION_FAILED, f"unknown compression type {codec}")
        ]
    name = CODEC_NAMES[codec]
    if uncompressed_size is not None and uncompressed_size > limit:
        detail = f"{name}: uncompressed_size {uncompressed_size} exceeds the {limit}-byte bound"
        return None, [(AnomalyCode.PAYLOAD_DECOMPRESSION_BOMB, detail)]
    try:
        if uncompressed_size is None:
            out = _unsized(inflate, data, limit)
        else:
            out = inflate(data, uncompressed_size, limit)
    except _Bomb as bomb:
        return None, [(AnomalyCode.PAYLOAD_DECOMPRESSION_BOMB, str(bomb))]
    except _TooBig:
        if uncompressed_size is not None and uncompressed_size < limit:
            detail = f"{name}: output exceeds uncompressed_size {uncompressed_size}"
            return None, [(AnomalyCode.PAYLOAD_SIZE_MISMATCH, detail)]
        return None, [
            (AnomalyCode.PAYLOAD_DECOMPRESSION_BOMB, f"{name}: output exceeds {limit} bytes")
        ]
    except (cramjam.DecompressionError, zlib.error, ValueError) as exc:
        return None, [(AnomalyCode.PAYLOAD_DECOMPRESSION_FAILED, f"{name}: {exc}")]
    if uncompressed_size is not None and len(out) != uncompressed_size:
        detail = f"{name}: {len(out)} bytes, uncompressed_size says {uncompressed_size}"
        return out, [(AnomalyCode.PAYLOAD_SIZE_MISMATCH, detail)]
    return out, []


def _unsized(
    inflate: Callable[[bytes | memoryview, int, int], bytes], data: bytes | memoryview, limit: int
) -> bytes:
    """Decompress without a claimed size: into a buffer that starts near the input's size
    and grows eightfold up to the bound, not one of the bound's size (5 MiB, zeroed) for
    every message (fuzzing finding 10). `_TooBig` at the bound, as before."""
    size = min(limit, max(FIRST_GUESS, 4 * len(data)))
    while True:
        try:
            return inflate(data, size, limit)
        except _TooBig:
            if size >= limit:
                raise
            size = min(limit, size * 8)


class _TooBig(Exception):
    """Decompressed output does not fit the buffer it was given."""


class _Bomb(Exception):
    """The stream itself claims more than the bound (the message is the detail)."""


def _into(fn: Any, data: bytes | memoryview, size: int) -> bytes:
    buf = bytearray(size)
    try:
        n = fn(bytes(data), buf)
    except cramjam.DecompressionError as exc:
        text = str(exc)
        if "large enough" in text or "smaller than required" in text or "whole buffer" in text:
            raise _TooBig from None
        raise
    return bytes(memoryview(buf)[:n])


def _zlib(data: bytes | memoryview, size: int, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(bytes(data), size + 1)
    if len(out) > size or d.unconsumed_tail:
        raise _TooBig
    out += d.flush()
    if len(out) > min(size, limit):
        raise _TooBig
    return out


def _snappy(data: bytes | memoryview, size: int, limit: int) -> bytes:
    claimed = cramjam.snappy.decompress_raw_len(bytes(data))
    if claimed > limit:
        raise _Bomb(f"SNAPPY: stream claims {claimed} bytes, above the {limit}-byte bound")
    return _into(cramjam.snappy.decompress_raw_into, data, max(claimed, 1))


def _lz4(data: bytes | memoryview, size: int, limit: int) -> bytes:
    raw = bytes(data)
    buf = bytearray(size)
    try:  # output_len: no size prefix (without it cramjam retries as if there were one)
        n = cramjam.lz4.decompress_block_into(raw, buf, output_len=size)
    except cramjam.DecompressionError:
        if _lz4_output_exceeds(raw, size):  # liblz4 reports a full buffer as a corrupt block
            raise _TooBig from None
        raise
    return bytes(memoryview(buf)[:n])


_FF_RUN = re.compile(b"\xff*")


def _lz4_len(data: bytes, pos: int, base: int) -> tuple[int, int]:
    """(LZ4 length field, position after it): 15 adds the bytes after it while they are 255
    (a run measured in C); position -1 when the data ends first."""
    if base < 15:
        return base, pos
    run = _FF_RUN.match(data, pos).end()  # type: ignore[union-attr]  # b"x*" always matches
    return (base + 255 * (run - pos) + data[run], run + 1) if run < len(data) else (0, -1)


def _lz4_output_exceeds(data: bytes, size: int) -> bool:
    """Whether an LZ4 block describes more than `size` output bytes before its first fault
    (cut short, offset 0 or before the output); sequence headers only, nothing written."""
    n, pos, out = len(data), 0, 0
    while 0 <= pos < n:
        token = data[pos]
        literals, pos = _lz4_len(data, pos + 1, token >> 4)
        if pos < 0 or pos + literals > n:
            return False
        pos += literals
        out += literals
        if out > size:
            return True
        if pos + 2 > n:  # the last sequence (literals only), or cut short
            return False
        offset = data[pos] | data[pos + 1] << 8
        if not 0 < offset <= out:
            return False
        match, pos = _lz4_len(data, pos + 2, token & 15)
        out += match + 4
        if out > size and pos >= 0:
            return True
    return False


def _zstd(data: bytes | memoryview, size: int, limit: int) -> bytes:
    return _into(cramjam.zstd.decompress_into, data, size)


#: CompressionType value -> decompressor(data, size, limit); keyed by the schema's names.
_DECOMPRESSORS: dict[int, Callable[[bytes | memoryview, int, int], bytes]] = {
    _CODEC["LZ4"]: _lz4,
    _CODEC["ZLIB"]: _zlib,
    _CODEC["ZSTD"]: _zstd,
    _CODEC["SNAPPY"]: _snappy,
}


class BatchEntry(NamedTuple):
    position: int  # batch index
    meta: Any  # SingleMessageMetadata
    payload: bytes


def split_batch(data: bytes, count: int) -> tuple[list[BatchEntry], list[Problem]]:
    """Entries of a batch payload; problems when they do not add up to `count` and the data."""
    entries: list[BatchEntry] = []
    problems: list[Problem] = []
    pos, n = 0, len(data)
    while pos < n and len(entries) < count:
        if n - pos < 4:
            problems.append(
                (
                    AnomalyCode.PAYLOAD_BATCH_INVALID,
                    f"{n - pos} stray bytes after entry {len(entries)}",
                )
            )
            return entries, problems
        size = _U32.unpack_from(data, pos)[0]
        if pos + 4 + size > n:
            detail = (
                f"entry {len(entries)}: metadata size {size} beyond the batch ({n - pos - 4} left)"
            )
            problems.append((AnomalyCode.PAYLOAD_BATCH_INVALID, detail))
            return entries, problems
        try:
            meta = parse(SingleMessageMetadata, memoryview(data)[pos + 4 : pos + 4 + size])
        except Exception as exc:  # protobuf DecodeError
            problems.append((AnomalyCode.PAYLOAD_BATCH_INVALID, f"entry {len(entries)}: {exc}"))
            return entries, problems
        start = pos + 4 + size
        end = start + meta.payload_size
        if meta.payload_size < 0 or end > n:
            detail = f"entry {len(entries)}: payload_size {meta.payload_size} beyond the batch"
            problems.append((AnomalyCode.PAYLOAD_BATCH_INVALID, detail))
            return entries, problems
        entries.append(BatchEntry(len(entries), meta, data[start:end]))
        pos = end
    if len(entries) < count:
        problems.append(
            (
                AnomalyCode.PAYLOAD_BATCH_INVALID,
                f"{len(entries)} entries, num_messages_in_batch {count}",
            )
        )
    elif pos < n:
        problems.append(
            (
                AnomalyCode.PAYLOAD_BATCH_INVALID,
                f"{n - pos} bytes after the last of {count} entries",
            )
        )
    return entries, problems


class ChunkedMessage(NamedTuple):
    """A chunked message whose chunks all arrived (or what remains of one that did not)."""

    key: tuple[Any, ...]
    uuid: str
    num_chunks: int
    total_size: int
    chunks_seen: int
    data: bytes | None  # the joined payload (still compressed if the message is)
    first_meta: Any  # MessageMetadata of chunk 0
    first_frame: Any  # whatever the caller attached to chunk 0 (e.g. its Frame)


#: MessageMetadata's HasField, called unbound: looking it up on a message costs more than the
#: call (the protobuf runtime tries the name as a field first).
_meta_has = MessageMetadata.HasField


def is_chunk(meta: Any) -> bool:
    """Whether a payload frame's MessageMetadata makes it one chunk of a chunked message:
    uuid and num_chunks_from_msg present, other than the trivial single chunk (1 chunk,
    chunk 0). Out-of-range counts (0, wrapped negative) count as chunks, so that
    ChunkAssembler reports them instead of them passing for whole messages."""
    return bool(
        _meta_has(meta, "uuid")
        and _meta_has(meta, "num_chunks_from_msg")
        and (meta.num_chunks_from_msg != 1 or meta.chunk_id != 0)
    )


def _count_problem(meta: Any, open_count: int | None) -> str:
    """Why a chunk's num_chunks_from_msg or chunk_id is out of range, or ''."""
    num, chunk_id = meta.num_chunks_from_msg, meta.chunk_id
    if num < 1 or num > MAX_CHUNKS:
        return f"num_chunks_from_msg {num} outside 1..{MAX_CHUNKS}"
    if chunk_id < 0 or chunk_id >= num:
        return f"chunk_id {chunk_id} outside 0..{num - 1}"
    if open_count is not None and num != open_count:
        return f"num_chunks_from_msg {num} after {open_count} in chunk 0"
    return ""


class _Open:
    __slots__ = ("first_frame", "first_meta", "num_chunks", "parts", "size", "total")

    def __init__(self, meta: Any, frame: Any) -> None:
        self.num_chunks: int = meta.num_chunks_from_msg
        self.total: int = meta.total_chunk_msg_size
        self.parts: list[bytes] = []
        self.size = 0
        self.first_meta = meta
        self.first_frame = frame


class ChunkAssembler:
    """Join chunks of chunked messages; see the module docstring."""

    def __init__(
        self,
        max_message: int = DEFAULT_MAX_CHUNKED_MESSAGE,
        max_open_bytes: int = DEFAULT_MAX_OPEN_CHUNK_BYTES,
    ) -> None:
        self.max_message = max_message
        self.max_open_bytes = max_open_bytes
        self.open_bytes = 0
        self._open: dict[tuple[Any, ...], _Open] = {}
        # Chunked messages whose chunk 0 was rejected (reported with its row): their later
        # chunks are theirs, not chunks "without chunk 0". Bounded like the open ones.
        self._rejected: dict[tuple[Any, ...], None] = {}

    def _pop(self, key: tuple[Any, ...]) -> _Open:
        current = self._open.pop(key)
        self.open_bytes -= current.size
        return current

    def add(
        self, key: tuple[Any, ...], meta: Any, payload: bytes, frame: Any
    ) -> tuple[ChunkedMessage | None, list[Problem]]:
        """Add one chunk; returns the message when its last chunk arrives."""
        problems: list[Problem] = []
        uuid = meta.uuid
        full_key = (*key, uuid)
        chunk_id = meta.chunk_id
        current = self._open.get(full_key)
        invalid = _count_problem(meta, None if current is None else current.num_chunks)
        if invalid:
            if current is None:
                current = _Open(meta, frame)
                current.parts.append(b"")  # seen, not kept
            else:
                self._pop(full_key)
            detail = f"{uuid} chunk {chunk_id}: {invalid}"
            return self._partial(full_key, current), [
                (AnomalyCode.PAYLOAD_CHUNK_COUNT_INVALID, detail)
            ]
        if current is None:
            if chunk_id != 0:
                if full_key in self._rejected:  # its message was reported with chunk 0
                    if chunk_id + 1 >= meta.num_chunks_from_msg:
                        del self._rejected[full_key]
                    return None, []
                detail = f"chunk {chunk_id} of {uuid} without chunk 0"
                return None, [(AnomalyCode.PAYLOAD_CHUNK_MISSING, detail)]
            if meta.total_chunk_msg_size > self.max_message:
                detail = (
                    f"{uuid}: {meta.num_chunks_from_msg} chunks, "
                    f"{meta.total_chunk_msg_size} bytes (bound {self.max_message})"
                )
                rejected = _Open(meta, frame)
                rejected.parts.append(b"")  # seen, not kept: the message's row, incomplete
                self._rejected[full_key] = None
                if len(self._rejected) > MAX_OPEN_CHUNKED:
                    del self._rejected[next(iter(self._rejected))]
                return self._partial(full_key, rejected), [
                    (AnomalyCode.PAYLOAD_CHUNK_SIZE_MISMATCH, detail)
                ]
            if len(self._open) >= MAX_OPEN_CHUNKED:
                oldest = next(iter(self._open))
                dropped = self._pop(oldest)
                detail = f"{oldest[-1]}: dropped after {len(dropped.parts)} chunks (too many open)"
                problems.append((AnomalyCode.PAYLOAD_CHUNK_MISSING, detail))
            current = self._open[full_key] = _Open(meta, frame)
        elif chunk_id < len(current.parts):
            return None, [
                (AnomalyCode.PAYLOAD_CHUNK_DUPLICATE, f"chunk {chunk_id} of {uuid} again")
            ]
        elif chunk_id > len(current.parts):
            self._pop(full_key)
            detail = f"{uuid}: chunk {chunk_id} after {len(current.parts)} chunks"
            problems.append((AnomalyCode.PAYLOAD_CHUNK_MISSING, detail))
            return self._partial(full_key, current), problems
        current.parts.append(payload)
        current.size += len(payload)
        self.open_bytes += len(payload)
        while self.open_bytes > self.max_open_bytes and len(self._open) > 1:
            oldest = next(k for k in self._open if k != full_key)
            dropped = self._pop(oldest)
            detail = (
                f"{oldest[-1]}: dropped after {len(dropped.parts)} chunks "
                f"(open chunked messages above {self.max_open_bytes} bytes)"
            )
            problems.append((AnomalyCode.PAYLOAD_CHUNK_MISSING, detail))
        if current.size > current.total:
            self._pop(full_key)
            detail = f"{uuid}: {current.size} bytes so far, total_chunk_msg_size {current.total}"
            problems.append((AnomalyCode.PAYLOAD_CHUNK_SIZE_MISMATCH, detail))
            return self._partial(full_key, current), problems
        if len(current.parts) < current.num_chunks:
            return None, problems
        self._pop(full_key)
        data = b"".join(current.parts)
        if len(data) != current.total:
            detail = f"{uuid}: {len(data)} bytes joined, total_chunk_msg_size {current.total}"
            problems.append((AnomalyCode.PAYLOAD_CHUNK_SIZE_MISMATCH, detail))
            return self._partial(full_key, current), problems
        return ChunkedMessage(
            full_key,
            uuid,
            current.num_chunks,
            current.total,
            len(current.parts),
            data,
            current.first_meta,
            current.first_frame,
        ), problems

    def close(
        self, key_prefix: tuple[Any, ...] | None = None
    ) -> list[tuple[ChunkedMessage, Problem]]:
        """Give up on open messages (all, or those whose key starts with key_prefix)."""
        out = []
        for full_key in list(self._open):
            if key_prefix is None or full_key[: len(key_prefix)] == key_prefix:
                current = self._pop(full_key)
                detail = f"{full_key[-1]}: {len(current.parts)} of {current.num_chunks} chunks seen"
                out.append(
                    (self._partial(full_key, current), (AnomalyCode.PAYLOAD_CHUNK_MISSING, detail))
                )
        return out

    @staticmethod
    def _partial(key: tuple[Any, ...], current: _Open) -> ChunkedMessage:
        return ChunkedMessage(
            key,
            key[-1],
            current.num_chunks,
            current.total,
            len(current.parts),
            None,
            current.first_meta,
            current.first_frame,
        )
