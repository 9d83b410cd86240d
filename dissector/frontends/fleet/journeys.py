"""EDGE: the fleet's journeys in Spark: the stages around dissector.frontends.fleet.journey_events.

Input: a Spark session, the capture series of a read (expanded, grouped), what each task
runs over its bundle of series (`staged`), the recorded rows.
Output: `staged` -> a DataFrame of journey_events.STAGE rows (the first stage);
`ordered_events` -> its events keyed by merge group and topic, each key's events in one
Spark partition, sorted into a local read's order (what journey_events.joined takes);
`journeys_frame` -> the journeys table as a DataFrame (the data source's journeys).
Rules: the grouping and order are journey_events' (`groups`, `ORDER`); Spark only moves and
sorts the rows (spilling to disk when large); the join is the one Joiner's, in
journey_events.joined. Used by the fleet job (dissector.frontends.fleet.job), which writes the
table, and by `dissector.spark.read(table="journeys")`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from dissector.frontends.fleet import journey_events as je
from dissector.read.options import ReaderOptions
from dissector.tables.schema import TABLES

#: The first stage's rows, as Spark types them.
STAGE = from_arrow_schema(je.STAGE)
#: What a first-stage task runs: (task number, [(series index, files)]) -> STAGE batches.
TaskRun = Callable[[int, list[tuple[int, list[str]]]], Iterator[pa.RecordBatch]]


def staged(spark: SparkSession, groups: list[list[str]], run: TaskRun) -> DataFrame:
    """The first stage: `run(task, items)` over the series, a task per bundle of them."""
    tasks = max(1, min(len(groups), spark.sparkContext.defaultParallelism * 2))
    rdd = spark.sparkContext.parallelize(list(enumerate(groups)), tasks)
    series = spark.createDataFrame(rdd, "series long, files array<string>")

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        items = [
            (int(i), list(f))
            for b in batches
            for i, f in zip(
                b.column("series").to_pylist(), b.column("files").to_pylist(), strict=True
            )
        ]
        yield from run(task_number(), items)

    return series.mapInArrow(stage, STAGE)


def task_number() -> int:
    """The running Spark task's partition: its output files are named by it."""
    context = TaskContext.get()
    assert context is not None, "not in a Spark task"
    return context.partitionId()


def spans(meta: Iterable[Any]) -> list[tuple[int, int | None, int | None, bool]]:
    """Each series' span, from the first stage's `span` rows (Spark Rows)."""
    return [
        (r["series"], r["ts"], r["seq"], bool(r["unknown"])) for r in meta if r["kind"] == "span"
    ]


def ordered_events(
    spark: SparkSession, stage: DataFrame, found: list[tuple[int, int | None, int | None, bool]]
) -> DataFrame:
    """The recorded events of `stage` keyed by merge group and topic (journey_events.
    groups of the series' spans `found`) and sorted within Spark partitions by
    journey_events.ORDER, each key's events in one partition: what `joined` takes."""
    assigned = je.groups(found)
    keys = spark.createDataFrame(
        [(s, g, one) for s, (g, one) in assigned.items()] or [(-1, -1, False)],
        "series long, grp long, one boolean",
    )
    events = stage.where(F.col("kind") == "event").join(F.broadcast(keys), "series")
    events = events.withColumn(
        "jkey", F.when(F.col("one"), F.lit("")).otherwise(F.coalesce("topic", F.lit("")))
    )
    parts = max(1, spark.sparkContext.defaultParallelism * 2)
    return (
        events.repartition(parts, "grp", "jkey")
        .sortWithinPartitions(*je.ORDER)
        .select("grp", "jkey", "event")
    )


def _record_bundle(
    items: Iterable[tuple[int, list[str]]], options: ReaderOptions
) -> Iterator[pa.RecordBatch]:
    """A task of the data source's journeys: the joiner's input recorded, no table written."""
    for index, files in items:
        yield from je.record(files, options, index)


def journeys_frame(
    spark: SparkSession, groups: list[list[str]], options: ReaderOptions
) -> DataFrame:
    """The journeys table of these capture series as a DataFrame, joined as the fleet job
    joins it. The series' spans are read first (a Spark job recording every series); the
    DataFrame records them again when it is computed (nothing is kept between the two)."""
    first = staged(spark, groups, lambda task, items: _record_bundle(items, options))
    meta = first.where(F.col("kind") == "span").collect()
    events = ordered_events(spark, first, spans(meta))
    return events.mapInArrow(je.joined, from_arrow_schema(TABLES["journeys"].schema))
