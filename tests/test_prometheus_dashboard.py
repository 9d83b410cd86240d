"""A real Prometheus scrapes the metrics, and the shipped Grafana board's queries run on it.

- The harness (tests/support/prometheus.py) against a static endpoint: Debian's
  `prometheus` scrapes hand-written OpenMetrics text, and PromQL over its HTTP API answers
  the hand-written values (counters by label, a histogram's quantile computed by hand from
  its buckets as Prometheus' documentation interpolates).
- Every query of the board, with Grafana's variables substituted, is PromQL that Prometheus
  accepts; on a store holding a series of every family, rendered by `openmetrics.render`
  (what `live --metrics` serves), every query and variable returns data: the board and the
  exposition agree on names, suffixes (`_total`, `_bucket`) and labels.
- A real client's capture (pcaps/acks.pcap), its metrics as `summary --format openmetrics`
  makes them, scraped: PromQL answers what the client's own record says (messages sent,
  received and received again per topic, negative acks, producers, subscriptions, SENDs).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dissector.findings import Thresholds
from dissector.metrics import dashboard
from dissector.metrics.families import FAMILIES, GAUGE, HISTOGRAM
from dissector.metrics.openmetrics import CONTENT_TYPE_OPENMETRICS, render
from dissector.metrics.store import MetricStore
from dissector.read import ReaderOptions
from dissector.read.metrics import metrics_of
from tests.support.prometheus import (
    PrometheusServer,
    PromQLError,
    StaticMetrics,
    substitute,
    variable_values,
)

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TOPIC_A = "persistent://public/default/orders"
TOPIC_B = "persistent://public/default/payments"
#: Hand-written: 12 and 3 messages; 4 PRODUCER requests, 2 within 1 ms, 3 within 5 ms.
STATIC = f"""\
# TYPE pulsar_dissect_messages_published counter
# HELP pulsar_dissect_messages_published Messages sent by producers (batch entries counted).
pulsar_dissect_messages_published_total{{topic="{TOPIC_A}"}} 12
pulsar_dissect_messages_published_total{{topic="{TOPIC_B}"}} 3
# TYPE pulsar_dissect_request_duration_seconds histogram
# UNIT pulsar_dissect_request_duration_seconds seconds
# HELP pulsar_dissect_request_duration_seconds Time from a request to its answer.
pulsar_dissect_request_duration_seconds_bucket{{command="PRODUCER",outcome="success",le="0.001"}} 2
pulsar_dissect_request_duration_seconds_bucket{{command="PRODUCER",outcome="success",le="0.005"}} 3
pulsar_dissect_request_duration_seconds_bucket{{command="PRODUCER",outcome="success",le="+Inf"}} 4
pulsar_dissect_request_duration_seconds_count{{command="PRODUCER",outcome="success"}} 4
pulsar_dissect_request_duration_seconds_sum{{command="PRODUCER",outcome="success"}} 0.0123
# EOF
""".encode()


Static = tuple[PrometheusServer, StaticMetrics]


@contextlib.contextmanager
def scraped(body: bytes, content_type: str, tmp: Path) -> Iterator[Static]:
    """Prometheus scraping a static endpoint, once it holds two scrapes of it (a rate needs
    two samples)."""
    with (
        StaticMetrics(body, content_type) as target,
        PrometheusServer([target.address], tmp) as prom,
    ):
        prom.wait_for(
            lambda: prom.values("sum(count_over_time(up[1m]))").get("", 0) >= 2,
            "two scrapes of the static endpoint",
        )
        yield prom, target


@pytest.fixture(scope="module")
def static_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Static]:
    with scraped(STATIC, OPENMETRICS, tmp_path_factory.mktemp("prom")) as both:
        yield both


def test_prometheus_answers_the_hand_written_values(static_prometheus: Static) -> None:
    prom, target = static_prometheus
    assert target.scrapes >= 2
    (up,) = prom.targets_up()
    assert up["health"] == "up" and up["scrapeUrl"] == f"http://{target.address}/metrics"
    published = prom.values("pulsar_dissect_messages_published_total", "topic")
    assert published == {TOPIC_A: 12.0, TOPIC_B: 3.0}
    assert prom.values("sum(pulsar_dissect_messages_published_total)") == {"": 15.0}
    # Prometheus interpolates linearly within a bucket: rank q*4 among 2, 3, 4 (cumulative)
    buckets = "pulsar_dissect_request_duration_seconds_bucket"
    assert prom.values(f"histogram_quantile(0.5, {buckets})") == {"": 0.001}  # 0 + 1ms * 2/2
    assert prom.values(f"histogram_quantile(0.75, {buckets})") == {"": 0.005}  # 1 + 4ms * 1/1
    assert prom.values(f"{buckets[:-7]}_count", "command") == {"PRODUCER": 4.0}
    assert prom.label_values("topic", "pulsar_dissect_messages_published_total") == [
        TOPIC_A,
        TOPIC_B,
    ]
    with pytest.raises(PromQLError, match="bad_data"):
        prom.query("sum(")


def test_every_board_query_is_promql_prometheus_accepts(static_prometheus: Static) -> None:
    prom, target = static_prometheus
    chosen = {"instance": target.address}
    for name, _, definition in dashboard.VARIABLES:
        values = variable_values(prom, definition, {**chosen, "topic": ".*", "subscription": ".*"})
        chosen.setdefault(name, values[0] if values else ".*")
    assert chosen["topic"] == TOPIC_A  # label_values sorted: the first topic
    answered = {}
    for _, title, query in dashboard.queries():
        answered[title, query.expr] = prom.query(substitute(query.expr, chosen))
    # the static endpoint's two families are on the board: their panels have data
    with_data = {title for (title, _), result in answered.items() if result}
    assert {"Messages", "Request latency", "Request latency percentiles"} <= with_data


#: A value for each label of the families (requests get a failed outcome too).
SAMPLE_LABELS = {
    "topic": TOPIC_A,
    "subscription": "sub-a",
    "command": "SUBSCRIBE",
    "outcome": "success",
    "direction": "client_to_broker",
    "reason": "fin",
    "code": "consumer.busy",
    "severity": "error",
    "label": "topic",
}


def every_family() -> bytes:
    """OpenMetrics text of a store holding a series of every family."""
    store = MetricStore()
    for family in FAMILIES:
        rows = [tuple(SAMPLE_LABELS[label] for label in family.labels)]
        if "outcome" in family.labels:
            rows.append(tuple("error" if v == "success" else v for v in rows[0]))
        for values in rows:
            if family.kind == HISTOGRAM:
                store.observe(family.name, values, np.array([800, 4000], dtype=np.int64))
            elif family.kind == GAUGE:
                store.set(family.name, values, 1)
            else:
                store.inc(family.name, values, 2)
    return render(store.snapshot(), openmetrics=True, live=True)


def test_on_every_family_every_board_query_returns_data(tmp_path: Path) -> None:
    with scraped(every_family(), CONTENT_TYPE_OPENMETRICS, tmp_path) as (prom, target):
        chosen = {"instance": target.address}
        found: dict[str, list[str]] = {}
        for name, _, definition in dashboard.VARIABLES:
            found[name] = variable_values(prom, definition, {**chosen, "topic": ".*"})
            chosen[name] = found[name][0] if found[name] else "no-value"
        assert found == {
            "instance": [target.address],
            "topic": [TOPIC_A],
            "subscription": ["sub-a"],
        }
        empty = [
            (title, query.expr)
            for _, title, query in dashboard.queries()
            if not prom.query(substitute(query.expr, chosen))
        ]
        assert empty == []
        failed = 'pulsar_dissect_requests_total{outcome=~"error|unanswered"}'
        assert prom.values(failed, "outcome") == {"error": 2.0}
        # 800 µs and 4 ms observed: interpolated within the buckets (0.5, 1] ms and
        # (2.5, 5] ms, as Prometheus' histogram_quantile does
        buckets = "sum by (le) (pulsar_dissect_publish_latency_seconds_bucket)"
        assert prom.values(f"histogram_quantile(0.5, {buckets})") == {"": 0.001}
        p99 = prom.values(f"histogram_quantile(0.99, {buckets})")[""]
        assert p99 == pytest.approx(0.0025 + 0.0025 * 0.98)


ACKS = Path(__file__).resolve().parent.parent / "pcaps" / "acks.pcap"


def test_a_capture_s_metrics_in_prometheus_are_the_client_s_record(tmp_path: Path) -> None:
    """`summary --format openmetrics`'s snapshot of a real client's capture (pcaps/acks.pcap:
    batch-index, cumulative and negative acks, a redelivery request), scraped: PromQL
    answers what the client's manifest says it did."""
    manifest = json.loads(ACKS.with_suffix(".manifest.json").read_text())
    options = ReaderOptions(thresholds=Thresholds(redeliveries=1))
    body = render(metrics_of([ACKS], options), live=False)
    with scraped(body, CONTENT_TYPE_OPENMETRICS, tmp_path) as (prom, _):
        by_topic = "sum by (topic) (pulsar_dissect_%s)"
        sent = Counter(s["topic"] for s in manifest["sent"])
        received = Counter(r["topic_name"] for r in manifest["received"])
        again = Counter(r["topic_name"] for r in manifest["received"] if r["redelivery_count"])
        negative = Counter(a["topic_name"] for a in manifest["acks"] if a["kind"] == "negative")
        (shared,) = negative
        asked = {shared: negative[shared] + len(manifest["redelivery_requests"])}
        assert prom.values(by_topic % "messages_published_total", "topic") == sent
        assert prom.values(by_topic % "messages_delivered_total", "topic") == received
        assert prom.values(by_topic % "messages_redelivered_total", "topic") == again
        assert prom.values(by_topic % "nacks_total", "topic") == asked
        requests = "sum by (command) (pulsar_dissect_requests_total{outcome='success'})"
        done = prom.values(requests, "command")
        assert done["PRODUCER"] == manifest["producers_created"] == 2
        assert done["SUBSCRIBE"] == manifest["consumers_created"] == 2
        # one SEND per entry the broker stored (a batch's messages share their entry)
        entries = {(s["topic"], s["message_id"]["ledger_id"], s["message_id"]["entry_id"])
                   for s in manifest["sent"]}  # fmt: skip
        assert done["SEND"] == len(entries) == 5
        findings = prom.values("sum by (code) (pulsar_dissect_findings_total)", "code")
        assert findings == {"consumer.redelivery_storm": 1.0}
