"""Journeys as OpenTelemetry spans: the journeys table's record batches in, OTLP JSON out.

Input: record batches (or an Arrow table) of the journeys table, every column of it
(dissector.tables.journeys.JOURNEYS).
Output: for each batch with rows, one `ExportTraceServiceRequest` in the OTLP JSON encoding,
as a dict of JSON values (`export_request`, `journey_spans`) or as that line's bytes
(`export_line`): what the OpenTelemetry Collector's file exporter writes on one line, and
its `otlpjsonfile` receiver reads back.
Rule: per row, one span for the journey (the message's way to the row's subscription) and
one child span per stage whose two ends were seen: persist (send -> receipt), dispatch
(receipt -> delivered), consume (delivered -> acked). Times are the row's capture times.
The trace is the message's own (its trace_id / span_id columns, hex ids padded as
OpenTelemetry's B3 and Jaeger propagators pad them), else one derived from the message's
identity; span ids derive from the row: the same rows give the same bytes on every run.
Sans-IO: no file is written here (dissector.tables.output writes the lines).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
import pyarrow as pa

#: OpenTelemetry's SpanKind and StatusCode numbers (opentelemetry/proto/trace/v1/trace.proto):
#: OTLP JSON writes enums as integers.
KIND_INTERNAL, KIND_PRODUCER, KIND_CONSUMER = 1, 4, 5
STATUS_ERROR = 2
#: Span.flags bits (SpanFlags): whether the parent is known to be remote, and that it is.
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200
#: The semantic conventions the attributes follow: messaging.consumer.group.name,
#: messaging.destination.subscription.name and messaging.operation.type are in 1.27.0 on.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.27.0"
SERVICE_NAME = "pulsar-dissector (wire)"
SCOPE_NAME = "pulsar-dissector"
#: Prefix of every derived id's hash input: another version of the scheme gives other ids.
_ID_SCHEME = "pulsar-dissector/otlp/1"

#: stage -> (start time column, end time column, its packets, its latency column, span
#: kind, messaging.operation.type or None when no well-known value fits)
STAGES: dict[str, tuple[str, str, tuple[str, str], str, int, str | None]] = {
    "persist": (
        "send_ts",
        "receipt_ts",
        ("send_packet", "receipt_packet"),
        "persist_us",
        KIND_PRODUCER,
        "send",
    ),
    "dispatch": (
        "receipt_ts",
        "delivered_ts",
        ("receipt_packet", "delivered_packet"),
        "dispatch_us",
        KIND_INTERNAL,
        None,
    ),
    "consume": (
        "delivered_ts",
        "acked_ts",
        ("delivered_packet", "acked_packet"),
        "consume_us",
        KIND_CONSUMER,
        "process",
    ),
}
#: The hops' times, in order: a journey span runs from the first seen to the last seen.
HOPS = ("send_ts", "receipt_ts", "delivered_ts", "acked_ts")
#: Attributes of the stage spans beyond the message's: the producer's or the consumer's.
_PRODUCER_SIDE = ("producer_name", "sequence_id", "producer_conn_id", "producer_id")
_CONSUMER_SIDE = (
    "subscription",
    "sub_type",
    "consumer_conn_id",
    "consumer_id",
    "consumer_name",
    "deliveries",
    "redeliveries",
)
#: Columns the spans are made from (the journeys table has them all).
NEEDED = frozenset(
    {
        "topic", "ledger_id", "entry_id", "partition", "batch_index", "producer_name",
        "sequence_id", "producer_conn_id", "producer_id", "send_packet", "error",
        "subscription", "consumer_conn_id", "consumer_id", "consumer_name", "trace_id",
        "span_id", "trace_format", *HOPS,
        *(column for stage in STAGES.values() for column in (*stage[2], stage[3])),
    }
)  # fmt: skip
_HEX = frozenset("0123456789abcdef")


def missing_columns(schema: pa.Schema) -> list[str]:
    """The columns spans need that `schema` lacks (none for the journeys table's)."""
    return sorted(NEEDED - set(schema.names))


def hex_id(text: str | None, width: int) -> str | None:
    """A trace (width 32) or span (16) id as OTLP JSON writes it: lowercase hex, padded
    on the left with zeros as OpenTelemetry's B3 and Jaeger propagators pad 64-bit trace
    ids and ids whose leading zeros were dropped; None when it is no such id (not hex,
    too long, all zeros: SkyWalking's sw8 trace ids, for one)."""
    if text is None:
        return None
    value = text.strip().lower()
    if not value or len(value) > width or not set(value) <= _HEX:
        return None
    value = value.rjust(width, "0")
    return None if value == "0" * width else value


def _derived(width: int, *parts: object) -> str:
    """A deterministic id of `width` hex digits (never all zeros) from `parts` (JSON
    values; a dict's keys sorted)."""
    text = orjson.dumps((_ID_SCHEME, *parts), option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(text).hexdigest()[:width]
    return digest if digest.strip("0") else "1".rjust(width, "0")


def message_id(row: dict[str, Any]) -> str | None:
    """The message's id as Pulsar's clients print it (MessageId.toString):
    ledger:entry:partition, and :batch_index for a message of a batch."""
    if row["ledger_id"] is None or row["entry_id"] is None:
        return None
    parts = [row["ledger_id"], row["entry_id"], row["partition"]]
    if row["batch_index"] is not None:
        parts.append(row["batch_index"])
    return ":".join("-1" if p is None else str(p) for p in parts)


def trace_of(row: dict[str, Any]) -> tuple[str, str | None]:
    """(trace id, the journey span's parent span id): the message's own trace context
    when its trace id is an OTLP one, else a trace id derived from the message's identity
    (its id, else its producer's connection, producer and sequence id) and no parent."""
    own = hex_id(row["trace_id"], 32)
    if own is not None:
        return own, hex_id(row["span_id"], 16)
    if row["ledger_id"] is not None:
        key: tuple[object, ...] = (
            "message",
            row["topic"],
            row["ledger_id"],
            row["entry_id"],
            row["partition"],
            row["batch_index"],
        )
    else:
        key = (
            "unstored",
            row["topic"],
            row["producer_conn_id"],
            row["producer_id"],
            row["producer_name"],
            row["sequence_id"],
            row["send_packet"],
        )
    return _derived(32, *key), None


def _value(value: object) -> dict[str, Any]:
    """An OTLP AnyValue: int64 as a decimal string (the protobuf JSON mapping)."""
    kind = type(value)
    if kind is str:
        return {"stringValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if kind is bool:
        return {"boolValue": value}
    return {"stringValue": str(value)}


def _attributes(pairs: Iterable[tuple[str, object]]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs if v is not None]


def _messaging(row: dict[str, Any], consumer: bool) -> list[tuple[str, object]]:
    """The messaging semantic conventions' attributes of the message (and of the
    subscription, for the consumer's side): Pulsar's subscription is both the
    destination subscription and the group of consumers sharing its cursor."""
    partition = row["partition"]
    pairs: list[tuple[str, object]] = [
        ("messaging.system", "pulsar"),
        ("messaging.destination.name", row["topic"]),
        (
            "messaging.destination.partition.id",
            str(partition) if partition is not None and partition >= 0 else None,
        ),
        ("messaging.message.id", message_id(row)),
    ]
    if consumer:
        pairs += [
            ("messaging.destination.subscription.name", row["subscription"]),
            ("messaging.consumer.group.name", row["subscription"]),
        ]
    return pairs


def _span(
    trace: str,
    span: str,
    parent: str | None,
    name: str,
    kind: int,
    times: tuple[int, int],
    attributes: list[dict[str, Any]],
    remote: bool = False,
) -> dict[str, Any]:
    """A span; `remote`: its parent is another process's (the message's producer)."""
    out: dict[str, Any] = {"traceId": trace, "spanId": span}
    if parent is not None:
        out["parentSpanId"] = parent
        out["flags"] = HAS_IS_REMOTE | (IS_REMOTE if remote else 0)
    out.update(
        name=name,
        kind=kind,
        startTimeUnixNano=str(times[0] * 1000),
        endTimeUnixNano=str(times[1] * 1000),
        attributes=attributes,
    )
    return out


def row_spans(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans of one journey row (times as µs since the epoch): the journey's, then one
    per stage whose two ends were seen, each its child."""
    trace, parent = trace_of(row)
    journey = _derived(16, "journey", trace, row)
    topic = row["topic"]
    times = [row[h] for h in HOPS if row[h] is not None]
    if not times:  # (a row has at least one hop; this keeps a malformed one a span)
        times = [row.get("ts") or 0]
    pairs = _messaging(row, row["subscription"] is not None)
    pairs += [(f"pulsar.{k}", v) for k, v in row.items() if k != "topic"]
    if row["error"] is not None:
        pairs.append(("error.type", row["error"]))
    head = _span(
        trace,
        journey,
        parent,
        f"journey {topic}" if topic else "journey",
        KIND_INTERNAL,
        (min(times), max(times)),
        _attributes(pairs),
        remote=True,
    )
    if row["error"] is not None:
        head["status"] = {"message": row["error"], "code": STATUS_ERROR}
    out = [head]
    for stage, (start, end, packets, latency, kind, operation) in STAGES.items():
        if row[start] is None or row[end] is None:
            continue
        consumer = stage != "persist"
        side = _CONSUMER_SIDE if consumer else _PRODUCER_SIDE
        pairs = _messaging(row, consumer)
        pairs += [
            ("messaging.client.id", row["consumer_name" if consumer else "producer_name"]),
            ("messaging.operation.name", stage),
            ("messaging.operation.type", operation),
            ("pulsar.stage", stage),
            *((f"pulsar.{c}", row[c]) for c in (*packets, latency, *side)),
        ]
        began = row[start]
        out.append(
            _span(
                trace,
                _derived(16, stage, journey),
                journey,
                f"{stage} {topic}" if topic else stage,
                kind,
                (began, max(began, row[end])),  # dispatch may end "before" it began
                _attributes(pairs),
            )
        )
    return out


def _rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """The batch's rows with timestamps as µs since the epoch."""
    arrays = [a.cast(pa.int64()) if pa.types.is_timestamp(a.type) else a for a in batch.columns]
    rows: list[dict[str, Any]] = pa.RecordBatch.from_arrays(
        arrays, names=batch.schema.names
    ).to_pylist()
    return rows


def _request(spans: list[Any], version: str | None) -> dict[str, Any]:
    scope: dict[str, Any] = {"name": SCOPE_NAME}
    if version is not None:
        scope["version"] = version
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes([("service.name", SERVICE_NAME)])},
                "scopeSpans": [{"scope": scope, "spans": spans, "schemaUrl": SCHEMA_URL}],
            }
        ]
    }


