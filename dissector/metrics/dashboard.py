"""The Grafana dashboard of the metrics, declared once: its rows, panels and their PromQL.

Input: the metric families (`families.BY_NAME`): every query names its family through
`_family`, so a family renamed or removed there fails at import (and in the tests), never
on a user's board.
Output: `ROWS` (titled rows of `Panel`s, each with its `Query`s), `VARIABLES` (the board's
template variables), `queries()` (every query in order) and `panel_docs()` (docs/grafana.md's
list of every panel's queries); `board` makes Grafana's JSON of them.
Rules:
- Labels in a query are the family's (or `instance`, the target label Prometheus adds, so
  one board shows several dissectors); a label the family lacks fails at import too.
- Rates use `$__rate_interval`; latency percentiles are `histogram_quantile` over the
  families' buckets (families.LATENCY_BUCKETS); heat maps read the buckets as `heatmap`.
- Sums of things that are normally absent (kernel drops, bytes missing) end in
  `or vector(0)`: no loss shows as 0, not as "no data".
"""

from __future__ import annotations

from dataclasses import dataclass

from dissector.metrics.families import BY_NAME, COUNTER, GAUGE, HISTOGRAM, PREFIX, Family

#: Percentiles drawn for each latency: (quantile, legend suffix).
PERCENTILES = ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9"))
#: Labels a query may match on beyond the family's own: the scrape target's.
TARGET_LABELS = ("instance",)
RATE = "[$__rate_interval]"


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target: its expression, legend (Grafana's {{label}} template) and format
    (`time_series`, or `heatmap` for bucket counts drawn as a heat map)."""

    expr: str
    legend: str
    format: str = "time_series"


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel: title, Grafana type (`timeseries`, `heatmap`, `stat`), unit of its values
    (Grafana's unit ids: pps, Bps, s, short), description and queries; `width` in grid
    columns (of 24)."""

    title: str
    type: str
    unit: str
    description: str
    queries: tuple[Query, ...]
    width: int = 8


# ------------------------------------------------------------------- query builders


def _family(short: str, kind: str) -> Family:
    """The family `pulsar_dissect_<short>` of kind `kind` (KeyError/ValueError otherwise)."""
    family = BY_NAME[PREFIX + short]
    if family.kind != kind:
        raise ValueError(f"{family.name} is a {family.kind}, not a {kind}")
    return family


def _labels(family: Family, labels: tuple[str, ...]) -> None:
    for label in labels:
        bucket = label == "le" and family.kind == HISTOGRAM
        if label not in family.labels and label not in TARGET_LABELS and not bucket:
            raise ValueError(f"{family.name} has no label {label!r}")


#: Matchers every selector carries, on the board's variables.
_INSTANCE = 'instance=~"$instance"'
_TOPIC = 'topic=~"$topic"'
_SUBSCRIPTION = 'subscription=~"$subscription"'


def _selector(family: Family, suffix: str = "", *matchers: str) -> str:
    """`name{matchers}`: the instance's matcher first, each matcher's label checked."""
    for matcher in matchers:
        _labels(family, (matcher.split("=", 1)[0].rstrip("!~"),))
    return f"{family.name}{suffix}{{{', '.join((_INSTANCE, *matchers))}}}"


def _sum(family: Family, labels: tuple[str, ...]) -> str:
    """`sum by (labels) ` or `sum` (labels checked)."""
    _labels(family, labels)
    return f"sum by ({', '.join(labels)}) " if labels else "sum"


def rate(short: str, by: tuple[str, ...] = (), *matchers: str, zero: bool = False) -> str:
    """Per-second rate of a counter, summed by `by` (`zero`: `or vector(0)`, ungrouped)."""
    family = _family(short, COUNTER)
    expr = f"{_sum(family, by)}(rate({_selector(family, '', *matchers)}{RATE}))"
    if zero:
        assert not by, "or vector(0) would add an unlabelled series to grouped ones"
        expr += " or vector(0)"
    return expr


def gauge(short: str, by: tuple[str, ...] = (), *matchers: str) -> str:
    """A gauge summed by `by`."""
    family = _family(short, GAUGE)
    return f"{_sum(family, by)}({_selector(family, '', *matchers)})"


def buckets(short: str, *matchers: str) -> str:
    """A histogram's buckets' rates summed by `le` (a heat map's cells)."""
    family = _family(short, HISTOGRAM)
    return f"sum by (le) (rate({_selector(family, '_bucket', *matchers)}{RATE}))"


def quantile(q: float, short: str, by: tuple[str, ...], *matchers: str) -> str:
    """The q-quantile of a histogram's latencies, by `by`."""
    family = _family(short, HISTOGRAM)
    inner = f"rate({_selector(family, '_bucket', *matchers)}{RATE})"
    return f"histogram_quantile({q}, {_sum(family, (*by, 'le'))}({inner}))"


def _percentiles(short: str, by: tuple[str, ...], *matchers: str) -> tuple[Query, ...]:
    legend = " ".join("{{" + label + "}}" for label in by)
    return tuple(
        Query(quantile(q, short, by, *matchers), f"{legend} {name}".strip())
        for q, name in PERCENTILES
    )


def _heatmap(short: str, *matchers: str) -> tuple[Query, ...]:
    return (Query(buckets(short, *matchers), "{{le}}", "heatmap"),)


# ------------------------------------------------------------------- the board

#: Requests' outcomes that are failures (the timeline's others: success, unmatched, redelivered)
_ERRORS = 'outcome=~"error|unanswered"'

# fmt: off
ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Capture health",
        (
            Panel("Packets", "timeseries", "pps", "Packets dissected per second.",
                  (Query(rate("packets_total"), "packets"),)),
            Panel("Captured bytes", "timeseries", "Bps",
                  "Bytes of the packets dissected per second, as captured.",
                  (Query(rate("captured_bytes_total"), "captured"),)),
            Panel("Capture losses", "timeseries", "pps",
                  "Packets the kernel dropped before the capture read them, and packets "
                  "captured but not dissected (live fell behind): both should stay at 0.",
                  (Query(rate("kernel_dropped_packets_total", zero=True), "kernel drops"),
                   Query(rate("skipped_packets_total", zero=True), "not dissected"))),
            Panel("Bytes missing", "timeseries", "Bps",
                  "Bytes of TCP streams the capture lost (gaps), per second.",
                  (Query(rate("missing_bytes_total", zero=True), "missing"),)),
            Panel("Connections", "timeseries", "short",
                  "Connections open now, and connections opened per second.",
                  (Query(gauge("connections_open"), "open"),
                   Query(rate("connections_opened_total"), "opened/s"))),
            Panel("Connections ended", "timeseries", "short",
                  "Connections ended per second, by how (fin, rst, timeout, ...).",
                  (Query(rate("connections_ended_total", ("reason",)), "{{reason}}"),)),
            Panel("Frames by command", "timeseries", "short",
                  "Pulsar frames per second, by command (both directions).",
                  (Query(rate("frames_total", ("command",)), "{{command}}"),), width=24),
        ),
    ),
    (
        "Requests",
        (
            Panel("Request latency", "heatmap", "s",
                  "Time from a request to its answer, every command: the histogram's "
                  "buckets per second.",
                  _heatmap("request_duration_seconds"), width=12),
            Panel("Request latency percentiles", "timeseries", "s",
                  "p50, p99 and p99.9 of the time from a request to its answer, by command.",
                  _percentiles("request_duration_seconds", ("command",)), width=12),
            Panel("Requests", "timeseries", "short",
                  "Requests per second by command and outcome (SENDs and ACKs included).",
                  (Query(rate("requests_total", ("command", "outcome")),
                         "{{command}} {{outcome}}"),), width=12),
            Panel("Failed requests", "timeseries", "short",
                  "Requests per second answered with an error or never answered, by "
                  "command and outcome.",
                  (Query(rate("requests_total", ("command", "outcome"), _ERRORS),
                         "{{command}} {{outcome}}"),), width=12),
        ),
    ),
    (
        "Publish and end-to-end latency",
        (
            Panel("Publish latency", "heatmap", "s",
                  "Time from a SEND to its SEND_RECEIPT, the topics chosen.",
                  _heatmap("publish_latency_seconds", _TOPIC), width=12),
            Panel("Publish latency by topic", "timeseries", "s",
                  "p50, p99 and p99.9 of the time from a SEND to its SEND_RECEIPT, by topic.",
                  _percentiles("publish_latency_seconds", ("topic",), _TOPIC), width=12),
            Panel("End-to-end latency", "heatmap", "s",
                  "Time from a message's SEND to the subscription's ACK of it, the topics "
                  "and subscriptions chosen.",
                  _heatmap("end_to_end_latency_seconds", _TOPIC, _SUBSCRIPTION), width=12),
            Panel("End-to-end latency by subscription", "timeseries", "s",
                  "p50, p99 and p99.9 of the time from a message's SEND to the "
                  "subscription's ACK of it, by topic and subscription.",
                  _percentiles("end_to_end_latency_seconds", ("topic", "subscription"),
                               _TOPIC, _SUBSCRIPTION), width=12),
        ),
    ),
    (
        "Throughput",
        (
            Panel("Messages", "timeseries", "short",
                  "Messages published and delivered per second, by topic (batch entries "
                  "counted).",
                  (Query(rate("messages_published_total", ("topic",), _TOPIC),
                         "{{topic}} published"),
                   Query(rate("messages_delivered_total", ("topic",), _TOPIC),
                         "{{topic}} delivered"))),
            Panel("Payload bytes", "timeseries", "Bps",
                  "Payload bytes published and delivered per second, by topic.",
                  (Query(rate("published_bytes_total", ("topic",), _TOPIC),
                         "{{topic}} published"),
                   Query(rate("delivered_bytes_total", ("topic",), _TOPIC),
                         "{{topic}} delivered"))),
            Panel("Acks, nacks and redeliveries", "timeseries", "short",
                  "ACK commands, negative acknowledgements and messages delivered again, "
                  "per second, by topic.",
                  (Query(rate("acks_total", ("topic",), _TOPIC), "{{topic}} acks"),
                   Query(rate("nacks_total", ("topic",), _TOPIC), "{{topic}} nacks"),
                   Query(rate("messages_redelivered_total", ("topic",), _TOPIC),
                         "{{topic}} redelivered"))),
        ),
    ),
    (
        "Producers and consumers",
        (
            Panel("Producers open", "timeseries", "short", "Producers open now, by topic.",
                  (Query(gauge("producers_open", ("topic",), _TOPIC), "{{topic}}"),)),
            Panel("Consumers open", "timeseries", "short",
                  "Consumers open now, by topic and subscription.",
                  (Query(gauge("consumers_open", ("topic", "subscription"), _TOPIC,
                               _SUBSCRIPTION), "{{topic}} {{subscription}}"),)),
            Panel("Permits", "timeseries", "short",
                  "Permits the open consumers granted that the broker has not used yet, by "
                  "topic and subscription (0 for long: the consumer is starved).",
                  (Query(gauge("consumer_permits", ("topic", "subscription"), _TOPIC,
                               _SUBSCRIPTION), "{{topic}} {{subscription}}"),)),
        ),
    ),
    (
        "Findings and anomalies",
        (
            Panel("Findings", "timeseries", "short",
                  "Findings established per second, by code and severity "
                  "(docs/findings.md says what each means and what to check).",
                  (Query(rate("findings_total", ("code", "severity")),
                         "{{code}} ({{severity}})"),)),
            Panel("Open findings", "timeseries", "short",
                  "Findings whose condition still holds, by code and severity.",
                  (Query(gauge("findings_open", ("code", "severity")),
                         "{{code}} ({{severity}})"),)),
            Panel("Anomalies", "timeseries", "short",
                  "Anomalies found in the data per second, by code (docs/tables.md lists "
                  "the codes).",
                  (Query(rate("anomalies_total", ("code",)), "{{code}}"),)),
        ),
    ),
)
# fmt: on


