"""The per-frame tables: frames, messages and anomalies, each declared once.

Input: nothing (the declarations below). Output: `FRAMES` (row function frames_row(f, conn):
a Frame and its connection's FlowKey fields followed by its Community ID), `MESSAGES`
(messages_row(m, community_id): an AppMessage) and `ANOMALIES` (anomalies_row(a,
community_id): an Anomaly), `Table`s of dissector.tables.columns.
Rule: each column names the expression that gives its value; names shared by several columns
come from the table's prelude. Protocol uint64 ids are stored as int64 (see columns.i64). The
Community ID is made once per connection by the builder; rows only pass its string along.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from dissector.anomalies import Severity
from dissector.events import Checksum, Direction, MessageKind, TraceFormat
from dissector.pulsar.field_values import message_dict
from dissector.pulsar.wire import BrokerEntryMetadata
from dissector.tables.columns import (
    BIN,
    BOOL,
    I32,
    I64,
    STR,
    STRINGS,
    TS,
    Column,
    Table,
    col,
    community_id_column,
    endpoints,
    one_of,
    value_columns,
)
from dissector.tables.frame_ids import IDS

# ------------------------------------------------------------------------------------ frames


def _body_id(name: str, doc: str) -> Column:
    """An id column: the body's field of that name, when the command has it and it is set
    (read by the prelude, dissector.tables.frame_ids)."""
    return col(name, I64, name, doc)


#: Row function frames_row(f, conn): f is a Frame, conn its connection's FlowKey fields and
#: Community ID (client_ip, client_port, broker_ip, broker_port, community_id), or five Nones.
_FRAME_PRELUDE = """
    client_ip, client_port, broker_ip, broker_port, community_id = conn
    body = f.body
    meta = f.metadata
    if body is not None:
        request_id, producer_id, consumer_id, sequence_id, ledger_id, entry_id, num_messages = (
            _IDS[f.command_type](body, meta)
        )
    else:
        request_id = producer_id = consumer_id = sequence_id = ledger_id = entry_id = None
        num_messages = None if meta is None else meta.num_messages_in_batch
    entry_ts = entry_index = None
    be = f.broker_entry
    if be is not None:
        if _be_has(be, "broker_timestamp"):
            entry_ts = _ms(be.broker_timestamp)
        if _be_has(be, "index"):
            entry_index = _i64(be.index)
