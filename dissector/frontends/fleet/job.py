"""EDGE: the fleet job: many captures -> Hive-partitioned Parquet tables -> a fleet summary.

Input: capture paths (files, globs, directories), an output location (a local path or a URI
pyarrow writes: s3://, gs://, hdfs://, file://), a Spark session.
Output: OUT/<table>/capture_date=YYYY-MM-DD/broker=IP_PORT/part-*.parquet for every table
(layout and partition values: dissector.frontends.partitioned), then OUT/summary.json and
OUT/summary.txt computed with Spark SQL over those tables.
Rules: executors read the captures and write the Parquet files themselves, streaming (a
task holds one record batch per table and at most MAX_OPEN_FILES open files, never a
series' table); the tables of an earlier run in OUT are replaced; the summary is computed
from the written tables (per subscription from the journeys table, as `summary` shows it:
dissector.frontends.fleet.subscriptions); its latency statistics are those of
dissector.tables.stats (the same percentiles, names, answered outcomes and milliseconds),
computed by Spark: Spark SQL's
`percentile` is exact with the linear interpolation `stats` states (numpy's default), so the
fleet job and `pulsar-dissect summary` give the same numbers. The journeys table is not made
by the tasks (a message's journey spans captures, and a task would hold every message of its
series until the series ends): each task records the joiner's input instead
(dissector.frontends.fleet.journey_events), kept by Spark (cached, shuffled), never in OUT; Spark
then puts each topic's events of each merge group of series in the order of a local read
of the captures together, and a second stage runs the one Joiner over each, writing the
journeys table as the tasks write the others.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from dissector.capture import series as series_mod
from dissector.capture.locations import filesystem_for, is_local, local_path
from dissector.events import Checksum, Conversation, ConversationOpened, MessageKind, Outcome
from dissector.frontends.fleet import journey_events as je
from dissector.frontends.fleet import journeys as fj
from dissector.frontends.fleet.subscriptions import per_subscription
from dissector.frontends.partitioned import PartitionedWriter, write_empty
from dissector.frontends.spark import executor_errors, expand
from dissector.frontends.terminal import printable
from dissector.read.options import ReaderOptions
from dissector.read.plan import plan_read
from dissector.read.runs import iter_series
from dissector.read.tables import make_builder
from dissector.tables.schema import TABLES
from dissector.tables.stats import (
    ANSWERED,
    COUNT,
    MAX,
    MS_NAMES,
    NEVER_DELIVERED,
    PERCENTILES,
    latency_ms,
    percentile_name,
)

#: Closed connections whose brokers are kept until their rows are written (then all pending
#: rows are flushed and they are forgotten): bounds the executor's map of brokers.
FORGET_AFTER = 4096


def _output_filesystem(
    location: str, s3_endpoint: str | None = None
) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of an output location: a local path (made absolute, as
    executors run elsewhere) or a URI, through the same filesystems inputs are read from
    (dissector.capture.locations: an S3 endpoint other than AWS included)."""
    if is_local(location):
        return pafs.LocalFileSystem(), posixpath.abspath(local_path(location))
    return filesystem_for(location, s3_endpoint)


#: Tables the tasks make: every table but those that would hold a series' messages.
TASK_TABLES = [name for name in TABLES if name != "journeys"]


