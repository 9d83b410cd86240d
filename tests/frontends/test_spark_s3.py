"""The Spark data source and the fleet job reading captures from a real S3 endpoint on
loopback (moto_server): the same tables as the same files read from the local disk."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from dissector.frontends import spark as ds
from dissector.frontends.fleet import job as fleet
from dissector.read import ReaderOptions, read_tables
from tests.support.s3 import MotoS3, s3_env, sample_tree, upload

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
REMOTE = "s3://captures/tree"
#: Columns compared row by row (every table has conn_id; these identify each row).
KEYS = {
    "frames": ("conn_id", "direction", "stream_offset", "command", "frame_size", "checksum"),
    "messages": ("conn_id", "kind", "sequence_id", "batch_index", "payload_sha256"),
    "conversations": ("conn_id", "capture", "frames_c2b", "frames_b2c", "ended"),
    "anomalies": ("conn_id", "code", "packet"),
}
#: Spark numbers each series on its own and merges nothing: the local read does the same.
SPARK_IDS = ReaderOptions(per_series_ids=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    local = tmp_path_factory.mktemp("fleet")
    sample_tree(local, PCAPS)
    with MotoS3() as server:
        upload(server.filesystem(), local, "captures")
        yield server.url, local / "tree"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in s3_env().items() if k.startswith("AWS_")})
    session = ds.session("local[2]", "pulsar-dissector-s3-tests")
    yield session
    session.stop()
    os.environ.clear()
    os.environ.update(saved)


def keyed(rows: list[dict[str, Any]], table: str, root: Path) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        if "capture" in row:
            row = {**row, "capture": row["capture"].replace(REMOTE, str(root))}
        out[tuple(row[k] for k in KEYS[table])] += 1
    return out


def test_spark_source_reads_s3_like_local(spark: SparkSession, store) -> None:
    """Endpoint given by the s3_endpoint option; executors open the objects themselves."""
    url, root = store
    want = read_tables(ds.expand(str(root)), SPARK_IDS)
    for table in KEYS:
        df = ds.read(spark, f"{REMOTE}/", table=table, s3_endpoint=url)
        got = [r.asDict() for r in df.select(*KEYS[table]).collect()]
        assert len(got) == want[table].num_rows > 0 or table == "anomalies", table
        assert keyed(got, table, root) == keyed(want[table].to_pylist(), table, root), table


def test_spark_source_endpoint_from_environment(
    spark: SparkSession, store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS_ENDPOINT_URL seen by the driver reaches the executors; globs work remotely."""
    url, root = store
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    df = ds.read(spark, f"{REMOTE}/samples/**/*.gz", table="frames")
    want = read_tables(ds.expand(f"{root}/samples/**/*.gz"), SPARK_IDS)["frames"]
    got = [r.asDict() for r in df.select(*KEYS["frames"]).collect()]
    assert keyed(got, "frames", root) == keyed(want.to_pylist(), "frames", root)


def test_fleet_job_input_from_s3(spark: SparkSession, store, tmp_path: Path) -> None:
    url, root = store
    written = fleet.dissect(
        spark, [f"{REMOTE}/rotated/", f"{REMOTE}/samples"], str(tmp_path / "out"),
        ReaderOptions(s3_endpoint=url),
    )  # fmt: skip
    want = read_tables(ds.expand([str(root / "rotated"), str(root / "samples")]), SPARK_IDS)
    assert written == {name: table.num_rows for name, table in want.items()}
