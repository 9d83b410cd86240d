"""A snapshot as exposition text: OpenMetrics 1.0 or the Prometheus text format.

Input: a `store.Snapshot`.
Output: `render` -> the text (bytes); `SnapshotCollector`, a prometheus_client collector
of the snapshot a callable returns (for a registry a server or a test renders);
`CONTENT_TYPE_OPENMETRICS`, `CONTENT_TYPE_TEXT` (what each format is served as).
Rules:
- prometheus-client writes the text (escaping, `# EOF`, `le` buckets, counter names), not
  us; it is imported when metrics are asked for only.
- Every declared family is shown (HELP and TYPE) in families.FAMILIES' order; one without
  labels shows 0 before anything was counted (a series that appears late breaks `rate`);
  `live_only` families are left out of an offline read's (`live=False`).
- Histograms: cumulative buckets in seconds (families.LATENCY_BUCKETS, then +Inf), the count
  and the sum. No `_created` series and no timestamps: the node_exporter textfile collector
  takes none, and a capture's clock is not the scraper's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_LATEST
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from dissector.metrics.families import COUNTER, GAUGE, LATENCY_BUCKETS, Family
from dissector.metrics.store import Histogram, Snapshot

#: OpenMetrics 1.0 text (`# EOF` at the end).
CONTENT_TYPE_OPENMETRICS = OPENMETRICS_LATEST
#: The Prometheus text format 0.0.4 (what node_exporter's textfile collector reads).
CONTENT_TYPE_TEXT = CONTENT_TYPE_PLAIN_0_0_4
#: The buckets' `le` labels, +Inf last.
_LE = [floatToGoString(b) for b in LATENCY_BUCKETS] + ["+Inf"]  # type: ignore[no-untyped-call]


class SnapshotCollector:
    """A prometheus_client collector of `get()`'s snapshot (module rules)."""

    def __init__(self, get: Callable[[], Snapshot], *, live: bool = True) -> None:
        self.get, self.live = get, live

    def collect(self) -> Iterator[Metric]:
        for family, series in self.get().families():
            if family.live_only and not self.live:
                continue
            yield _family(family, series)


def _family(family: Family, series: dict[tuple[str, ...], Any]) -> Metric:
    labels = list(family.labels)
    unit = family.unit
    metric: Metric
    if family.kind == COUNTER:
        metric = CounterMetricFamily(family.name, family.help, labels=labels, unit=unit)
    elif family.kind == GAUGE:
        metric = GaugeMetricFamily(family.name, family.help, labels=labels, unit=unit)
    else:
        metric = HistogramMetricFamily(family.name, family.help, labels=labels, unit=unit)
        for key, hist in sorted(series.items()):
            assert isinstance(hist, Histogram)
            buckets = list(zip(_LE, hist.cumulative(), strict=True))
            metric.add_metric(list(key), buckets, hist.sum)
        return metric
    if not labels and not series:
        metric.add_metric([], 0)
    for key, value in sorted(series.items()):
        metric.add_metric(list(key), value)
    return metric


def render(snapshot: Snapshot, *, openmetrics: bool = True, live: bool = True) -> bytes:
    """The snapshot as OpenMetrics 1.0 text (`# EOF` last), or as the Prometheus text
    format 0.0.4 (`openmetrics=False`); `live=False` leaves out what only `live` knows."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot, live=live))
    if openmetrics:
        return openmetrics_latest(registry)  # type: ignore[no-untyped-call,no-any-return]
    return text_latest(registry)