def _metric_regex(*shorts: str) -> str:
    return "|".join(BY_NAME[PREFIX + s].name for s in shorts)


#: The board's query variables after `datasource`: (name, label, query); each multi-valued,
#: "All" (`.*`) by default.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    # a family every exposition shows, live or offline (unlabelled: 0 before any connection)
    (
        "instance",
        "dissector",
        f"label_values({_family('connections_opened_total', COUNTER).name}, instance)",
    ),
    (
        "topic",
        "topic",
        'label_values({__name__=~"'
        + _metric_regex("messages_published_total", "messages_delivered_total", "consumers_open")
        + '", instance=~"$instance"}, topic)',
    ),
    (
        "subscription",
        "subscription",
        f"label_values({_family('consumers_open', GAUGE).name}"
        f'{{instance=~"$instance", topic=~"$topic"}}, subscription)',
    ),
)


def queries() -> list[tuple[str, str, Query]]:
    """Every (row, panel title, query) of the board, in order."""
    return [(row, p.title, q) for row, panels in ROWS for p in panels for q in p.queries]


def panel_docs() -> str:
    """Markdown: every row, panel and query (docs/grafana.md's generated block)."""
    lines: list[str] = []
    for row, panels in ROWS:
        lines += [f"### {row}", ""]
        for p in panels:
            lines += [f"**{p.title}** ({p.type}, unit `{p.unit}`): {p.description}", ""]
            lines += ["```promql", *(q.expr for q in p.queries), "```", ""]
    lines += ["### Variables", "", "| variable | query |", "| --- | --- |"]
    lines += ["| `datasource` | a Prometheus data source |"]
    for name, _, query in VARIABLES:
        lines.append(f"| `{name}` | `{query.replace('|', chr(92) + '|')}` |")
    return "\n".join(lines) + "\n"
