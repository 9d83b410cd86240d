"""Rows of the tables, built column-wise from pipeline events into Arrow record batches.

Input: pipeline events (ConversationOpened, Frame, Anomaly, Conversation).
Output: one pyarrow.Table (or a stream of record batches) per table, with the schemas of
dissector.schema.
Rule: one tuple per row in the hot path, transposed into Arrow columns every BATCH_ROWS rows,
so memory stays proportional to one batch plus the finished batches; values are converted
to the schema's types here (uint64 -> int64 two's complement, ms -> us timestamps).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dissector.events import Anomaly, Frame
from dissector.flow.tcp import FlowKey
from dissector.pipeline import Conversation, ConversationOpened, PipelineEvent
from dissector.pulsar.conversations import Entity, Pair
from dissector.pulsar.messages import AppMessage
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_NAMES, BaseCommand
from dissector.tables.schema import ANOMALIES, CONVERSATIONS, ENTITIES, FRAMES, MESSAGES, TIMELINE

#: Rows gathered before they become an Arrow record batch.
BATCH_ROWS = 65536
_I64 = 1 << 63
_MAX_MS = (1 << 63) // 1000


def _opt64(value: int | None) -> int | None:
    return None if value is None else _i64(value)


def _i64(value: int) -> int:
    """uint64 as Java's long: values from 2**63 up become negative."""
    return value - (1 << 64) if value >= _I64 else value


_ID_COLUMNS = ("request_id", "producer_id", "consumer_id", "sequence_id")


def _id_fields() -> dict[int, tuple[tuple[tuple[int, str], ...], str | None, bool]]:
    """type -> ((column index, field) for the id columns its body has, message-id field, repeated).

    Computed once from the schema, so that per frame only the fields a command has are read.
    """
    out = {}
    for ctype, field in BODY_FIELDS.items():
        desc = BaseCommand.DESCRIPTOR.fields_by_name[field].message_type
        assert desc is not None
        fields = desc.fields_by_name
        present = tuple(
            (i, n) for i, n in enumerate(_ID_COLUMNS) if n in fields and not fields[n].is_repeated
        )
        mid_field = None
        repeated = False
        for candidate in ("message_id", "message_ids"):
            f = desc.fields_by_name.get(candidate)
            if (
                f is not None
                and f.message_type is not None
                and f.message_type.name == "MessageIdData"
            ):
                mid_field, repeated = candidate, f.is_repeated
                break
        out[ctype] = (present, mid_field, repeated)
    return out


_ID_FIELDS = _id_fields()
_SEND = next(t for t, n in COMMAND_NAMES.items() if n == "SEND")
_NO_KEY = (None, None, None, None)


class _Batches:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows: list[tuple[Any, ...]] = []
        self.batches: list[pa.RecordBatch] = []
        self.count = 0

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        columns = list(zip(*self.rows, strict=True))
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, self.schema, strict=True)]
        self.batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.count += len(self.rows)
        self.rows = []

    def take(self) -> list[pa.RecordBatch]:
        """Finished record batches so far (for streaming writers); they are handed over."""
        self.flush()
        out, self.batches = self.batches, []
        return out

    def table(self) -> pa.Table:
        self.flush()
        return pa.Table.from_batches(self.batches, schema=self.schema)


class TableBuilder:
    """Accumulate the frames, anomalies and conversations tables of one or more captures."""

    def __init__(self, capture: str = "") -> None:
        self.capture = capture
        self.frames = _Batches(FRAMES)
        self.messages = _Batches(MESSAGES)
        self.anomalies = _Batches(ANOMALIES)
        self.conversations = _Batches(CONVERSATIONS)
        self.timeline = _Batches(TIMELINE)
        self.entities = _Batches(ENTITIES)
        self._keys: dict[int, FlowKey] = {}  # FlowKey is a tuple: client ip/port, broker ip/port

    def add(self, ev: PipelineEvent) -> None:
        if type(ev) is Frame:
            self.frames.add(frame_row(ev, self._keys.get(ev.conn_id, _NO_KEY)))
        elif type(ev) is AppMessage:
            self.messages.add(message_row(ev))
        elif type(ev) is Anomaly:
            self.anomalies.add(anomaly_row(ev))
        elif type(ev) is ConversationOpened:
            self._keys[ev.conn_id] = ev.key
        elif type(ev) is Pair:
            self.timeline.add(pair_row(ev))
        elif type(ev) is Conversation:
            self.conversations.add(conversation_row(ev, self.capture))
            for entity in ev.summary.entities:
                self.entities.add(entity_row(ev.conn_id, entity))
            self._keys.pop(ev.conn_id, None)

    def tables(self) -> dict[str, pa.Table]:
        return {
            "frames": self.frames.table(),
            "messages": self.messages.table(),
            "anomalies": self.anomalies.table(),
            "conversations": self.conversations.table(),
            "timeline": self.timeline.table(),
            "entities": self.entities.table(),
        }


