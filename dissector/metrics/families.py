"""The metric families, declared once: what the endpoint, the OTLP export and the docs show.

Input: nothing. Output: `FAMILIES` (every `Family`, in the order shown), `BY_NAME`,
`LATENCY_BUCKETS` (the histograms' upper bounds, seconds), the label limits (`LABEL_LIMITS`,
`OTHER`).
Rules:
- Names follow Prometheus' conventions: a `pulsar_dissect_` prefix, the unit in the name
  (`_seconds`, `_bytes`), counters end in `_total` (the name here has it), base units only.
- A family's labels are named here; a label in `LABEL_LIMITS` keeps at most that many
  distinct values per family: values past the limit fold into `OTHER` (and the fold is
  counted in `pulsar_dissect_label_values_folded_total`), so a broker with a million topics
  cannot exhaust the dissector's memory or the scraper's.
- No label ever carries a payload, a message value, a key or auth data: topics,
  subscriptions, command names, outcomes, codes and reasons only.
"""

from __future__ import annotations

from dataclasses import dataclass

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
PREFIX = "pulsar_dissect_"
#: The value a limited label takes past its limit.
OTHER = "other"
#: Distinct values kept per label and family (the rest fold into OTHER).
LABEL_LIMITS = {"topic": 1000, "subscription": 1000}
#: Histogram bucket upper bounds in seconds (+Inf is implied): 50 µs to 60 s.
LATENCY_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: its full name (counters with `_total`), kind, unit, help text,
    label names and what it is made from (for the docs)."""

    name: str
    kind: str  # COUNTER, GAUGE or HISTOGRAM
    unit: str  # "seconds", "bytes" or "" (a count)
    help: str
    labels: tuple[str, ...]
    source: str
    live_only: bool = False  # only `live` knows it (kernel drops, packets skipped)

    @property
    def base(self) -> str:
        """The name without `_total` (OpenMetrics' family name of a counter)."""
        return self.name.removesuffix("_total") if self.kind == COUNTER else self.name


def _f(
    name: str,
    kind: str,
    unit: str,
    labels: tuple[str, ...],
    help: str,
    source: str,
    *,
    live_only: bool = False,
) -> Family:
    return Family(PREFIX + name, kind, unit, help, labels, source, live_only)


FAMILIES: tuple[Family, ...] = (
    # capture health
    _f("packets_total", COUNTER, "", (), "Packets dissected.", "packets read", live_only=True),
    _f(
        "captured_bytes_total",
        COUNTER,
        "bytes",
        (),
        "Bytes of the packets dissected, as captured.",
        "packets read",
        live_only=True,
    ),
    _f(
        "kernel_dropped_packets_total",
        COUNTER,
        "",
        (),
        "Packets the kernel dropped before the capture read them.",
        "the packet socket's statistics",
        live_only=True,
    ),
    _f(
        "skipped_packets_total",
        COUNTER,
        "",
        (),
        "Packets captured but not dissected (the dissector fell further behind than --queue-size).",
        "the capturer",
        live_only=True,
    ),
    _f(
        "missing_bytes_total",
        COUNTER,
        "bytes",
        ("direction",),
        "Bytes of TCP streams the capture lost (gaps).",
        "tcp.gap anomalies",
    ),
    _f(
        "connections_opened_total",
        COUNTER,
        "",
        (),
        "Connections seen opening (or first seen).",
        "conversations",
    ),
    _f("connections_open", GAUGE, "", (), "Connections open now.", "conversations"),
    _f(
        "connections_ended_total",
        COUNTER,
        "",
        ("reason",),
        "Connections ended, by how (fin, rst, timeout, port_reuse, evicted); those open "
        "when the capture ended are still open.",
        "conversations",
    ),
    _f(
        "frames_total",
        COUNTER,
        "",
        ("command", "direction"),
        "Pulsar frames, by command and direction.",
        "frames",
    ),
    _f(
        "anomalies_total",
        COUNTER,
        "",
        ("code", "severity"),
        "Anomalies found in the data, by code.",
        "anomalies",
    ),
    # requests
    _f(
        "requests_total",
        COUNTER,
        "",
        ("command", "outcome"),
        "Requests by command and "
        "outcome (success, error, unanswered, ...), SENDs and ACKs included.",
        "timeline",
    ),
    _f(
        "request_duration_seconds",
        HISTOGRAM,
        "seconds",
        ("command", "outcome"),
        "Time from a request to its answer (answered requests: success or error).",
        "timeline",
    ),
    # publishing and consuming
    _f(
        "publish_latency_seconds",
        HISTOGRAM,
        "seconds",
        ("topic",),
        "Time from a SEND to its SEND_RECEIPT, per topic.",
        "timeline",
    ),
    _f(
        "end_to_end_latency_seconds",
        HISTOGRAM,
        "seconds",
        ("topic", "subscription"),
        "Time from a message's SEND to the subscription's ACK of it.",
        "the journeys' join, at each ACK",
    ),
    _f(
        "messages_published_total",
        COUNTER,
        "",
        ("topic",),
        "Messages sent by producers (batch entries counted).",
        "messages",
    ),
    _f(
        "published_bytes_total",
        COUNTER,
        "bytes",
        ("topic",),
        "Payload bytes sent by producers.",
        "messages",
    ),
    _f(
        "messages_delivered_total",
        COUNTER,
        "",
        ("topic",),
        "Messages delivered to consumers (batch entries counted).",
        "messages",
    ),
    _f(
        "delivered_bytes_total",
        COUNTER,
        "bytes",
        ("topic",),
        "Payload bytes delivered to consumers.",
        "messages",
    ),
    _f(
        "messages_redelivered_total",
        COUNTER,
        "",
        ("topic",),
        "Messages delivered again (the broker's redelivery count above 0).",
        "messages",
    ),
    _f("acks_total", COUNTER, "", ("topic",), "ACK commands of consumers.", "frames"),
    _f(
        "nacks_total",
        COUNTER,
        "",
        ("topic",),
        "REDELIVER_UNACKNOWLEDGED_MESSAGES commands: consumers' negative acks and "
        "redelivery requests.",
        "frames",
    ),
    # entities
    _f("producers_open", GAUGE, "", ("topic",), "Producers open now.", "lifecycle facts"),
    _f(
        "consumers_open",
        GAUGE,
        "",
        ("topic", "subscription"),
        "Consumers open now.",
        "lifecycle facts",
    ),
    _f(
        "consumer_permits",
        GAUGE,
        "",
        ("topic", "subscription"),
        "Permits the open consumers granted (FLOW) and the broker has not used yet.",
        "permit facts",
    ),
    # diagnoses
    _f(
        "findings_total",
        COUNTER,
        "",
        ("code", "severity"),
        "Findings established (counted once: as a threshold passes, or when their row is made).",
        "findings (as established, and their rows)",
    ),
    _f(
        "findings_open",
        GAUGE,
        "",
        ("code", "severity"),
        "Findings established on connections still open (from when established; a finding "
        "ends with its connection).",
        "findings (as established, and their rows)",
    ),
    # the metrics themselves
    _f(
        "label_values_folded_total",
        COUNTER,
        "",
        ("label",),
        "Label values folded into "
        "'other' because their family had LABEL_LIMITS distinct values already.",
        "metrics",
    ),
)

BY_NAME = {family.name: family for family in FAMILIES}
assert len(BY_NAME) == len(FAMILIES), "a family declared twice"
