"""EDGE: the fleet summary's per-subscription section: journeys -> what `summary` shows per
subscription, computed by Spark SQL.

Input: the fleet's journeys table as a Spark DataFrame.
Output: {"subscriptions": [...], "never_delivered": [...]}, the shape and numbers of
dissector.tables.stats.Subscriptions.result() (what `summary` and the report show).
Rule: nothing but stats' constants (SUBSCRIPTION, DELIVERED_ROW, SUBSCRIPTION_COUNTS,
JOURNEY_LATENCIES, PERCENTILES) and Spark's own `count_if` and exact `percentile` (linear
interpolation, as stats.describe): one definition, two engines.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dissector.tables.stats import (
    COUNT,
    DELIVERED_ROW,
    JOURNEY_LATENCIES,
    MAX,
    NEVER_DELIVERED,
    PERCENTILES,
    SUBSCRIPTION,
    SUBSCRIPTION_COUNTS,
    latency_ms,
    latency_name,
    percentile_name,
)


def _stats(row: dict[str, Any], column: str) -> dict[str, Any]:
    key = latency_name(column)
    ms = [percentile_name(p) for p in PERCENTILES] + [MAX]
    value = {name: row[f"{key}_{name}"] for name in ms}
    return {COUNT: row[f"{key}_{COUNT}"]} | {
        name: None if v is None else latency_ms(v) for name, v in value.items()
    }


def per_subscription(journeys: DataFrame) -> dict[str, Any]:
    """What `summary` shows per subscription, in Spark SQL from stats' constants alone."""
    per_sub = (
        journeys.where(DELIVERED_ROW)
        .groupBy(*SUBSCRIPTION)
        .agg(
            *(F.expr(f"count_if({sql})").alias(name) for name, sql in SUBSCRIPTION_COUNTS.items()),
            *(F.count(c).alias(f"{latency_name(c)}_{COUNT}") for c in JOURNEY_LATENCIES),
            *(
                F.percentile(c, p).alias(f"{latency_name(c)}_{percentile_name(p)}")
                for c in JOURNEY_LATENCIES
                for p in PERCENTILES
            ),
            *(F.max(c).alias(f"{latency_name(c)}_{MAX}") for c in JOURNEY_LATENCIES),
        )
        .orderBy(F.col("topic").asc_nulls_last(), F.col("subscription").asc_nulls_last())
    )
    never = (
        journeys.where(f"NOT ({DELIVERED_ROW})")
        .groupBy("topic")
        .count()
        .orderBy(F.col("topic").asc_nulls_last())
    )
    return {
        "subscriptions": [
            {name: r[name] for name in (*SUBSCRIPTION, *SUBSCRIPTION_COUNTS)}
            | {latency_name(c): _stats(r, c) for c in JOURNEY_LATENCIES}
            for r in (row.asDict() for row in per_sub.collect())
        ],
        NEVER_DELIVERED: [
            {"topic": r["topic"], NEVER_DELIVERED: r["count"]} for r in never.collect()
        ],
    }
