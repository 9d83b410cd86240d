"""The predicate model's Spark target: the read filters, pushed to the `pulsar` data source,
keep the rows the CLI's Arrow filter and DuckDB keep.

Expected rows: the frames `read_tables` makes (pure Python, numbered as Spark numbers them),
kept by a hand-written condition on each row; every target must keep exactly those.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dissector.frontends import spark as ds
from dissector.read import ReaderOptions, read_tables
from dissector.tables.filters import Filter
from dissector.tables.predicates import Term, restrict, terms, to_sql
from dissector.tables.schema import TABLES
from tests.support.samples import PCAPS

KEY = ("conn_id", "first_packet", "command")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _keys(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[k] for k in KEY) for r in rows)


@pytest.mark.spark
def test_the_predicate_model_pushed_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    for name in ("multi_producer.pcap", "produce_consume.pcap"):
        shutil.copy(PCAPS / name, tmp_path / name)
    frames = read_tables(ds.expand(str(tmp_path)), ReaderOptions(per_series_ids=True))["frames"]
    stamps = frames["ts"].cast(pa.int64()).to_pylist()
    since = sorted(stamps)[len(stamps) // 3]
    conns = sorted(set(frames["conn_id"].to_pylist()))
    rows = Filter(commands=frozenset({"SEND", "MESSAGE", "ACK"}), conns=frozenset(conns),
                  since=since)  # fmt: skip
    by_hand = _keys(
        [
            r
            for r, t in zip(frames.to_pylist(), stamps, strict=True)
            if r["command"] in ("SEND", "MESSAGE", "ACK") and t >= since
        ]
    )
    assert 0 < len(by_hand) < frames.num_rows

    # (a) Arrow: the CLI's read filter
    assert _keys(rows.table(frames).to_pylist()) == by_hand
    # (c) DuckDB: the compiled SQL over the same table
    where = to_sql(rows.predicate, frames.schema)
    con = duckdb.connect()
    con.register("frames", frames)
    got = con.execute(f"SELECT {', '.join(KEY)} FROM frames WHERE {where}").fetchall()
    assert sorted(got) == by_hand
    # (b) Spark: the data source's filters, every one pushed (none left to Spark) ...
    pred = restrict(rows.predicate, TABLES["frames"].schema.names)
    assert pred is not None
    reader = ds.PushdownReader({"table": "frames", "path": str(tmp_path)})
    assert list(reader.pushFilters(ds.filters_of(pred))) == []
    assert reader.filters == list(terms(pred))
    read = [
        row
        for part in reader.partitions()
        for batch in reader.read(part)
        for row in batch.to_pylist()
    ]
    assert _keys(read) == by_hand
    # ... and the same conditions in a Spark query, which Spark pushes to the source
    df = ds.read(spark, str(tmp_path), table="frames").where(
        F.col("command").isin("SEND", "MESSAGE", "ACK")
        & F.col("conn_id").isin(*conns)
        & (F.col("ts") >= EPOCH + dt.timedelta(microseconds=since))
    )
    assert _keys([r.asDict() for r in df.select(*KEY).collect()]) == by_hand


def test_spark_filters_and_terms_convert_both_ways() -> None:
    schema = TABLES["frames"].schema
    moment = EPOCH + dt.timedelta(microseconds=1_700_000_000_000_001)
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, IsNotNull

    assert ds.term_of(GreaterThanOrEqual(("ts",), moment), schema) == Term(
        "ts", "ge", 1_700_000_000_000_001
    )
    assert ds.term_of(In(("topic",), ("a", "b")), schema) == Term("topic", "in", ("a", "b"))
    assert ds.term_of(EqualTo(("payload_size",), 3), schema) is None  # not pushable
    assert ds.term_of(IsNotNull(("ts",)), schema) is None
    assert ds.term_of(EqualTo(("code",), "x"), schema) is None  # frames have no code
    term = Term("conn_id", "in", (1, 2))
    assert ds.filters_of(term) == [In(("conn_id",), (1, 2))]
    assert ds.term_of(ds.filters_of(term)[0], schema) == term
    with pytest.raises(ValueError, match="conjunction"):
        ds.filters_of(Filter(commands=frozenset({"SEND"})).predicate.parts[0])
