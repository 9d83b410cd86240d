"""Metrics as OpenTelemetry: a snapshot in, one OTLP JSON ExportMetricsServiceRequest out.

Input: a `store.Snapshot` (every family's series at one moment) and the resource's
attributes (the capture files or the interface sniffed: `resource_attributes`).
Output: `export_request` (the request as a dict of JSON values, the OTLP/JSON mapping:
camelCase fields, 64-bit integers as decimal strings, enums as integers) and `export_line`
(its bytes, one line: what the OpenTelemetry Collector's file exporter writes and its
`otlpjsonfile` receiver reads).
Rules:
- One resource (`service.name` SERVICE_NAME, the capture or interface), one scope
  (SCOPE_NAME and the package's version) with SCHEMA_URL: the semantic conventions the
  `messaging.*` metrics follow.
- The messaging semantic conventions' client metrics (SEMCONV), made from the families'
  labelled series, never from a second pass over frames: `messaging.client.operation
  .duration` (send: `publish_latency_seconds{topic}` for the SENDs answered with a receipt,
  `request_duration_seconds{command=SEND,outcome=error}` for those refused; ack:
  `request_duration_seconds{command=ACK}`), `messaging.client.sent.messages`
  (`messages_published_total{topic}`) and `messaging.client.consumed.messages`
  (`messages_delivered_total{topic}`). A topic folded into `other` gives no destination
  name (the conventions ask for one only when it is a real, low-cardinality name).
- Then every family with series, under its own name (as /metrics shows it: a collector's
  Prometheus exporter, or Prometheus' OTLP receiver, gives back the same names, so the
  shipped Grafana board reads either), its labels as attributes: a counter is a monotonic
  cumulative Sum, a gauge a Gauge, a histogram a cumulative Histogram with explicitBounds
  LATENCY_BUCKETS (bucketCounts per bucket, +Inf last, as OTLP counts them).
- Times: startTimeUnixNano is when counting began (the snapshot's start), timeUnixNano its
  moment; both in nanoseconds since the epoch.
Sans-IO: no socket, thread or file here (`push` sends the requests, the front ends write them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from dissector.metrics.families import (
    COUNTER,
    GAUGE,
    LATENCY_BUCKETS,
    OTHER,
    PREFIX,
    Family,
)
from dissector.metrics.store import Histogram, Snapshot

SERVICE_NAME = "pulsar-dissector"
SCOPE_NAME = "pulsar-dissector"
#: The semantic conventions the messaging metrics follow: `messaging.client.sent.messages`
#: has its name from 1.28.0 on (1.27.0 called it `published`); the attributes used here
#: are unchanged up to 1.44.0.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.28.0"
MESSAGING_SYSTEM = "pulsar"
#: AggregationTemporality (opentelemetry/proto/metrics/v1/metrics.proto): OTLP JSON
#: writes enums as integers.
CUMULATIVE = 2
#: The families' units in UCUM, as OTLP names them ("" : a count).
UNITS = {"seconds": "s", "bytes": "By", "": ""}
#: Error class of a failed operation: the families count outcomes, not the broker's error
#: codes, so a refused SEND or ACK is the conventions' fallback value.
ERROR_OTHER = "_OTHER"

OPERATION_DURATION = "messaging.client.operation.duration"
SENT_MESSAGES = "messaging.client.sent.messages"
CONSUMED_MESSAGES = "messaging.client.consumed.messages"
#: The messaging metrics: name -> (kind, unit, description).
SEMCONV: dict[str, tuple[str, str, str]] = {
    OPERATION_DURATION: (
        "histogram",
        "s",
        "Duration of messaging operation initiated by a producer or consumer client "
        "(send: SEND to SEND_RECEIPT or SEND_ERROR; ack: ACK to ACK_RESPONSE), on the wire.",
    ),
    SENT_MESSAGES: (
        COUNTER,
        "{message}",
        "Number of messages producer attempted to send to the broker (batch entries counted).",
    ),
    CONSUMED_MESSAGES: (
        COUNTER,
        "{message}",
        "Number of messages the broker delivered to consumers (batch entries counted).",
    ),
}
#: request command -> (messaging.operation.name, messaging.operation.type) of the
#: requests that are messaging operations (the others are the client's housekeeping).
OPERATIONS = {"SEND": ("send", "send"), "ACK": ("ack", "settle")}
#: The outcomes of requests that have a duration (an answer came).
ANSWERED = ("success", "error")

Attributes = list[dict[str, Any]]


def _value(value: object) -> dict[str, Any]:
    """An OTLP AnyValue: int64 as a decimal string; a list as an arrayValue."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def attributes(pairs: Iterable[tuple[str, object]]) -> Attributes:
    """KeyValues of the pairs whose value is not None, in order."""
    return [{"key": k, "value": _value(v)} for k, v in pairs if v is not None]


def resource_attributes(
    *,
    captures: Sequence[str] = (),
    interface: str | None = None,
    host: str | None = None,
) -> dict[str, object]:
    """The resource's attributes: what was read (capture files) or sniffed (an interface
    and its host)."""
    out: dict[str, object] = {"service.name": SERVICE_NAME}
    if captures:
        out["pulsar_dissector.captures"] = list(captures)
    if interface is not None:
        out["network.interface.name"] = interface
    if host is not None:
        out["host.name"] = host
    return out