def _dissect_bundle(
    task: int,
    items: Iterable[tuple[int, list[str]]],
    output: tuple[pafs.FileSystem, str],
    options: ReaderOptions,
) -> Iterator[pa.RecordBatch]:
    """Executor side: dissect a bundle of series into partitioned Parquet; yield the joiner's
    input recorded (journey_events.STAGE rows: events, each series' span), then the rows
    written per table.

    Batches go to the writer as the builder makes them (its sink): memory holds at most
    BATCH_ROWS rows per table, whatever the size of the series, and BATCH_EVENTS recorded
    events."""
    writer = PartitionedWriter(*output, task)
    # every table's stages; the journeys' events are recorded, joined by a second stage
    plan = plan_read(options)
    try:
        for index, files in items:
            builder = make_builder(plan, options, files[0], writer.write, TASK_TABLES)
            recorder = je.Recorder(index, files)
            closed: list[int] = []
            add = builder.feeder()
            for ev in iter_series(files, options, index, recorder.watch, plan):
                if isinstance(ev, ConversationOpened):
                    writer.connection(ev.conn_id, ev.key)
                elif isinstance(ev, Conversation):
                    writer.connection(ev.conn_id, ev.key)
                    closed.append(ev.conn_id)
                add(ev)
                recorder.feed(ev)
                yield from recorder.take()
                if len(closed) >= FORGET_AFTER:
                    builder.flush()
                    writer.forget(closed)
                    closed = []
            builder.finish()
            writer.forget(closed)
            yield from recorder.take(final=True)
    finally:
        writer.close()
    yield je.counts_batch(writer.counts.items())


def _join_partition(
    task: int, batches: Iterable[pa.RecordBatch], output: tuple[pafs.FileSystem, str]
) -> Iterator[pa.RecordBatch]:
    """Executor side of the second stage: recorded events in their order (journey_events.
    ORDER) joined into the journeys table, written as the tasks write the others; yields
    its row count."""
    writer = PartitionedWriter(*output, task)
    try:
        for batch in je.joined(batches, writer.connection):
            writer.write("journeys", batch)
    finally:
        writer.close()
    yield je.counts_batch([("journeys", writer.counts["journeys"])])


def dissect(
    spark: SparkSession, paths: list[str], out: str, options: ReaderOptions
) -> dict[str, int]:
    """One pass over every capture series, then the journeys joined; returns the rows
    written per table."""
    groups = series_mod.group(expand(paths, options.s3_endpoint), options.series)
    fs, base = output = _output_filesystem(out, options.s3_endpoint)
    fs.create_dir(base, recursive=True)
    for name in TABLES:  # the tables of an earlier run would mix with these
        if fs.get_file_info(posixpath.join(base, name)).type != pafs.FileType.NotFound:
            fs.delete_dir(posixpath.join(base, name))
    written = dict.fromkeys(TABLES, 0)
    with executor_errors():
        staged = fj.staged(
            spark, groups, lambda task, items: _dissect_bundle(task, items, output, options)
        ).persist(StorageLevel.MEMORY_AND_DISK)  # computed once: its tasks write the tables
        try:
            meta = staged.where(F.col("kind") != "event").collect()
            for row in meta:
                if row["kind"] == "rows":
                    written[row["topic"]] += row["ts"]
            events = fj.ordered_events(spark, staged, fj.spans(meta))
            joined = events.mapInArrow(
                lambda batches: _join_partition(fj.task_number(), batches, output),
                fj.STAGE,
            )
            for row in joined.collect():
                written[row["topic"]] += row["ts"]
        finally:
            staged.unpersist()
    for name in TABLES:  # empty tables still get a (schema-only) file, so reads never fail
        if not written[name]:
            write_empty(fs, base, name)
    return written


def load(spark: SparkSession, out: str) -> dict[str, DataFrame]:
    """The tables written to `out`, with their partition columns (capture_date, broker)."""
    return {name: spark.read.parquet(_table_location(out, name)) for name in TABLES}


def _table_location(out: str, name: str) -> str:
    return out.rstrip("/") + "/" + name


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.asDict().items()}
        for r in df.collect()
    ]


