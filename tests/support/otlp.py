"""Read an OTLP JSON lines file back with the opentelemetry-proto package, and check its
spans against the journeys rows they came from.

Input: the file's bytes (or lines); the journeys rows (times as µs since the epoch).
Output: `parse` -> one ExportTraceServiceRequest per line (json_format.Parse, unknown
fields refused); `check` asserts every span is its row's (times, ids, links, attributes).
Rule: OTLP JSON is the protobuf JSON mapping except that trace and span ids are hex, not
base64 (OTLP specification, "JSON Protobuf Encoding"): ids are checked as hex on the line,
then turned to base64 for the protobuf parser. Expected spans are computed here from the
row and docs/journeys.md's rules, not by the exporter's code.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

HAS_IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
IS_REMOTE = SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK

_IDS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}
#: stage -> (start hop, end hop, span kind)
STAGES = {
    "persist": ("send", "receipt", Span.SPAN_KIND_PRODUCER),
    "dispatch": ("receipt", "delivered", Span.SPAN_KIND_INTERNAL),
    "consume": ("delivered", "acked", Span.SPAN_KIND_CONSUMER),
}


def _ids_to_base64(span: dict[str, Any]) -> None:
    for key, width in _IDS.items():
        if key in span:
            value = span[key]
            assert re.fullmatch(f"[0-9a-f]{{{width}}}", value), (key, value)
            span[key] = base64.b64encode(bytes.fromhex(value)).decode()


def parse(data: bytes) -> list[ExportTraceServiceRequest]:
    """Every line of an OTLP JSON lines file as an ExportTraceServiceRequest."""
    assert data.endswith(b"\n") or not data
    out = []
    for line in data.split(b"\n")[:-1]:
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    _ids_to_base64(span)
        out.append(json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()))
    return out


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return {"string_value": v.string_value, "int_value": v.int_value, "bool_value": v.bool_value}[
        str(kind)
    ]


def attributes(span: Span) -> dict[str, Any]:
    out = {a.key: value(a.value) for a in span.attributes}
    assert len(out) == len(span.attributes), "an attribute twice"
    return out


def spans(requests: list[ExportTraceServiceRequest]) -> list[Span]:
    out = []
    for request in requests:
        (rs,) = request.resource_spans
        assert attributes_of(rs.resource.attributes) == {"service.name": "pulsar-dissector (wire)"}
        (ss,) = rs.scope_spans
        assert ss.scope.name == "pulsar-dissector"
        out += list(ss.spans)
    return out


def attributes_of(kvs: Any) -> dict[str, Any]:
    return {a.key: value(a.value) for a in kvs}


def _message_id(row: dict[str, Any]) -> str | None:
    if row["ledger_id"] is None:
        return None
    mid = f"{row['ledger_id']}:{row['entry_id']}:{row['partition']}"
    return mid if row["batch_index"] is None else f"{mid}:{row['batch_index']}"


def check(rows: list[dict[str, Any]], found: list[Span]) -> dict[int, list[Span]]:
    """Assert `found` are the spans of `rows`, in order: per row its journey span, then
    its stage spans; returns each row's spans by index."""
    out: dict[int, list[Span]] = {}
    at = 0
    for i, row in enumerate(rows):
        journey = found[at]
        seen = [row[f"{h}_ts"] for h in ("send", "receipt", "delivered", "acked")]
        seen = [t for t in seen if t is not None]
        assert journey.kind == Span.SPAN_KIND_INTERNAL
        topic = f" {row['topic']}" if row["topic"] else ""
        assert journey.name == f"journey{topic}"
        assert journey.start_time_unix_nano == min(seen) * 1000
        assert journey.end_time_unix_nano == max(seen) * 1000
        attrs = attributes(journey)
        for column, v in row.items():
            if column != "topic":
                assert attrs.get(f"pulsar.{column}") == v, (column, attrs)
        assert attrs["messaging.system"] == "pulsar"
        assert attrs.get("messaging.destination.name") == row["topic"]
        assert attrs.get("messaging.message.id") == _message_id(row)
        partition = row["partition"] if row["partition"] is not None else -1
        assert attrs.get("messaging.destination.partition.id") == (
            str(partition) if partition >= 0 else None
        )
        assert attrs.get("messaging.consumer.group.name") == row["subscription"]
        assert attrs.get("messaging.destination.subscription.name") == row["subscription"]
        if row["error"] is None:
            assert journey.status.code == Status.STATUS_CODE_UNSET
        else:
            assert journey.status.code == Status.STATUS_CODE_ERROR
            assert journey.status.message == row["error"] == attrs["error.type"]
        trace = (row["trace_id"] or "").lower()
        if re.fullmatch("[0-9a-f]{1,32}", trace) and trace.strip("0"):
            assert journey.trace_id.hex() == trace.rjust(32, "0")
            parent = (row["span_id"] or "").lower()
            if re.fullmatch("[0-9a-f]{1,16}", parent) and parent.strip("0"):
                assert journey.parent_span_id.hex() == parent.rjust(16, "0")
                assert journey.flags == HAS_IS_REMOTE | IS_REMOTE  # the producer's span
            else:
                assert journey.parent_span_id == b"" and journey.flags == 0
        else:
            assert journey.parent_span_id == b"" and journey.flags == 0
        assert len(journey.trace_id) == 16 and journey.trace_id.strip(b"\0")
        assert len(journey.span_id) == 8 and journey.span_id.strip(b"\0")
        mine = [journey]
        at += 1
        for stage, (start, end, kind) in STAGES.items():
            t0, t1 = row[f"{start}_ts"], row[f"{end}_ts"]
            if t0 is None or t1 is None:
                continue
            span = found[at]
            at += 1
            mine.append(span)
            assert span.name == f"{stage}{topic}"
            assert span.kind == kind
            assert (span.trace_id, span.parent_span_id) == (journey.trace_id, journey.span_id)
            assert span.flags == HAS_IS_REMOTE  # its parent is local: the journey span
            assert span.start_time_unix_nano == t0 * 1000
            assert span.end_time_unix_nano == max(t0, t1) * 1000
            a = attributes(span)
            assert a[f"pulsar.{stage}_us"] == t1 - t0
            assert a[f"pulsar.{start}_packet"] == row[f"{start}_packet"]
            assert a[f"pulsar.{end}_packet"] == row[f"{end}_packet"]
            assert a["messaging.system"] == "pulsar" and a["pulsar.stage"] == stage
            assert a.get("messaging.message.id") == _message_id(row)
            if stage == "persist":
                assert a["messaging.operation.type"] == "send"
                assert a.get("pulsar.producer_name") == row["producer_name"]
                assert "messaging.consumer.group.name" not in a
            else:
                assert a.get("messaging.consumer.group.name") == row["subscription"]
                assert a.get("pulsar.consumer_conn_id") == row["consumer_conn_id"]
        out[i] = mine
    assert at == len(found), "spans of no row"
    ids = [s.span_id for s in found]
    assert len(set(ids)) == len(ids), "a span id twice"
    return out