def _number(value: float, times: dict[str, str], labels: Attributes) -> dict[str, Any]:
    point: dict[str, Any] = {"attributes": labels, **times}
    if isinstance(value, int) or float(value).is_integer():
        point["asInt"] = str(int(value))
    else:
        point["asDouble"] = float(value)
    return point


def _histogram(hist: Histogram, times: dict[str, str], labels: Attributes) -> dict[str, Any]:
    return {
        "attributes": labels,
        **times,
        "count": str(int(hist.count)),
        "sum": float(hist.sum),
        "bucketCounts": [str(int(n)) for n in hist.buckets],
        "explicitBounds": list(LATENCY_BUCKETS),
    }


def _metric(
    name: str, kind: str, unit: str, description: str, points: list[dict[str, Any]]
) -> dict[str, Any]:
    metric: dict[str, Any] = {"name": name, "description": description, "unit": unit}
    if kind == COUNTER:
        metric["sum"] = {
            "dataPoints": points,
            "aggregationTemporality": CUMULATIVE,
            "isMonotonic": True,
        }
    elif kind == GAUGE:
        metric["gauge"] = {"dataPoints": points}
    else:
        metric["histogram"] = {"dataPoints": points, "aggregationTemporality": CUMULATIVE}
    return metric


def _times(snapshot: Snapshot) -> dict[str, str]:
    end = max(snapshot.time_us, snapshot.start_us)
    return {"startTimeUnixNano": str(snapshot.start_us * 1000), "timeUnixNano": str(end * 1000)}


def _messaging(operation: str, topic: str | None) -> list[tuple[str, object]]:
    """The attributes every messaging metric's point has: the system, the operation, the
    destination (none for a topic folded into `other` or not known)."""
    return [
        ("messaging.system", MESSAGING_SYSTEM),
        ("messaging.operation.name", operation),
        ("messaging.destination.name", topic if topic and topic != OTHER else None),
    ]


def semconv_metrics(snapshot: Snapshot) -> list[dict[str, Any]]:
    """The messaging semantic conventions' metrics of a snapshot (module rules); those
    without any point are left out."""
    times = _times(snapshot)
    series = snapshot.series
    durations: list[dict[str, Any]] = []
    for (topic,), hist in series.get(PREFIX + "publish_latency_seconds", {}).items():
        pairs = [*_messaging("send", topic), ("messaging.operation.type", "send")]
        durations.append(_histogram(hist, times, attributes(pairs)))
    for (command, outcome), hist in series.get(PREFIX + "request_duration_seconds", {}).items():
        if command not in OPERATIONS or outcome not in ANSWERED:
            continue
        if command == "SEND" and outcome != "error":
            continue  # answered SENDs are publish_latency_seconds' (with their topic)
        name, kind = OPERATIONS[command]
        pairs = [
            *_messaging(name, None),
            ("messaging.operation.type", kind),
            ("error.type", ERROR_OTHER if outcome == "error" else None),
        ]
        durations.append(_histogram(hist, times, attributes(pairs)))
    counts: dict[str, list[dict[str, Any]]] = {SENT_MESSAGES: [], CONSUMED_MESSAGES: []}
    for metric, family, operation in (
        (SENT_MESSAGES, "messages_published_total", "send"),
        (CONSUMED_MESSAGES, "messages_delivered_total", "receive"),
    ):
        for (topic,), value in series.get(PREFIX + family, {}).items():
            counts[metric].append(_number(value, times, attributes(_messaging(operation, topic))))
    points = {OPERATION_DURATION: durations, **counts}
    return [
        _metric(name, kind, unit, text, points[name])
        for name, (kind, unit, text) in SEMCONV.items()
        if points[name]
    ]


def family_metric(
    family: Family, series: Mapping[tuple[str, ...], Any], snapshot: Snapshot
) -> dict[str, Any]:
    """One family as an OTLP metric (module rules), its series as data points."""
    times = _times(snapshot)
    if family.kind == GAUGE:  # a gauge's value is of its moment: no start time
        times = {"timeUnixNano": times["timeUnixNano"]}
    points = []
    for key, value in series.items():
        labels = attributes(zip(family.labels, key, strict=True))
        if isinstance(value, Histogram):
            points.append(_histogram(value, times, labels))
        else:
            points.append(_number(value, times, labels))
    return _metric(family.name, family.kind, UNITS[family.unit], family.help, points)


def export_request(
    snapshot: Snapshot, resource: Mapping[str, object], version: str | None = None
) -> dict[str, Any]:
    """The snapshot as one ExportMetricsServiceRequest (OTLP JSON, module rules):
    `resource` its attributes (service.name SERVICE_NAME unless given), `version` the
    scope's."""
    scope: dict[str, Any] = {"name": SCOPE_NAME}
    if version is not None:
        scope["version"] = version
    metrics = semconv_metrics(snapshot)
    metrics += [family_metric(f, s, snapshot) for f, s in snapshot.families() if s]
    pairs = {"service.name": SERVICE_NAME, **resource}
    return {
        "resourceMetrics": [
            {
                "resource": {"attributes": attributes(pairs.items())},
                "scopeMetrics": [{"scope": scope, "metrics": metrics, "schemaUrl": SCHEMA_URL}],
            }
        ]
    }


def export_line(
    snapshot: Snapshot, resource: Mapping[str, object], version: str | None = None
) -> bytes:
    """`export_request` as one line of JSON (UTF-8, newline-terminated)."""
    return orjson.dumps(export_request(snapshot, resource, version)) + b"\n"
