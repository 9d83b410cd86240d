"""The per-subscription definitions of dissector.tables.stats, run by Spark SQL: the fleet
job can compute what `summary` shows from the constants alone.

The journeys table of the crafted scene of tests/test_journeys_summary.py (whose expected
numbers are computed by hand there) is written to Parquet, read by Spark, and aggregated
with nothing but the constants (`SUBSCRIPTION`, `DELIVERED_ROW`, `SUBSCRIPTION_COUNTS`,
`JOURNEY_LATENCIES`, `PERCENTILES`) and Spark's own `count_if` and exact `percentile`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dissector.read import read_capture
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
from tests.test_journeys_summary import EXPECTED, capture


def _stats(row: dict[str, Any], column: str) -> dict[str, Any]:
    key = latency_name(column)
    ms = [percentile_name(p) for p in PERCENTILES] + [MAX]
    value = {name: row[f"{key}_{name}"] for name in ms}
    return {COUNT: row[f"{key}_{COUNT}"]} | {
        name: None if v is None else latency_ms(v) for name, v in value.items()
    }


def test_spark_sql_gives_the_summarys_numbers(spark: SparkSession, tmp_path: Path) -> None:
    table = read_capture(capture(tmp_path / "c.pcap"), tables=["journeys"]).arrow["journeys"]
    pq.write_table(table, tmp_path / "journeys.parquet")
    journeys = spark.read.parquet(str(tmp_path / "journeys.parquet"))
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
        .orderBy(*SUBSCRIPTION)
    )
    rows = [r.asDict() for r in per_sub.collect()]
    got = [
        {name: r[name] for name in (*SUBSCRIPTION, *SUBSCRIPTION_COUNTS)}
        | {latency_name(c): _stats(r, c) for c in JOURNEY_LATENCIES}
        for r in rows
    ]
    never = journeys.where(f"NOT ({DELIVERED_ROW})").groupBy("topic").count().collect()
    assert got == EXPECTED["subscriptions"]
    assert [{"topic": r["topic"], NEVER_DELIVERED: r["count"]} for r in never] == EXPECTED[
        NEVER_DELIVERED
    ]
