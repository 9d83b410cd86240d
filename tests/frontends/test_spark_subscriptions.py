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

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from dissector.frontends import spark as ds
from dissector.frontends.fleet import job as fleet
from dissector.frontends.fleet.subscriptions import per_subscription
from dissector.read import ReaderOptions, read_capture
from dissector.tables.stats import (
    Subscriptions,
)
from tests.support.lake import lake_table
from tests.test_journeys_summary import EXPECTED, capture

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"


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
    summary = fleet.run(spark, [str(inputs)], str(out), ReaderOptions())
    local = Subscriptions()
    for batch in lake_table(out, "journeys").to_batches():
        local.add(batch)
    want = local.result()
    assert len(want["subscriptions"]) >= 8  # the samples: every message delivered
    assert per_subscription(fleet.load(spark, str(out))["journeys"]) == want
    # the fleet summary's own sections, and its text, say the same
    assert {k: summary[k] for k in want} == want
    text = (out / "summary.txt").read_text()
    for row in want["subscriptions"]:
        assert f"subscription={row['subscription']}" in text