def summarize(
    t: dict[str, DataFrame], top: int = 10, rows: dict[str, int] | None = None
) -> dict[str, Any]:
    """The fleet summary, computed with Spark over the tables; rows: the tables' row counts
    when known (`dissect` returns them), which saves a Spark job per table."""
    msgs = t["messages"]
    per_broker = msgs.groupBy("broker", "kind").agg(
        F.count("*").alias("messages"), F.sum("payload_size").alias("bytes")
    )
    per_topic = msgs.groupBy("topic", "kind").agg(
        F.count("*").alias("messages"), F.sum("payload_size").alias("bytes")
    )
    answered = t["timeline"].where(F.col("outcome").isin(*ANSWERED))
    # dissector.tables.stats' statistics: exact percentiles (Spark's `percentile`: linear
    # interpolation between the closest ranks, as `stats.describe`), in microseconds, made
    # milliseconds by `_in_ms` as `describe` does
    latency = answered.groupBy("request_command").agg(
        F.count("*").alias(COUNT),
        *(F.percentile("latency_us", p).alias(percentile_name(p)) for p in PERCENTILES),
        F.max("latency_us").alias(MAX),
    )
    errors = (
        t["timeline"].where(F.col("outcome") == Outcome.ERROR.value).groupBy("error_code").count()
    )
    frames = t["frames"]
    checksum = frames.where(F.col("checksum") == Checksum.INVALID.value).groupBy("broker").count()
    anomalies = t["anomalies"].groupBy("code", "severity").count()
    producers = (
        msgs.where(F.col("kind") == MessageKind.PRODUCED.value)
        .groupBy("broker", "topic", "producer_name")
        .agg(F.count("*").alias("messages"), F.sum("payload_size").alias("bytes"))
        .orderBy(F.desc("messages"))
        .limit(top)
    )
    consumers = (
        msgs.where(F.col("kind") == MessageKind.DELIVERED.value)
        .groupBy("broker", "topic", "conn_id", "consumer_id")
        .agg(F.count("*").alias("messages"), F.sum("payload_size").alias("bytes"))
        .orderBy(F.desc("messages"))
        .limit(top)
    )
    return {
        "tables": rows or {name: df.count() for name, df in t.items()},
        "per_broker": _rows(per_broker.orderBy("broker", "kind")),
        "per_topic": _rows(per_topic.orderBy("topic", "kind")),
        "latency": [_in_ms(row) for row in _rows(latency.orderBy("request_command"))],
        "errors": _rows(errors.orderBy(F.desc("count"))),
        "checksum_failures": _rows(checksum.orderBy("broker")),
        "anomalies": _rows(anomalies.orderBy(F.desc("count"))),
        "busiest_producers": _rows(producers),
        "busiest_consumers": _rows(consumers),
        **per_subscription(t["journeys"]),
    }


def _in_ms(row: dict[str, Any]) -> dict[str, Any]:
    return {k: latency_ms(v) if k in MS_NAMES and v is not None else v for k, v in row.items()}


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
        "subscriptions",
        NEVER_DELIVERED,
    ):
        rows = summary[section]
        lines.append("")
        lines.append(section.replace("_", " ").capitalize() + ("" if rows else ": none"))
        for row in rows:
            lines.append("  " + "  ".join(f"{k}={_fmt(v)}" for k, v in _flat(row).items()))
    return "\n".join(printable(line) for line in lines) + "\n"


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its nested statistics (a subscription's latencies) as `name.stat` keys."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update({f"{k}.{stat}": value for stat, value in v.items()})
        else:
            out[k] = v
    return out


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def run(spark: SparkSession, paths: list[str], out: str, options: ReaderOptions) -> dict[str, Any]:
    """The whole job: dissect, then summarize; the summary is also saved under `out`."""
    written = dissect(spark, paths, out, options)
    with executor_errors():
        summary = summarize(load(spark, out), rows=written)
    fs, base = _output_filesystem(out, options.s3_endpoint)
    for name, text in (
        ("summary.json", json.dumps(summary, indent=1, default=str) + "\n"),
        ("summary.txt", render(summary)),
    ):
        with fs.open_output_stream(posixpath.join(base, name)) as stream:
            stream.write(text.encode())
    return summary
