"""The Spark data source and the fleet job, in a local Spark session, against pandas results."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from dissector.frontends import spark as ds
from dissector.frontends.fleet import job as fleet
from dissector.read import ReaderOptions, read_tables
from dissector.tables.schema import SCHEMAS
from tests.support.lake import journeys_as_local, lake_table, table_rows
from tests.support.samples import split_pcap

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
#: Spark numbers each series from series index * 2**32 + 1 and merges nothing: a local
#: read asked to do the same compares row for row.
SPARK_IDS = ReaderOptions(per_series_ids=True)


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return read_tables(ds.expand(str(PCAPS)), SPARK_IDS)


def rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


@pytest.mark.parametrize("table", list(SCHEMAS))
def test_every_table_matches_pandas(spark: SparkSession, expected: Any, table: str) -> None:
    df = ds.read(spark, str(PCAPS), table=table)
    want = expected[table]
    assert df.count() == want.num_rows
    assert [f.name for f in df.schema.fields] == want.column_names
    got_conns = Counter(r["conn_id"] for r in rows(df.select("conn_id")))
    assert got_conns == Counter(want["conn_id"].to_pylist())


def test_key_aggregates_match_pandas(spark: SparkSession, expected: Any) -> None:
    frames = ds.read(spark, str(PCAPS), table="frames")
    by_command = {r["command"]: r["count"] for r in rows(frames.groupBy("command").count())}
    assert by_command == dict(Counter(expected["frames"]["command"].to_pylist()))
    msgs = ds.read(spark, str(PCAPS), table="messages")
    got = {(r["kind"], r["payload_sha256"]) for r in rows(msgs.select("kind", "payload_sha256"))}
    want = set(
        zip(
            expected["messages"]["kind"].to_pylist(),
            expected["messages"]["payload_sha256"].to_pylist(),
            strict=True,
        )
    )
    assert got == want
    total = msgs.groupBy().sum("payload_size").collect()[0][0]
    assert total == sum(expected["messages"]["payload_size"].to_pylist())
    timeline = ds.read(spark, str(PCAPS), table="timeline")
    outcomes = {r["outcome"]: r["count"] for r in rows(timeline.groupBy("outcome").count())}
    assert outcomes == dict(Counter(expected["timeline"]["outcome"].to_pylist()))


def test_filters_are_applied_exactly(spark: SparkSession, expected: Any) -> None:
    frames = ds.read(spark, str(PCAPS), table="frames")
    assert frames.filter("command = 'SEND'").count() == expected["frames"][
        "command"
    ].to_pylist().count("SEND")
    conn = expected["frames"]["conn_id"][0].as_py()
    assert frames.filter(f"conn_id = {conn}").count() == expected["frames"][
        "conn_id"
    ].to_pylist().count(conn)
    stamps = expected["frames"]["ts"].to_pylist()
    commands = expected["frames"]["command"].to_pylist()
    middle = sorted(stamps)[len(stamps) // 2]
    assert frames.filter(frames.ts >= middle).count() == sum(1 for t in stamps if t >= middle)
    both = frames.filter("command IN ('SEND', 'MESSAGE')").filter(frames.ts < middle).count()
    assert both == sum(
        1 for c, t in zip(commands, stamps, strict=True) if c in ("SEND", "MESSAGE") and t < middle
    )


def test_rotated_files_give_the_same_conversations(spark: SparkSession, tmp_path: Path) -> None:
    whole = PCAPS / "produce_consume.pcap"
    parts = [tmp_path / "cap.pcap", tmp_path / "cap.pcap1", tmp_path / "cap.pcap2"]
    split_pcap(whole, parts, [25, 60])
    conv = rows(ds.read(spark, str(tmp_path), table="conversations"))
    want = read_tables(whole)["conversations"].to_pylist()
    assert len(conv) == len(want) == 1
    for key in ("conn_id", "frames_c2b", "frames_b2c", "stream_bytes_c2b", "ended", "producers"):
        assert conv[0][key] == want[0][key], key
    frames = ds.read(spark, str(tmp_path), table="frames").count()
    assert frames == read_tables(whole)["frames"].num_rows


def test_pandas_3_and_pyspark_together(spark: SparkSession, expected: Any) -> None:
    df = ds.read(spark, str(PCAPS), table="conversations").toPandas()
    assert len(df) == expected["conversations"].num_rows


def test_fleet_job(spark: SparkSession, expected: Any, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("produce_consume.pcap", "batching.pcap", "keepalive.pcap"):
        shutil.copy(PCAPS / name, inputs / name)
    want = read_tables(ds.expand(str(inputs)), SPARK_IDS)
    out = tmp_path / "out"
    summary = fleet.run(spark, [str(inputs)], str(out), ReaderOptions())
    for name in SCHEMAS:
        files = list((out / name).rglob("*.parquet"))
        assert files
        for folder in {f.parent for f in files}:  # per partition: a file per task at most
            assert len(list(folder.glob("*.parquet"))) <= 4
        rows = want[name].num_rows
        assert sum(pq.read_metadata(f).num_rows for f in files) == rows
        assert summary["tables"][name] == rows
    assert want["journeys"].num_rows > 30
    fleet_tables = {name: lake_table(out, name) for name in ("frames", "conversations", "journeys")}
    local = read_tables(ds.expand(str(inputs)), tables=["frames", "conversations", "journeys"])
    assert journeys_as_local(fleet_tables, local) == table_rows(local["journeys"])
    produced = [r for r in summary["per_broker"] if r["kind"] == "produced"]
    assert sum(r["messages"] for r in produced) == want["messages"]["kind"].to_pylist().count(
        "produced"
    )
    latency = {r["request_command"]: r for r in summary["latency"]}
    assert latency["SEND"]["count"] == want["timeline"]["request_command"].to_pylist().count("SEND")
    saved = json.loads((out / "summary.json").read_text())
    assert saved["tables"] == summary["tables"]
    assert "Busiest producers" in (out / "summary.txt").read_text()


def test_fleet_cli(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "dissector.frontends.cli",
            "spark",
            str(PCAPS / "keepalive.pcap"),
            "-o",
            str(out),
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Fleet summary" in res.stdout and (out / "summary.json").exists()


def test_payload_anomalies_reach_spark_whatever_the_table(
    spark: SparkSession, tmp_path: Path
) -> None:
    """One truth: Spark's anomalies and conversations (with their anomaly counts) carry the
    payload faults of crafted captures, as read_capture does."""
    from tests.support.payload_faults import crafted

    made = crafted(tmp_path)
    folder = tmp_path / "caps"
    folder.mkdir()
    for name in ("codec2_smaller", "bomb", "missing_chunk"):
        shutil.copy(made[name][0], folder / f"{name}.pcap")
    want = read_tables(ds.expand(str(folder)), SPARK_IDS)
    got = rows(ds.read(spark, str(folder), table="anomalies").select("conn_id", "code"))
    table = want["anomalies"]
    expected_codes = zip(table["conn_id"].to_pylist(), table["code"].to_pylist(), strict=True)
    assert Counter((r["conn_id"], r["code"]) for r in got) == Counter(expected_codes)
    assert {"payload.size_mismatch", "payload.decompression_bomb", "payload.chunk_missing"} <= {
        r["code"] for r in got
    }
    convs = rows(ds.read(spark, str(folder), table="conversations").select("anomalies"))
    assert sorted(r["anomalies"] for r in convs) == sorted(
        want["conversations"]["anomalies"].to_pylist()
    )


def test_findings_match_a_local_read(spark: SparkSession, tmp_path: Path) -> None:
    """A capture with findings on one connection and across two (the same series): Spark's
    findings rows are a local read's (numbered per series), evidence included."""
    from tests.support.scenes import faults_capture

    capture = faults_capture(tmp_path / "faults.pcap")
    want = read_tables([str(capture)], SPARK_IDS, ["findings"])["findings"].to_pylist()
    got = rows(ds.read(spark, str(capture), table="findings"))
    assert len(want) == 3
    key = ("code", "conn_id", "summary", "evidence", "count", "value")
    assert sorted(tuple(str(r[k]) for k in key) for r in got) == sorted(
        tuple(str(r[k]) for k in key) for r in want
    )
