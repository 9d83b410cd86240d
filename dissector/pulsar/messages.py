"""Sans-IO: application messages out of SEND and MESSAGE frames.

Input: payload frames (with their topic), in order per connection; then `close_conn`.
Output: `AppMessage` records, one per application message produced or delivered (batches
split, payloads decompressed, chunks joined), and `Anomaly` records for payload faults.
Rules: the payload hash is of the application payload after decompression, batch split and
chunk join; encrypted messages are reported with their keys and not decoded; a frame whose
payload cannot be decoded still yields one message row with `complete=False`.
Payload bytes themselves are never kept, except an opt-in preview of the first N bytes, and
the opt-in values (`values`, a dissector.values.Values: the payload decoded by its schema,
docs/values.md; without it no decoding work is done and the value fields stay None).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, NamedTuple

from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly, AppMessage, Frame, MessageKind
from dissector.pulsar.batches import split_batch
from dissector.pulsar.chunks import (
    DEFAULT_MAX_CHUNKED_MESSAGE,
    ChunkAssembler,
    ChunkedMessage,
    is_chunk,
)
from dissector.pulsar.decompression import (
    CODEC_NAMES,
    DEFAULT_MAX_UNCOMPRESSED,
    Payload,
    Problem,
    decompress,
)
from dissector.pulsar.text_fields import describe, repair, repair_metadata
from dissector.pulsar.trace_context import Malformed, Trace, trace_context
from dissector.pulsar.wire import (
    COMMAND_TYPES,
    BrokerEntryMetadata,
    MessageMetadata,
    SingleMessageMetadata,
)

if TYPE_CHECKING:  # made and imported only when values are asked for
    from dissector.values.cells import Values

_SEND = COMMAND_TYPES["SEND"]
_NO_TRACE: tuple[Trace | None, tuple[Malformed, ...]] = (None, ())
#: Builds a NamedTuple from a tuple without its keyword-aware __new__ (several times faster).
_new_row = tuple.__new__
assert len(AppMessage._fields) == 48, "MessageExtractor._row builds AppMessage by position"
#: Each class's HasField, called unbound: looking it up on a message costs more than the
#: call (the protobuf runtime tries the name as a field first).
_meta_has = MessageMetadata.HasField
_single_has = SingleMessageMetadata.HasField
_be_has = BrokerEntryMetadata.HasField


class _Shared(NamedTuple):
    """What every message of one frame (or chunked message) has in common."""

    frame: Frame
    meta: Any
    kind: MessageKind
    producer_id: int | None
    consumer_id: int | None
    ledger_id: int | None
    entry_id: int | None
    partition: int | None
    redelivery_count: int | None
    first: Frame | None = None  # chunked: the first chunk's frame


def _preview(data: Payload, n: int) -> str | None:
    if n <= 0:
        return None
    return bytes(data[:n]).decode("latin-1").encode("unicode_escape").decode("ascii")


class MessageExtractor:
    """Turn payload frames into application messages; see the module docstring."""

    def __init__(
        self,
        *,
        max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
        max_chunked_message: int = DEFAULT_MAX_CHUNKED_MESSAGE,
        preview: int = 0,
        values: Values | None = None,
    ) -> None:
        self.max_uncompressed = max_uncompressed
        self.preview = preview
        self.values = values  # fed every decoded command by dissector.conversation.publish
        #: payload_sha256 is not made when fields are redacted: the hash of a payload whose
        #: other bytes are known (the value shows them) confirms a guess of a short secret
        self.hash_payloads = values is None or not values.redact_fields
        self.chunks = ChunkAssembler(max_chunked_message)

    def feed(self, frame: Frame) -> list[AppMessage | Anomaly]:
        not_utf8 = repair_metadata(frame)  # before any string of it is read
        out: list[AppMessage | Anomaly] = [] if not_utf8 is None else [not_utf8]
        meta = frame.metadata
        if meta is None or frame.payload is None or frame.body is None:
            return out
        shared = self._shared(frame)
        if is_chunk(meta):
            owner = (
                shared.producer_id if shared.kind is MessageKind.PRODUCED else shared.consumer_id
            )
            key = (frame.conn_id, shared.kind, owner, meta.producer_name)
            done, problems = self.chunks.add(key, meta, bytes(frame.payload), shared)
            self._problems(frame, problems, out)
            if done is not None:
                self._chunked(done, out, shared, problems[0][0] if problems else None)
            return out
        # the payload as a view into the frame's buffer: hashed and measured, never copied
        self._decode(shared, meta, frame.payload, None, out)
        return out

    def close_conn(self, conn_id: int) -> list[AppMessage | Anomaly]:
        """The connection ended: chunked messages still open are reported incomplete."""
        out: list[AppMessage | Anomaly] = []
        for kind in MessageKind:
            for partial, problem in self.chunks.close((conn_id, kind)):
                shared: _Shared = partial.first_frame
                self._problems(shared.frame, [problem], out)
                self._chunked(partial, out, why=problem[0])
        return out

    # ------------------------------------------------------------------ internals

    def _shared(self, frame: Frame) -> _Shared:
        body = frame.body
        if frame.command_type == _SEND:
            return _Shared(
                frame,
                frame.metadata,
                MessageKind.PRODUCED,
                body.producer_id,
                None,
                None,
                None,
                None,
                None,
            )
        mid = body.message_id
        return _Shared(
            frame,
            frame.metadata,
            MessageKind.DELIVERED,
            None,
            body.consumer_id,
            mid.ledgerId,
            mid.entryId,
            mid.partition,
            body.redelivery_count,
        )

    def _chunked(
        self,
        done: ChunkedMessage,
        out: list[AppMessage | Anomaly],
        last: _Shared | None = None,
        why: str | None = None,
    ) -> None:
        """A chunked message: its id is the last chunk's (as clients report it), its
        provenance runs from the first chunk's first byte to the last chunk's last byte."""
        first: _Shared = done.first_frame
        shared = first if last is None else last._replace(first=first.frame)
        self._decode(shared, done.first_meta, done.data, done, out, why)

    def _problems(self, frame: Frame, problems: list[Problem], out: list[Any]) -> None:
        out.extend(frame.anomaly(code, detail) for code, detail in problems)

    def _decode(
        self,
        shared: _Shared,
        meta: Any,
        data: Payload | None,
        chunked: ChunkedMessage | None,
        out: list[AppMessage | Anomaly],
        why: str | None = None,
    ) -> None:
        """Rows of the message(s), each with `problem`: the code of the first payload anomaly
        of its frame (or chunked message), `why` when one was found before."""
        frame = shared.frame
        encrypted = len(meta.encryption_keys) > 0
        batched = _meta_has(meta, "num_messages_in_batch")
        count = meta.num_messages_in_batch if batched else 1
        plain: Payload | None = None
        if data is not None and not encrypted:
            limit = self.max_uncompressed if chunked is None else self.chunks.max_message
            size = meta.uncompressed_size if _meta_has(meta, "uncompressed_size") else None
            if meta.compression == 0:
                size = None
            plain, problems = decompress(meta.compression, data, size, limit)
            self._problems(frame, problems, out)
            if problems and why is None:
                why = problems[0][0]
        if encrypted:
            why = why or AnomalyCode.PAYLOAD_ENCRYPTED
            keys = ", ".join(k.key for k in meta.encryption_keys)
            self._problems(
                frame,
                [(AnomalyCode.PAYLOAD_ENCRYPTED, f"keys {keys}; algo {meta.encryption_algo}")],
                out,
            )
        compressed = None if data is None else len(data)
        if plain is None or not batched:
            row = self._row(
                shared, meta, None, None, count, plain, compressed, chunked, encrypted, out, why
            )
            self._add(out, row, plain)
            return
        entries, problems = split_batch(plain, count)
        for entry in entries:  # strings of each entry made text once, as framing does
            replaced = repair(entry.meta)
            if replaced:
                where = f"batch entry {entry.position}"
                problems.append((AnomalyCode.PULSAR_INVALID_UTF8, describe(where, replaced)))
        self._problems(frame, problems, out)
        why = why or (problems[0][0] if problems else None)
        for entry in entries:
            row = self._row(
                shared,
                meta,
                entry.meta,
                entry.position,
                count,
                entry.payload,
                compressed,
                chunked,
                encrypted,
                out,
                why,
            )
            self._add(out, row, entry.payload)
        if problems and not entries:
            row = self._row(
                shared, meta, None, None, count, None, compressed, chunked, encrypted, out, why
            )
            self._add(out, row, None)

    def _add(
        self, out: list[AppMessage | Anomaly], row: AppMessage, payload: Payload | None
    ) -> None:
        """Append `row` with, when values are asked for, its value."""
        if self.values is not None:
            cells = self.values.row_cells(row, None if payload is None else bytes(payload))
            row = row._replace(
                value=cells.value, value_schema=cells.value_schema, value_error=cells.value_error
            )
        out.append(row)

    def _row(
        self,
        shared: _Shared,
        meta: Any,
        single: Any,
        index: int | None,
        count: int,
        payload: Payload | None,
        compressed: int | None,
        chunked: ChunkedMessage | None,
        encrypted: bool,
        out: list[AppMessage | Anomaly],
        why: str | None,
    ) -> AppMessage:
        """The message's row, `why` its problem; its malformed trace context properties as
        anomalies (to `out`). Built from a tuple in AppMessage's field order: its
        keyword-aware constructor costs several times more, once per message."""
        frame = shared.frame
        src = single if single is not None else meta
        has = _meta_has
        src_has = _meta_has if single is None else _single_has
        properties = [(kv.key, kv.value) for kv in src.properties]
        trace, faults = trace_context(properties) if properties else _NO_TRACE
        if faults:
            where = "" if index is None else f"batch entry {index}: "
            self._problems(
                frame,
                [(AnomalyCode.MESSAGE_TRACE_CONTEXT_INVALID, where + f.detail()) for f in faults],
                out,
            )
        sequence_id = meta.sequence_id
        if single is not None:
            sequence_id = (
                single.sequence_id if _single_has(single, "sequence_id") else sequence_id + index
            )
        be = frame.broker_entry
        entry_ts = entry_index = None
        if be is not None:
            if _be_has(be, "broker_timestamp"):
                entry_ts = be.broker_timestamp
            # the broker's index is the entry's last message's; a batch entry's own is as
            # the Java client's Message.getIndex() gives it
            if _be_has(be, "index"):
                entry_index = be.index if index is None else be.index - count + index + 1
        codec = meta.compression
        start = shared.first or frame
        row: AppMessage = _new_row(
            AppMessage,
            (
                frame.last_ts,  # ts
                frame.conn_id,
                frame.direction,
                shared.kind,
                frame.topic,
                shared.producer_id,
                shared.consumer_id,
                meta.producer_name if has(meta, "producer_name") else None,
                sequence_id,
                index,  # batch_index
                count,  # batch_size
                meta.publish_time if has(meta, "publish_time") else None,
                src.event_time or None,  # event_time
                src.partition_key if src_has(src, "partition_key") else None,  # key
                src.partition_key_b64_encoded,  # key_base64
                src.ordering_key if src_has(src, "ordering_key") else None,
                properties,
                CODEC_NAMES.get(codec) or str(codec),  # compression
                compressed,  # compressed_size
                None if payload is None else len(payload),  # payload_size
                None  # payload_sha256
                if payload is None or not self.hash_payloads
                else hashlib.sha256(payload).hexdigest(),
                chunked is not None,  # chunked
                None if chunked is None else chunked.num_chunks,
                encrypted,
                [k.key for k in meta.encryption_keys] if encrypted else [],
                meta.schema_version if has(meta, "schema_version") else None,
                shared.ledger_id,
                shared.entry_id,
                shared.partition,
                shared.redelivery_count,
                entry_ts,  # broker_entry_timestamp
                entry_index,  # broker_entry_index
                src.null_value,
                src.null_partition_key,  # null_key
                bool(single is not None and single.compacted_out),  # compacted_out
                payload is not None,  # complete
                start.first_packet,
                frame.last_packet,
                start.stream_offset,
                None if payload is None else _preview(payload, self.preview),
                why or None,  # problem
                None if trace is None else trace.trace_id,
                None if trace is None else trace.span_id,
                None if trace is None else trace.format,
                None if trace is None else trace.state,
                None,  # value
                None,  # value_schema
                None,  # value_error
            ),
        )
        return row
