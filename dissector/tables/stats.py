"""Latency statistics, defined once: the summary, the report and the fleet job use these.

Input: timeline or journeys record batches (as a read streams them), or one group's
latencies in microseconds.
Output: per request command (`Latencies`): the latencies of its answered requests; per
subscription (`Subscriptions`): its messages' counts (SUBSCRIPTION_COUNTS) and the
statistics of its JOURNEY_LATENCIES. Statistics (`describe`): COUNT, one column per
PERCENTILES (`percentile_name`: p50_ms ... p99_99_ms; `stat_label` for text: p99.9) and
MAX, in milliseconds (`latency_ms`).
Rules:
- Requests: only answered pairs count (outcome in ANSWERED: success or error); an
  unanswered request has no latency, an unmatched response no request.
- Journeys (docs/journeys.md): a subscription is the journeys rows with a consumer's hop
  (DELIVERED_ROW) grouped by SUBSCRIPTION (topic, subscription; null subscription: the
  consumers whose SUBSCRIBE the capture missed); a row without one is a message never seen
  delivered (counted per topic). Counts are rows matching the SUBSCRIPTION_COUNTS
  predicates, each a Spark SQL (and SQLite) boolean expression over the journeys columns.
  A latency's COUNT is its non-null values; its percentiles and MAX ignore nulls (as SQL
  aggregates do) and are None when it has none.
- "Delivered twice" (`delivered_twice`): rows with redeliveries > 0: the message was
  delivered to that subscription more than once, seen twice in the capture or said so by
  the broker's redelivery_count (a capture that began late may miss the first delivery).
- Percentiles are exact, with linear interpolation between the closest ranks: for the n
  values sorted, x[0] <= ... <= x[n-1], the percentile p (0 to 1) is x[i] + f * (x[i+1] - x[i])
  where i + f = (n - 1) * p (i whole, 0 <= f < 1). This is numpy's default method ("linear"),
  pandas' `quantile` and Spark SQL's exact `percentile`, so the local commands (numpy, here)
  and the fleet job (Spark, dissector.frontends.fleet.job, with these constants and column names)
  give the same numbers; tests/frontends/test_spark_lake.py compares them.
- Milliseconds are microseconds / 1000 rounded to 3 decimals (whole microseconds: nothing is
  lost), after the percentile is taken in microseconds.
- Memory: one 8-byte integer per latency kept (exact percentiles need every value), and a
  few counters per command, subscription and topic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

from dissector.events import Outcome

#: The percentiles shown, as fractions: p50, p90, p99 and the tail, p99.9 and p99.99 (as
#: pulsar-perf reports them).
PERCENTILES = (0.5, 0.9, 0.99, 0.999, 0.9999)
#: Outcomes that have a latency: a request and its response were both seen.
ANSWERED = (Outcome.SUCCESS.value, Outcome.ERROR.value)
#: Names of the statistics of one group's latencies, as `describe` and the fleet job give them.
COUNT = "count"
MAX = "max_ms"

#: Journeys columns (µs) whose statistics are given per subscription.
JOURNEY_LATENCIES = ("dispatch_us", "end_to_end_us")
#: The journeys columns that name a subscription (rows grouped by them).
SUBSCRIPTION = ("topic", "subscription")
#: A journeys row of a subscription (a delivery or an ack of the message was seen); the
#: others are messages produced and never seen delivered.
DELIVERED_ROW = "consumer_conn_id IS NOT NULL"
#: Counts per subscription: name -> the rows it counts (SQL over the journeys columns).
SUBSCRIPTION_COUNTS = {
    "messages": "TRUE",  # every message delivered (or acknowledged) in the subscription
    "delivered": "deliveries > 0",  # a MESSAGE delivering it was seen
    "delivered_twice": "redeliveries > 0",  # delivered more than once (see the rules)
    "not_acked": "acked_ts IS NULL",  # no ACK of it seen in the subscription
}
#: Name of the count of messages never seen delivered, per topic (rows not DELIVERED_ROW).
NEVER_DELIVERED = "never_delivered"

K = TypeVar("K", bound=Hashable)


def percentile_name(p: float) -> str:
    """The name of percentile `p` (a fraction), a Spark/SQL column name and JSON key:
    0.5 -> p50_ms, 0.999 -> p99_9_ms, 0.9999 -> p99_99_ms (the digits of p * 100, never
    rounded to a whole number; the decimal point an underscore)."""
    return "p" + f"{round(p * 100, 6):g}".replace(".", "_") + "_ms"


def stat_label(name: str) -> str:
    """A statistic's name as text shows it, without its unit: p99_9_ms -> p99.9, max_ms ->
    max."""
    return name.removesuffix("_ms").replace("_", ".")


#: Statistics in milliseconds (every name but COUNT), in the order they are shown.
MS_NAMES = (*(percentile_name(p) for p in PERCENTILES), MAX)


def latency_name(column: str) -> str:
    """A journey latency's name in the statistics: dispatch_us -> dispatch."""
    return column.removesuffix("_us")


