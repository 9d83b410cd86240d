"""The per-subscription definitions of dissector.tables.stats, run by Spark SQL: the fleet
job can compute what `summary` shows from the constants alone.

The journeys table of the crafted scene of tests/test_journeys_summary.py (whose expected
numbers are computed by hand there) is written to Parquet, read by Spark, and aggregated
with nothing but the constants (`SUBSCRIPTION`, `DELIVERED_ROW`, `SUBSCRIPTION_COUNTS`,
`JOURNEY_LATENCIES`, `PERCENTILES`) and Spark's own `count_if` and exact `percentile`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dissector.frontends import fleet
from dissector.frontends import spark as ds
from dissector.read import ReaderOptions, read_capture
from dissector.tables.stats import (
    COUNT,
    DELIVERED_ROW,
    JOURNEY_LATENCIES,
    MAX,
    NEVER_DELIVERED,
    PERCENTILES,
    SUBSCRIPTION,
    SUBSCRIPTION_COUNTS,
    Subscriptions,
    latency_ms,
    latency_name,
    percentile_name,
)
from tests.support.lake import lake_table
from tests.test_journeys_summary import EXPECTED, capture

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"


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


def test_spark_sql_gives_the_summarys_numbers(spark: SparkSession, tmp_path: Path) -> None:
    table = read_capture(capture(tmp_path / "c.pcap"), tables=["journeys"]).arrow["journeys"]
    pq.write_table(table, tmp_path / "journeys.parquet")
    assert per_subscription(spark.read.parquet(str(tmp_path / "journeys.parquet"))) == EXPECTED


def test_the_fleets_journeys_give_the_aggregators_numbers(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The fleet job's journeys table of every bundled sample: the Spark query above gives
    what stats.Subscriptions (summary, report) gives from the same rows."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    for sample in ds.expand(str(PCAPS)):
        shutil.copy(sample, inputs)
    out = tmp_path / "out"
    fleet.run(spark, [str(inputs)], str(out), ReaderOptions())
    local = Subscriptions()
    for batch in lake_table(out, "journeys").to_batches():
        local.add(batch)
    want = local.result()
    assert len(want["subscriptions"]) >= 8  # the samples: every message delivered
    assert per_subscription(fleet.load(spark, str(out))["journeys"]) == want
