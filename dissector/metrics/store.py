"""The metrics' values: counters, gauges and histograms per family and label values.

Input: updates from `feed` (whole arrays of latencies at a time, never one object per frame).
Output: `Snapshot` (immutable: what one scrape or export shows), `merge` of snapshots (the
workers of `live -j N`, several captures).
Rules:
- A family's series are keyed by its label values (a tuple in the family's label order).
- Limited labels (`families.LABEL_LIMITS`): the first N distinct values seen per family are
  kept, later ones become `families.OTHER` and each fold is counted in
  `pulsar_dissect_label_values_folded_total{label}` (once per family and value).
- Histograms keep per-bucket counts (`families.LATENCY_BUCKETS`, +Inf last), the count and
  the sum (seconds); latencies arrive in whole microseconds.
- Gauges are set, counters only grow; a snapshot copies everything (the dissector keeps
  updating the store while an HTTP thread renders an earlier snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dissector.metrics.families import (
    BY_NAME,
    COUNTER,
    FAMILIES,
    GAUGE,
    HISTOGRAM,
    LABEL_LIMITS,
    LATENCY_BUCKETS,
    OTHER,
    PREFIX,
    Family,
)

Labels = tuple[str, ...]
FOLDED = PREFIX + "label_values_folded_total"
#: Bucket bounds in microseconds (the latencies' unit), for np.searchsorted.
_BOUNDS_US = np.array([round(b * 1e6) for b in LATENCY_BUCKETS], dtype=np.int64)


@dataclass(slots=True)
class Histogram:
    """Counts per bucket (non-cumulative, len(LATENCY_BUCKETS) + 1: +Inf last), count, sum (s)."""

    buckets: np.ndarray = field(
        default_factory=lambda: np.zeros(len(LATENCY_BUCKETS) + 1, dtype=np.int64)
    )
    count: int = 0
    sum: float = 0.0

    def add(self, us: np.ndarray) -> None:
        """Observe latencies in microseconds (int64); a bucket counts values <= its bound."""
        if not len(us):
            return
        idx = np.searchsorted(_BOUNDS_US, us, side="left")
        self.buckets += np.bincount(idx, minlength=len(self.buckets))
        self.count += len(us)
        self.sum += float(np.sum(us, dtype=np.int64)) / 1e6

    def cumulative(self) -> list[int]:
        """Counts of values <= each bound, +Inf last (as Prometheus' `le` buckets)."""
        return [int(x) for x in np.cumsum(self.buckets)]

    def copy(self) -> Histogram:
        return Histogram(self.buckets.copy(), self.count, self.sum)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every family's series at one moment: name -> {labels: value}; a histogram's value is
    a `Histogram` (a copy). `start_us`/`time_us`: when counting began and this moment
    (µs since the epoch, the packets' clock or the wall clock of `live`)."""

    series: dict[str, dict[Labels, Any]]
    start_us: int
    time_us: int

    def families(self) -> list[tuple[Family, dict[Labels, Any]]]:
        """Declared families in their order, each with its series (possibly none)."""
        return [(f, self.series.get(f.name, {})) for f in FAMILIES]

    def value(self, name: str, labels: Labels = ()) -> Any:
        """One series' value (0 when absent); tests and front ends read it."""
        return self.series.get(name, {}).get(labels, 0)


class MetricStore:
    """The live values; `snapshot()` copies them (module rules)."""

    def __init__(self, start_us: int = 0) -> None:
        self.start_us = start_us
        self.time_us = start_us
        self._series: dict[str, dict[Labels, Any]] = {f.name: {} for f in FAMILIES}
        # per family and limited label: the values kept
        self._kept: dict[tuple[str, str], set[str]] = {}
        self._folded: dict[tuple[str, str], set[str]] = {}

    def labels(self, name: str, values: tuple[Any, ...]) -> Labels:
        """The label values of a series of family `name` as stored: text, limited labels
        folded (module rules). None becomes ""."""
        family = BY_NAME[name]
        out = []
        for label, value in zip(family.labels, values, strict=True):
            text = "" if value is None else str(value)
            limit = LABEL_LIMITS.get(label)
            if limit is not None and text != OTHER:
                kept = self._kept.setdefault((name, label), set())
                if text not in kept:
                    if len(kept) < limit:
                        kept.add(text)
                    else:
                        folded = self._folded.setdefault((name, label), set())
                        if text not in folded and len(folded) < limit:
                            folded.add(text)  # bounded too: counted once while remembered
                            self.inc(FOLDED, (label,))
                        text = OTHER
            out.append(text)
        return tuple(out)

    def inc(self, name: str, values: tuple[Any, ...] = (), by: float = 1) -> None:
        """Add `by` (>= 0) to a counter's series."""
        assert BY_NAME[name].kind == COUNTER
        series = self._series[name]
        key = self.labels(name, values) if values else ()
        series[key] = series.get(key, 0) + by

    def set(self, name: str, values: tuple[Any, ...], value: float) -> None:
        """Set a gauge's series."""
        assert BY_NAME[name].kind == GAUGE
        key = self.labels(name, values) if values else ()
        self._series[name][key] = value

    def add_gauge(self, name: str, values: tuple[Any, ...], by: float) -> None:
        """Move a gauge's series by `by` (either sign)."""
        assert BY_NAME[name].kind == GAUGE
        series = self._series[name]
        key = self.labels(name, values) if values else ()
        series[key] = series.get(key, 0) + by

    def observe(self, name: str, values: tuple[Any, ...], us: np.ndarray) -> None:
        """Observe latencies (µs, int64 array) in a histogram's series."""
        assert BY_NAME[name].kind == HISTOGRAM
        series = self._series[name]
        key = self.labels(name, values) if values else ()
        hist = series.get(key)
        if hist is None:
            hist = series[key] = Histogram()
        hist.add(np.asarray(us, dtype=np.int64))

    def snapshot(self, time_us: int | None = None) -> Snapshot:
        """A copy of every series (module rules)."""
        if time_us is not None:
            self.time_us = max(self.time_us, time_us)
        copied: dict[str, dict[Labels, Any]] = {}
        for name, series in self._series.items():
            if BY_NAME[name].kind == HISTOGRAM:
                copied[name] = {k: h.copy() for k, h in series.items()}
            else:
                copied[name] = dict(series)
        return Snapshot(copied, self.start_us, self.time_us)


def merge(snapshots: list[Snapshot]) -> Snapshot:
    """Snapshots summed series by series (counters, gauges and histograms alike): the
    workers of `live -j N` share the flows, so their counts add up. Label limits apply per
    snapshot (a merged family may have up to N times the limit)."""
    out: dict[str, dict[Labels, Any]] = {f.name: {} for f in FAMILIES}
    for snap in snapshots:
        for name, series in snap.series.items():
            target = out.setdefault(name, {})
            for key, value in series.items():
                if isinstance(value, Histogram):
                    have = target.get(key)
                    target[key] = value.copy() if have is None else _plus(have, value)
                else:
                    target[key] = target.get(key, 0) + value
    start = min((s.start_us for s in snapshots), default=0)
    end = max((s.time_us for s in snapshots), default=0)
    return Snapshot(out, start, end)


def _plus(a: Histogram, b: Histogram) -> Histogram:
    return Histogram(a.buckets + b.buckets, a.count + b.count, a.sum + b.sum)