def frame_row(f: Frame, key: tuple[Any, ...]) -> tuple[Any, ...]:
    """The frames-table row of a frame; key is (client_ip, client_port, broker_ip, broker_port)."""
    body = f.body
    ctype = f.command_type
    ids: list[Any] = [None, None, None, None]
    ledger_id = entry_id = num_messages = None
    if body is not None:
        present, mid_field, repeated = _ID_FIELDS[ctype]
        has = body.HasField
        for i, name in present:
            if has(name):
                value = getattr(body, name)
                ids[i] = value if value < _I64 else value - (1 << 64)
        if mid_field is not None:
            if repeated:
                mids = getattr(body, mid_field)
                num_messages = len(mids)
                mid = mids[0] if mids else None
            else:
                mid = getattr(body, mid_field) if has(mid_field) else None
            if mid is not None:
                ledger_id, entry_id = _i64(mid.ledgerId), _i64(mid.entryId)
    meta = f.metadata
    if meta is not None:
        if ctype == _SEND and body.HasField("num_messages"):
            num_messages = body.num_messages
        else:
            num_messages = meta.num_messages_in_batch
    entry_ts = entry_index = None
    be = f.broker_entry
    if be is not None:
        if be.HasField("broker_timestamp"):
            entry_ts = _ms(be.broker_timestamp)
        if be.HasField("index"):
            entry_index = _i64(be.index)
    payload = f.payload
    checksum = f.checksum
    return (
        f.last_ts,
        f.conn_id,
        f.direction,
        *key,
        f.first_packet,
        f.last_packet,
        f.stream_offset,
        f.total_size + 4,
        f.command_name,
        *ids,
        f.topic,
        ledger_id,
        entry_id,
        checksum,
        f.checksum_expected,
        f.checksum_computed,
        entry_ts,
        entry_index,
        num_messages,
        None if payload is None else len(payload),
        f.complete,
    )


def _ms(value: int | None) -> int | None:
    """Milliseconds since the epoch as microseconds; None when absent or out of range."""
    return None if value is None or not 0 <= value < _MAX_MS else value * 1000


def message_row(m: AppMessage) -> tuple[Any, ...]:
    return (
        m.ts,
        m.conn_id,
        m.direction,
        m.kind,
        m.topic,
        _opt64(m.producer_id),
        _opt64(m.consumer_id),
        m.producer_name,
        _opt64(m.sequence_id),
        m.batch_index,
        m.batch_size,
        _ms(m.publish_time),
        _ms(m.event_time),
        m.key,
        m.key_base64,
        m.ordering_key,
        m.properties,
        m.compression,
        m.compressed_size,
        m.payload_size,
        m.payload_sha256,
        m.chunked,
        m.num_chunks,
        m.encrypted,
        m.encryption_keys,
        m.schema_version,
        _opt64(m.ledger_id),
        _opt64(m.entry_id),
        m.partition,
        m.redelivery_count,
        _ms(m.broker_entry_timestamp),
        _opt64(m.broker_entry_index),
        m.null_value,
        m.null_key,
        m.compacted_out,
        m.complete,
        m.first_packet,
        m.last_packet,
        m.stream_offset,
        m.preview,
    )


def anomaly_row(a: Anomaly) -> tuple[Any, ...]:
    return (
        a.ts,
        a.conn_id,
        None if a.direction is None else a.direction.value,
        a.stream_offset,
        a.code,
        a.severity.value,
        a.detail,
        a.length,
        a.packet,
    )


def conversation_row(c: Conversation, capture: str) -> tuple[Any, ...]:
    proxied = c.proxied_client
    return (
        c.start_ts,
        c.conn_id,
        *c.key,
        c.end_ts,
        c.end_ts - c.start_ts,
        c.ended,
        c.syn_seen,
        c.encrypted,
        proxied[0] if proxied else None,
        proxied[1] if proxied else None,
        c.first_packet,
        c.last_packet,
        c.c2b.packets,
        c.b2c.packets,
        c.c2b.wire_bytes,
        c.b2c.wire_bytes,
        c.c2b.stream_bytes,
        c.b2c.stream_bytes,
        c.c2b.frames,
        c.b2c.frames,
        c.c2b.frame_bytes,
        c.b2c.frame_bytes,
        c.c2b.skipped_bytes,
        c.b2c.skipped_bytes,
        c.c2b.gap_bytes,
        c.b2c.gap_bytes,
        c.c2b.preamble_bytes,
        *_summary(c),
        c.anomalies,
        capture,
    )


def _summary(c: Conversation) -> tuple[Any, ...]:
    s = c.summary
    topics = sorted({e.topic for e in s.entities if e.topic})
    return (
        s.client_version,
        s.server_version,
        s.client_protocol,
        s.server_protocol,
        s.auth_method,
        s.proxy_to_broker_url,
        s.original_principal,
        s.max_message_size,
        s.feature_flags,
        sum(1 for e in s.entities if e.kind == "producer"),
        sum(1 for e in s.entities if e.kind == "consumer"),
        topics,
    )


def pair_row(p: Pair) -> tuple[Any, ...]:
    req, resp = p.request, p.response
    first = req if req is not None else resp
    assert first is not None
    return (
        first.last_ts,
        p.conn_id,
        None if req is None else req.command_name,
        None if resp is None else resp.command_name,
        first.direction if req is not None else None,
        None if req is None else req.last_packet,
        None if resp is None else resp.last_packet,
        None if req is None else req.last_ts,
        None if resp is None else resp.last_ts,
        None if req is None or resp is None else resp.last_ts - req.last_ts,
        _opt64(p.request_id),
        _opt64(p.producer_id),
        _opt64(p.consumer_id),
        _opt64(p.sequence_id),
        _opt64(p.ledger_id),
        _opt64(p.entry_id),
        p.topic,
        p.outcome,
        p.error_code,
        p.error_message,
        None if req is None else req.stream_offset,
        None if resp is None else resp.stream_offset,
    )


def entity_row(conn_id: int, e: Entity) -> tuple[Any, ...]:
    return (
        e.created_ts,
        conn_id,
        e.kind,
        _i64(e.entity_id),
        e.topic,
        e.name,
        e.subscription,
        e.sub_type,
        e.access_mode,
        e.state,
        e.closed_ts,
        e.permits,
        e.delivered,
        e.sent,
    )