def _journeys(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    missing = missing_columns(batch.schema)
    if missing:
        raise ValueError(f"not the journeys table: no {', '.join(missing)} column")
    return _rows(batch)


def export_request(batch: pa.RecordBatch, version: str | None = None) -> dict[str, Any]:
    """The spans of a batch of journeys as one ExportTraceServiceRequest (OTLP JSON):
    resource `service.name` SERVICE_NAME, one scope (SCOPE_NAME, `version`)."""
    return _request([span for row in _journeys(batch) for span in row_spans(row)], version)


def export_line(batch: pa.RecordBatch, version: str | None = None) -> bytes:
    """`export_request` encoded as one line of JSON (UTF-8, newline-terminated). Each row's
    spans are encoded as they are made, so the batch's spans are never all live dicts at
    once (which would make the garbage collector scan millions of them, over and over)."""
    head, tail = orjson.dumps(_request([], version)).split(b'"spans":[]', 1)
    spans = b",".join(orjson.dumps(span) for row in _journeys(batch) for span in row_spans(row))
    return head + b'"spans":[' + spans + b"]" + tail + b"\n"


def journey_spans(
    journeys: pa.Table | Iterable[pa.RecordBatch], version: str | None = None
) -> Iterator[dict[str, Any]]:
    """One ExportTraceServiceRequest per record batch with rows (a table's batches as
    they are): the lines of an OTLP JSON file, in order."""
    batches = journeys.to_batches() if isinstance(journeys, pa.Table) else journeys
    for batch in batches:
        if batch.num_rows:
            yield export_request(batch, version)
