"""Chunked-message assembly: the chunks of one Pulsar message joined in order.

Input: payload frames' MessageMetadata and payload bytes, keyed by (connection, producer or
consumer); `is_chunk` says which frames are chunks.
Output: each chunked message once its last chunk arrives (or what remains of one that
cannot complete), and problems as (anomaly code, detail) pairs.
Rules:
- Chunks are joined by key (connection, producer or consumer, uuid) in chunk_id order; a
  missing, duplicate or inconsistent chunk is reported and the open message dropped.
- A chunk count or id out of range (wrapped negative as int32, above MAX_CHUNKS, id >= count,
  a count that changes) is reported and the message returned incomplete.
- Open chunked messages are bounded in count (MAX_OPEN_CHUNKED), per message (max_message)
  and in total bytes (max_open_bytes); beyond a bound the oldest are dropped and reported.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dissector.anomalies import AnomalyCode
from dissector.pulsar.decompression import Problem
from dissector.pulsar.wire import MessageMetadata

#: Largest chunked message assembled (chunking exists to exceed the 5 MiB frame limit).
DEFAULT_MAX_CHUNKED_MESSAGE = 256 * 1024 * 1024
#: Chunked messages open at once (per pipeline); the oldest is dropped beyond it.
MAX_OPEN_CHUNKED = 1024
#: Bytes held for open chunked messages at once; the oldest are dropped beyond it.
DEFAULT_MAX_OPEN_CHUNK_BYTES = 512 * 1024 * 1024
#: Most chunks per message: clients cut chunks of the max message size (5 MiB by default),
#: each with payload; 65,536 cover DEFAULT_MAX_CHUNKED_MESSAGE in 4 KiB chunks. It bounds the
#: parts held per open message too (an empty chunk adds a part but no bytes).
MAX_CHUNKS = 65536


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