def latency_ms(us: float) -> float:
    """A latency in microseconds as the summaries show it: milliseconds, 3 decimals."""
    return round(float(us) / 1000, 3)


def describe(us: np.ndarray) -> dict[str, float | int | None]:
    """COUNT, the PERCENTILES and MAX of one group's latencies (µs); None but COUNT (0)
    when there is none, as SQL aggregates of no value."""
    values = us.astype("float64")
    stats: dict[str, float | int | None] = {COUNT: len(values)}
    for p in PERCENTILES:
        name = percentile_name(p)
        stats[name] = (
            latency_ms(float(np.quantile(values, p, method="linear"))) if len(values) else None
        )
    stats[MAX] = latency_ms(float(values.max())) if len(values) else None
    return stats


class Samples(Generic[K]):
    """Latencies (µs, int64) per key, in the order keys were first seen."""

    def __init__(self) -> None:
        self._parts: dict[K, list[np.ndarray]] = {}

    def __bool__(self) -> bool:
        return bool(self._parts)

    def extend(self, key: K, us: np.ndarray) -> None:
        """Keep `us` (int64) under `key` (a key is kept even with no value)."""
        self._parts.setdefault(key, []).append(us)

    def values(self) -> dict[K, np.ndarray]:
        """key -> every latency kept (µs, int64), keys in the order first kept."""
        return {
            key: np.concatenate(parts) if parts else np.empty(0, np.int64)
            for key, parts in self._parts.items()
        }

    def stats(self) -> dict[K, dict[str, float | int | None]]:
        """key -> `describe` of its latencies, keys in the order first kept."""
        return {key: describe(us) for key, us in self.values().items()}


class Latencies(Samples[str]):
    """The latencies of answered requests, per request command, from timeline batches."""

    def add(
        self, batch: pa.RecordBatch, outcome: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Keep the latencies of a timeline batch's answered rows (outcome: the batch's
        outcome column as an object array, when the caller has it already); returns which
        rows are answered and their latencies (µs, int64)."""
        if outcome is None:
            outcome = np.asarray(batch.column("outcome").to_pylist(), dtype=object)
        answered = np.zeros(len(outcome), dtype=bool)
        for value in ANSWERED:
            answered |= outcome == value
        if not answered.any():
            return answered, np.empty(0, np.int64)
        column = batch.column("latency_us").to_numpy(zero_copy_only=False)
        latency = column[answered].astype(np.int64)
        request = np.asarray(batch.column("request_command").to_pylist(), dtype=object)
        commands = request[answered]
        # new commands are keyed by name: never in a set's order, which changes with the
        # hash seed from one run to the next (the report's ties, the summary's JSON)
        for command in sorted(set(commands.tolist()), key=str):
            self.extend(str(command), latency[commands == command])
        return answered, latency


#: A subscription: (topic, subscription name), either None when the capture did not say.
Subscription = tuple[str | None, str | None]


def _counted(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    """SUBSCRIPTION_COUNTS' predicates on a journeys batch, each a bool per row (the SQL
    there, in numpy; tests/tables/test_stats.py runs both on the same rows)."""
    deliveries = batch.column("deliveries").to_numpy(zero_copy_only=False)
    redeliveries = batch.column("redeliveries").to_numpy(zero_copy_only=False)
    return {
        "messages": np.ones(batch.num_rows, dtype=bool),
        "delivered": deliveries > 0,
        "delivered_twice": redeliveries > 0,
        "not_acked": _null(batch.column("acked_ts")),
    }


def _null(column: pa.Array) -> np.ndarray:
    return np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _codes(column: pa.Array) -> tuple[np.ndarray, list[Any]]:
    """Each row's value as an index into the values returned (None among them)."""
    # Array methods, not pyarrow.compute: importing it costs a text read ~30 ms
    # (tests/test_startup.py), and `summary` is imported by every command's parser
    encoded = column.dictionary_encode(null_encoding="encode")
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()


