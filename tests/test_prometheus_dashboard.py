"""A real Prometheus scrapes the metrics, and the shipped Grafana board's queries run on it.

- The harness (tests/support/prometheus.py) against a static endpoint: Debian's
  `prometheus` scrapes hand-written OpenMetrics text, and PromQL over its HTTP API answers
  the hand-written values (counters by label, a histogram's quantile computed by hand from
  its buckets as Prometheus' documentation interpolates).
- Every query of the board, with Grafana's variables substituted, is PromQL that Prometheus
  accepts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dissector.metrics import dashboard
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


@pytest.fixture(scope="module")
def static_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Static]:
    """Prometheus scraping the static endpoint, once it holds two scrapes of it (a rate
    needs two samples)."""
    tmp = tmp_path_factory.mktemp("prom")
    with (
        StaticMetrics(STATIC, OPENMETRICS) as target,
        PrometheusServer([target.address], tmp) as prom,
    ):
        prom.wait_for(
            lambda: prom.values("sum(count_over_time(up[1m]))").get("", 0) >= 2,
            "two scrapes of the static endpoint",
        )
        yield prom, target


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