"""

FRAMES = Table(
    "frames",
    "f, conn",
    [
        col("ts", TS, "f.last_ts", "time of the packet that completed the frame", False),
        col("conn_id", I64, "f.conn_id", "connection id, joins every table", False),
        col("direction", STR, "f.direction", one_of(Direction), False),
        *endpoints(),
        community_id_column(),
        col(
            "first_packet",
            I64,
            "f.first_packet",
            "capture packet number holding the frame's first byte",
        ),
        col(
            "last_packet",
            I64,
            "f.last_packet",
            "capture packet number holding the frame's last byte",
        ),
        col(
            "stream_offset",
            I64,
            "f.stream_offset",
            "offset of the frame in its direction's byte stream",
        ),
        col(
            "frame_size",
            I64,
            "f.total_size + 4",
            "bytes on the wire, the 4-byte size field included",
        ),
        col("command", STR, "f.command_name", "BaseCommand type name, e.g. SEND", False),
        _body_id("request_id", "request_id of the command, if it has one"),
        _body_id("producer_id", "producer_id of the command, if it has one"),
        _body_id("consumer_id", "consumer_id of the command, if it has one"),
        _body_id("sequence_id", "sequence_id (SEND, SEND_RECEIPT, SEND_ERROR)"),
        col("topic", STR, "f.topic", "topic the frame names, or of its producer/consumer id"),
        col("ledger_id", I64, "ledger_id", "ledger of the (first) message id the command carries"),
        col("entry_id", I64, "entry_id", "entry of the (first) message id the command carries"),
        col("checksum", STR, "f.checksum", f"payload frames: {one_of(Checksum)}"),
        col("checksum_expected", I64, "f.checksum_expected", "CRC32C carried by the frame"),
        col("checksum_computed", I64, "f.checksum_computed", "CRC32C computed over the frame"),
        col(
            "broker_entry_timestamp",
            TS,
            "entry_ts",
            "broker entry metadata: when the broker got it",
        ),
        col("broker_entry_index", I64, "entry_index", "broker entry metadata: the broker's index"),
        col("num_messages", I32, "num_messages", "messages the frame carries or acknowledges"),
        col(
            "payload_size",
            I64,
            "None if f.payload is None else len(f.payload)",
            "bytes of payload after the metadata (as sent)",
        ),
        col("complete", BOOL, "f.complete", "false when bytes of the frame are missing", False),
        col(
            "fields",
            STR,
            "None if body is None else _json(body)",
            "every field the command sets, as JSON (auth data redacted); made on request "
            "only (--columns ...,fields, --fields, fields=True), null otherwise",
            on_request=True,
        ),
    ],
    prelude=_FRAME_PRELUDE,
    env={
        "_json": lambda body: orjson.dumps(message_dict(body)).decode(),
        "_IDS": IDS,
        "_be_has": BrokerEntryMetadata.HasField,  # unbound: see dissector.tables.frame_ids
    },
)

ANOMALIES = Table(
    "anomalies",
    "a, community_id",
    [
        col("ts", TS, "a.ts", "time of the packet where the fault was seen", False),
        col("conn_id", I64, "a.conn_id", "connection id (0: not tied to a connection)", False),
        community_id_column(" (null when not tied to one)"),
        col(
            "direction",
            STR,
            "None if a.direction is None else a.direction.value",
            one_of([*Direction, "null"]),
        ),
        col("stream_offset", I64, "a.stream_offset", "offset in the direction's stream, if any"),
        col("code", STR, "a.code", "stable dotted code, e.g. pulsar.bad_checksum", False),
        col("severity", STR, "a.severity.value", one_of(Severity), False),
        col("detail", STR, "a.detail", "what exactly was found"),
        col("length", I64, "a.length", "bytes concerned (skipped, missing, ...), 0 if none"),
        col("packet", I64, "a.packet", "capture packet number (0 if unknown)"),
    ],
)


# ---------------------------------------------------------------------------------- messages

#: Row function messages_row(m, community_id): m is an AppMessage, community_id its
#: connection's.
MESSAGES = Table(
    "messages",
    "m, community_id",
    [
        col("ts", TS, "m.ts", "time of the packet that completed the (last) frame", False),
        col("conn_id", I64, "m.conn_id", "connection id, joins every table", False),
        community_id_column(),
        col(
            "direction",
            STR,
            "m.direction",
            f"{Direction.CLIENT_TO_BROKER} (produced) or {Direction.BROKER_TO_CLIENT}",
        ),
        col(
            "kind",
            STR,
            "m.kind",
            f"{MessageKind.PRODUCED} (SEND) or {MessageKind.DELIVERED} (MESSAGE)",
            False,
        ),
        col("topic", STR, "m.topic", "topic of the producer or consumer"),
        col("producer_id", I64, "_opt64(m.producer_id)", "produced: the connection's producer id"),
        col("consumer_id", I64, "_opt64(m.consumer_id)", "delivered: the connection's consumer id"),
        col("producer_name", STR, "m.producer_name", "producer name from the message metadata"),
        col(
            "sequence_id",
            I64,
            "_opt64(m.sequence_id)",
            "sequence id of this message (batch entries counted)",
        ),
        col("batch_index", I32, "m.batch_index", "index in its batch, null when not batched"),
        col("batch_size", I32, "m.batch_size", "messages in the batch (1 when not batched)"),
        col("publish_time", TS, "_ms(m.publish_time)", "publish time set by the producer"),
        col(
            "event_time",
            TS,
            "_ms(m.event_time)",
            "event time set by the application, null when unset",
        ),
        col("key", STR, "m.key", "partition key"),
        col("key_base64", BOOL, "m.key_base64", "the key is base64-encoded bytes"),
        col("ordering_key", BIN, "m.ordering_key", "ordering key (Key_Shared)"),
        col("properties", pa.map_(STR, STR), "m.properties", "application properties"),
        col(
            "trace_id",
            STR,
            "m.trace_id",
            "trace id from its properties (traceparent, b3, X-B3-*, uber-trace-id, sw8):"
            " 32 lower-case hex digits (sw8: its decoded trace id)",
        ),
        col(
            "span_id",
            STR,
            "m.span_id",
            "the producer's span id from its properties: 16 lower-case hex digits (sw8:"
            " parent segment id-span id)",
        ),
        col(
            "trace_format",
            STR,
            "m.trace_format",
            one_of(TraceFormat),
        ),
        col("trace_state", STR, "m.trace_state", "W3C tracestate, with a w3c trace context"),
        col("compression", STR, "m.compression", "NONE, LZ4, ZLIB, ZSTD or SNAPPY"),
        col(
            "compressed_size",
            I64,
            "m.compressed_size",
            "payload bytes as sent (whole batch / joined chunks)",
        ),
        col("payload_size", I64, "m.payload_size", "bytes of this message after decoding"),
        col(
            "payload_sha256",
            STR,
            "m.payload_sha256",
            "sha256 of this message's decoded payload (hex); null with --redact-fields",
        ),
        col("chunked", BOOL, "m.chunked", "sent as a chunked message"),
        col("num_chunks", I32, "m.num_chunks", "chunks of a chunked message"),
        col("encrypted", BOOL, "m.encrypted", "end-to-end encrypted: payload not decoded"),
        col("encryption_keys", STRINGS, "m.encryption_keys", "names of the encryption keys"),
        col("schema_version", BIN, "m.schema_version", "schema version the producer used"),
        col("ledger_id", I64, "_opt64(m.ledger_id)", "delivered: ledger of the message id"),
        col("entry_id", I64, "_opt64(m.entry_id)", "delivered: entry of the message id"),
        col("partition", I32, "m.partition", "delivered: partition of the message id (-1: none)"),
        col(
            "redelivery_count",
            I32,
            "m.redelivery_count",
            "delivered: times the broker redelivered it",
        ),
        col(
            "broker_entry_timestamp",
            TS,
            "_ms(m.broker_entry_timestamp)",
            "broker entry metadata: when the broker got it",
        ),
        col(
            "broker_entry_index",
            I64,
            "_opt64(m.broker_entry_index)",
            "broker entry metadata: the broker's index of this message (a batch entry's own: "
            "the entry's - batch_size + batch_index + 1, as the Java client's getIndex())",
        ),
        col("null_value", BOOL, "m.null_value", "the message has a null value (tombstone)"),
        col("null_key", BOOL, "m.null_key", "the message has a null partition key"),
        col("compacted_out", BOOL, "m.compacted_out", "batch entry removed by compaction"),
        col("complete", BOOL, "m.complete", "false when the payload could not be decoded"),
        col(
            "problem",
            STR,
            "m.problem",
            "the first payload anomaly of this message's frame (its code): why it is incomplete,"
            " or what was wrong though it decoded; null when nothing was",
        ),
        col(
            "first_packet", I64, "m.first_packet", "capture packet number of the frame's first byte"
        ),
        col("last_packet", I64, "m.last_packet", "capture packet number of the frame's last byte"),
        col("stream_offset", I64, "m.stream_offset", "offset of the (first) frame in its stream"),
        col("payload_preview", STR, "m.preview", "first N payload bytes, escaped (opt-in only)"),
        *value_columns("m"),
    ],
)