def journey_latencies(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    """Each JOURNEY_LATENCIES column's values (µs, int64) of a journeys batch, every
    subscription together: those `Subscriptions` keeps (DELIVERED_ROW rows, nulls
    dropped), in row order."""
    delivered = ~_null(batch.column("consumer_conn_id"))
    out = {}
    for column in JOURNEY_LATENCIES:
        values = batch.column(column)
        keep = delivered & ~_null(values)
        out[column] = values.fill_null(0).to_numpy(zero_copy_only=False)[keep].astype(np.int64)
    return out


class Subscriptions:
    """Per subscription, from journeys batches: counts and latencies (module rules)."""

    def __init__(self) -> None:
        self.counts: dict[Subscription, dict[str, int]] = {}
        self.latencies = {column: Samples[Subscription]() for column in JOURNEY_LATENCIES}
        self.never_delivered: Counter[str | None] = Counter()  # per topic

    def __bool__(self) -> bool:
        return bool(self.counts or self.never_delivered)

    def add(self, batch: pa.RecordBatch) -> None:
        """Count a journeys batch's rows and keep their latencies."""
        if batch.num_rows == 0:
            return
        delivered = ~_null(batch.column("consumer_conn_id"))
        topic, topics = _codes(batch.column("topic"))
        sub, subs = _codes(batch.column("subscription"))
        for t, n in zip(*np.unique(topic[~delivered], return_counts=True), strict=True):
            self.never_delivered[topics[t]] += int(n)
        if not delivered.any():
            return
        # one number per (topic, subscription); rows grouped by sorting: no work per
        # subscription and row (a batch may hold many subscriptions)
        pairs = (topic.astype(np.int64) * len(subs) + sub)[delivered]
        groups, inverse = np.unique(pairs, return_inverse=True)  # in order: no set's order
        counted = {
            count: np.bincount(inverse, weights=matched[delivered], minlength=len(groups))
            for count, matched in _counted(batch).items()
        }
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(1, len(groups)))
        latency = {}
        for column in JOURNEY_LATENCIES:
            values = batch.column(column)
            valid = ~_null(values)[delivered][order]
            us = values.fill_null(0).to_numpy(zero_copy_only=False)[delivered][order]
            latency[column] = zip(
                np.split(us.astype(np.int64), bounds), np.split(valid, bounds), strict=True
            )
        for g, pair in enumerate(groups.tolist()):
            name = (topics[pair // len(subs)], subs[pair % len(subs)])
            counts = self.counts.setdefault(name, dict.fromkeys(SUBSCRIPTION_COUNTS, 0))
            for count, sums in counted.items():
                counts[count] += int(sums[g])
            for column, parts in latency.items():
                us_part, valid_part = next(parts)
                self.latencies[column].extend(name, us_part[valid_part])

    def result(self) -> dict[str, list[dict[str, Any]]]:
        """JSON-ready: `subscriptions`, each its SUBSCRIPTION columns, counts and latency
        statistics (by `latency_name`), and `never_delivered` per topic; sorted by name,
        unknown names last."""
        stats = {column: samples.stats() for column, samples in self.latencies.items()}
        subscriptions = [
            {"topic": name[0], "subscription": name[1], **counts}
            | {latency_name(column): stats[column][name] for column in JOURNEY_LATENCIES}
            for name, counts in sorted(self.counts.items(), key=lambda item: _order(item[0]))
        ]
        never = [
            {"topic": topic, NEVER_DELIVERED: n}
            for topic, n in sorted(self.never_delivered.items(), key=lambda i: _order((i[0],)))
        ]
        return {"subscriptions": subscriptions, NEVER_DELIVERED: never}


def _order(name: tuple[str | None, ...]) -> tuple[tuple[bool, str], ...]:
    """Names sorted, None after every name."""
    return tuple((part is None, part or "") for part in name)
