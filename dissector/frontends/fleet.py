"""EDGE: the fleet job: many captures -> Parquet tables -> a fleet summary, on Spark.

Input: capture paths (files, globs, directories), an output folder, a Spark master.
Output: OUT/<table>/part-NNNNN.parquet for every table (one dissection pass; each task
handles a bundle of capture series and writes one file per table), then OUT/summary.json and
OUT/summary.txt computed with Spark SQL over those files.
Rules: executors read the captures and write the Parquet files themselves (paths must be
shared with them on a cluster); files are one per task per table, so their number follows the
parallelism, not the number of captures; the summary is computed from the written tables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dissector.capture import series as series_mod
from dissector.frontends.spark import expand
from dissector.reader import ReaderOptions, iter_series
from dissector.tables.builders import TableBuilder
from dissector.tables.schema import TABLES

#: Rows per Parquet row group: large enough for scans, small enough to bound task memory.
ROW_GROUP = 256 * 1024


def _dissect_bundle(
    task: int, items: Iterable[tuple[int, list[str]]], out: str, options: ReaderOptions
) -> Iterator[tuple[str, int]]:
    """Executor side: dissect a bundle of series, one Parquet file per table; yield counts."""
    writers: dict[str, pq.ParquetWriter] = {}
    counts = dict.fromkeys(TABLES, 0)
    try:
        for index, files in items:
            builder = TableBuilder(capture=files[0])
            for ev in iter_series(files, options, index):
                builder.add(ev)
                for name, made in builder.batches.items():
                    if made.batches:
                        counts[name] += _write(writers, out, task, name, builder)
            for name in TABLES:
                counts[name] += _write(writers, out, task, name, builder)
    finally:
        for writer in writers.values():
            writer.close()
    yield from counts.items()


def _write(
    writers: dict[str, pq.ParquetWriter], out: str, task: int, name: str, builder: TableBuilder
) -> int:
    batches: list[pa.RecordBatch] = builder.batches[name].take()
    rows: int = sum(b.num_rows for b in batches)
    if not rows:
        return 0
    schema = TABLES[name].schema
    writer = writers.get(name)
    if writer is None:
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        writer = writers[name] = pq.ParquetWriter(
            os.path.join(folder, f"part-{task:05d}.parquet"), schema
        )
    writer.write_table(pa.Table.from_batches(batches, schema), row_group_size=ROW_GROUP)
    return rows


def dissect(
    spark: SparkSession, paths: list[str], out: str, options: ReaderOptions
) -> dict[str, int]:
    """One pass over every capture series; returns the rows written per table."""
    groups = series_mod.group(expand(paths, options.s3_endpoint), options.series)
    os.makedirs(out, exist_ok=True)
    tasks = max(1, min(len(groups), spark.sparkContext.defaultParallelism * 2))
    rdd = spark.sparkContext.parallelize(list(enumerate(groups)), tasks)
    counts = rdd.mapPartitionsWithIndex(
        lambda task, items: _dissect_bundle(task, items, out, options)
    ).reduceByKey(lambda a, b: a + b)
    written = dict.fromkeys(TABLES, 0)
    written.update(dict(counts.collect()))
    # empty tables still get a (schema-only) file, so reads never fail
    for name, table in TABLES.items():
        folder = Path(out, name)
        if not folder.exists():
            folder.mkdir(parents=True)
            pq.write_table(table.schema.empty_table(), folder / "part-empty.parquet")
    return written


def load(spark: SparkSession, out: str) -> dict[str, DataFrame]:
    return {name: spark.read.parquet(os.path.join(out, name)) for name in TABLES}


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.asDict().items()}
        for r in df.collect()
    ]


def summarize(t: dict[str, DataFrame], top: int = 10) -> dict[str, Any]:
    """The fleet summary, computed with Spark over the tables."""
    conv = t["conversations"].select(
        "conn_id",
        F.concat_ws(":", "broker_ip", F.col("broker_port").cast("string")).alias("broker"),
    )
    msgs = t["messages"].join(conv, "conn_id", "left")
    per_broker = msgs.groupBy("broker", "kind").agg(
        F.count("*").alias("messages"), F.sum("payload_size").alias("bytes")
    )
    per_topic = msgs.groupBy("topic", "kind").agg(
        F.count("*").alias("messages"), F.sum("payload_size").alias("bytes")
    )
    answered = t["timeline"].where(F.col("outcome").isin("success", "error"))
    latency = answered.groupBy("request_command").agg(
        F.count("*").alias("count"),
        (F.percentile_approx("latency_us", 0.5) / 1000).alias("p50_ms"),
        (F.percentile_approx("latency_us", 0.9) / 1000).alias("p90_ms"),
        (F.percentile_approx("latency_us", 0.99) / 1000).alias("p99_ms"),
        (F.max("latency_us") / 1000).alias("max_ms"),
    )
    errors = t["timeline"].where(F.col("outcome") == "error").groupBy("error_code").count()
    frames = t["frames"].join(conv, "conn_id", "left")
    checksum = frames.where(F.col("checksum") == "invalid").groupBy("broker").count()
    anomalies = t["anomalies"].groupBy("code", "severity").count()
    producers = (
        msgs.where(F.col("kind") == "produced")
        .groupBy("broker", "topic", "producer_name")
        .agg(F.count("*").alias("messages"), F.sum("payload_size").alias("bytes"))
        .orderBy(F.desc("messages"))
        .limit(top)
    )
    consumers = (
        msgs.where(F.col("kind") == "delivered")
        .groupBy("broker", "topic", "conn_id", "consumer_id")
        .agg(F.count("*").alias("messages"), F.sum("payload_size").alias("bytes"))
        .orderBy(F.desc("messages"))
        .limit(top)
    )
    return {
        "tables": {name: df.count() for name, df in t.items()},
        "per_broker": _rows(per_broker.orderBy("broker", "kind")),
        "per_topic": _rows(per_topic.orderBy("topic", "kind")),
        "latency": _rows(latency.orderBy("request_command")),
        "errors": _rows(errors.orderBy(F.desc("count"))),
        "checksum_failures": _rows(checksum.orderBy("broker")),
        "anomalies": _rows(anomalies.orderBy(F.desc("count"))),
        "busiest_producers": _rows(producers),
        "busiest_consumers": _rows(consumers),
    }


def render(summary: dict[str, Any]) -> str:
    lines = ["Fleet summary", ""]
    lines.append("rows: " + ", ".join(f"{k}={v}" for k, v in summary["tables"].items()))
    for section in (
        "per_broker",
        "per_topic",
        "latency",
        "errors",
        "checksum_failures",
        "anomalies",
        "busiest_producers",
        "busiest_consumers",
    ):
        rows = summary[section]
        lines.append("")
        lines.append(section.replace("_", " ").capitalize() + ("" if rows else ": none"))
        for row in rows:
            lines.append("  " + "  ".join(f"{k}={_fmt(v)}" for k, v in row.items()))
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def run(spark: SparkSession, paths: list[str], out: str, options: ReaderOptions) -> dict[str, Any]:
    """The whole job: dissect, then summarize; the summary is also saved under `out`."""
    dissect(spark, paths, out, options)
    summary = summarize(load(spark, out))
    Path(out, "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    Path(out, "summary.txt").write_text(render(summary))
    return summary
