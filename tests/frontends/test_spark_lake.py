"""The fleet job's outputs as a data lake reads them, its percentiles against `summary`, and
executors that cannot import the package (one local Spark session for the module).

Expected values come from `read_tables` (pure Python, no Spark) and, for the partition
values, from each row's own `ts` and its connection's broker endpoint in the conversations
table; DuckDB and Spark SQL read the written dataset independently of our writer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from dissector.capture import series as series_mod
from dissector.errors import InputError
from dissector.frontends import spark as ds
from dissector.frontends.fleet import job as fleet
from dissector.frontends.fleet import journey_events as je
from dissector.frontends.summary import summarize as local_summary
from dissector.read import ReaderOptions, read_tables
from dissector.tables.schema import SCHEMAS
from tests.support.lake import lake_rows, table_rows

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
PART = re.compile(r"capture_date=(\d{4}-\d\d-\d\d|__HIVE_DEFAULT_PARTITION__)/broker=([^/]+)$")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample captures, and a truncated one (a capture-level anomaly: no connection)."""
    folder = tmp_path_factory.mktemp("in")
    for capture in ds.expand(str(PCAPS)):
        shutil.copy(capture, folder)
    (folder / "truncated.pcap").write_bytes((PCAPS / "keepalive.pcap").read_bytes()[:5000])
    return folder


@pytest.fixture(scope="module")
def want(inputs: Path) -> dict[str, Any]:
    """Every table as the fleet writes it: a local read numbering each series alone, but
    the journeys: truncated.pcap and keepalive.pcap overlap in time, so the fleet joins
    them as one group of two series (each its own connection), as its steps do in one
    process (journey_events.journeys; tested against local reads in test_fleet_journeys)."""
    tables = read_tables(ds.expand(str(inputs)), ReaderOptions(per_series_ids=True))
    series = series_mod.group(ds.expand(str(inputs)), "auto")
    tables["journeys"] = je.journeys(series, ReaderOptions())
    return tables


@pytest.fixture(scope="module")
def job(spark: SparkSession, inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("lake") / "out"
    return out, fleet.run(spark, [str(inputs)], str(out), ReaderOptions())


def _duck(query: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con.execute(query).fetchall()


def test_duckdb_and_spark_read_each_table_as_one_dataset(
    spark: SparkSession, job: Any, want: dict[str, Any]
) -> None:
    out, _ = job
    for name in SCHEMAS:
        files = list((out / name).rglob("*.parquet"))
        assert files and all(PART.search(str(f.parent)) for f in files), name
        glob = f"{out}/{name}/**/*.parquet"
        [(rows,)] = _duck(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true)")
        assert rows == want[name].num_rows, name
        df = spark.read.parquet(str(out / name))
        assert df.count() == want[name].num_rows, name
        assert df.columns == list(SCHEMAS[name].names) + ["capture_date", "broker"]
    kinds = _duck(
        f"SELECT typeof(capture_date), typeof(broker) FROM read_parquet("
        f"'{out}/frames/**/*.parquet', hive_partitioning=true) LIMIT 1"
    )
    assert kinds == [("DATE", "VARCHAR")]


def test_every_table_equals_read_tables_row_for_row(job: Any, want: dict[str, Any]) -> None:
    out, _ = job
    for name in SCHEMAS:
        assert lake_rows(out, name) == table_rows(want[name]), name
    assert set(SCHEMAS) - set(fleet.TASK_TABLES) == {"journeys"}  # joined in Spark
    assert want["journeys"].num_rows > 100


def test_partitions_hold_the_rows_date_and_broker(job: Any, want: dict[str, Any]) -> None:
    out, _ = job
    conv = want["conversations"]
    brokers = {
        c: f"{ip}_{port}"
        for c, ip, port in zip(
            conv["conn_id"].to_pylist(),
            conv["broker_ip"].to_pylist(),
            conv["broker_port"].to_pylist(),
            strict=True,
        )
    }
    seen_none = 0
    for name in SCHEMAS:
        rows = _duck(
            "SELECT conn_id, broker, capture_date = CAST(ts AS DATE) FROM read_parquet("
            f"'{out}/{name}/**/*.parquet', hive_partitioning=true)"
        )
        for conn_id, broker, same_day in rows:
            assert same_day, (name, conn_id)
            assert broker == brokers.get(conn_id, "__none__"), (name, conn_id)
            seen_none += broker == "__none__"
    truncated = want["anomalies"]["code"].to_pylist().count("capture.truncated")
    checks = want["checks"].num_rows  # a capture's checks span its connections: no broker
    assert seen_none == truncated + checks and truncated >= 1 and checks >= 6


def test_fleet_percentiles_equal_the_summary_command(job: Any, want: dict[str, Any]) -> None:
    """One truth: per request type, count, p50, p90, p99, p99.9, p99.99 and max as
    `summary` gives them; per subscription, its dispatch and end-to-end statistics too."""
    out, summary = job
    whole = local_summary(want)
    local = whole["latency"]
    fleet_latency = {r.pop("request_command"): r for r in summary["latency"]}
    assert fleet_latency == local
    names = ["count", "p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "p99_99_ms", "max_ms"]
    assert all(list(s) == names for s in local.values())
    assert any(s["p50_ms"] != s["p99_ms"] for s in local.values())  # interpolation matters
    assert any(s["p99_ms"] != s["p99_9_ms"] != s["p99_99_ms"] for s in local.values())
    assert summary["subscriptions"] == whole["journeys"]["subscriptions"]
    assert any(list(s["end_to_end"]) == names for s in summary["subscriptions"])
    # summary.txt shows them too, as name.stat keys of each subscription
    text = (Path(out) / "summary.txt").read_text()
    assert "p99_9_ms=" in text and "end_to_end.p99_99_ms=" in text


def test_a_second_run_replaces_the_first(spark: SparkSession, tmp_path: Path) -> None:
    out = tmp_path / "out"
    fleet.dissect(spark, [str(PCAPS / "seek.pcap")], str(out), ReaderOptions())
    written = fleet.dissect(spark, [str(PCAPS / "acks.pcap")], str(out), ReaderOptions())
    got = {n: spark.read.parquet(str(out / n)).count() for n in SCHEMAS}
    assert got == written == {n: t.num_rows for n, t in read_tables(PCAPS / "acks.pcap").items()}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python of our version without this package or its dependencies."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import dissector"], cwd=venv, capture_output=True)
    assert probe.returncode != 0
    return python


def test_executors_that_cannot_import_the_package_give_one_line(
    spark: SparkSession, bare_python: str
) -> None:
    """Both ways in: the check `register` (so `session` and `read`) makes, and a source
    registered while executors ran another Python (Spark's planning error is translated)."""
    sc = spark.sparkContext
    good = sc.pythonExec
    try:
        sc.pythonExec = bare_python  # what PYSPARK_PYTHON would have made it
        ds._checked.discard(sc.applicationId)
        with pytest.raises(InputError) as checked:
            ds.read(spark, str(PCAPS / "keepalive.pcap"))
        spark.dataSource.register(ds.PulsarDataSource)  # now runs in the bare Python
        with pytest.raises(InputError) as planned, ds.executor_errors():
            spark.read.format("pulsar").load(str(PCAPS / "keepalive.pcap"))
    finally:
        sc.pythonExec = good
        ds.register(spark)
    for message in (str(checked.value), str(planned.value)):
        assert message.startswith("executors cannot import the dissector package")
        assert "No module named" in message and "spark.archives" in message
        assert "\n" not in message
    assert bare_python in str(checked.value)
    assert ds.read(spark, str(PCAPS / "keepalive.pcap")).count() > 0  # and back again


def test_other_spark_errors_pass_unchanged() -> None:
    with pytest.raises(PySparkException), ds.executor_errors():
        raise PySparkException("something else entirely")


def test_executors_run_the_drivers_python(spark: SparkSession) -> None:
    """session() sets the conf and what pyspark reads, and executors run that interpreter."""
    sc = spark.sparkContext
    python = sc.getConf().get(ds.PYTHON_CONF)
    assert python == sc.pythonExec == ds.executor_python()
    assert sc.getConf().get(ds.DRIVER_PYTHON_CONF) == sys.executable
    ran = sc.parallelize(range(2), 2).map(lambda _: __import__("sys").executable).collect()
    assert ran == [python, python]


def test_spark_conf_option_takes_key_value(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "spark", str(PCAPS / "acks.pcap")]
        + ["-o", str(tmp_path / "out"), "--conf", "spark.archives"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        "pulsar-dissect: --conf takes KEY=VALUE, not 'spark.archives'"
    ]


def test_fleet_command_with_executors_that_cannot_import_says_so(
    bare_python: str, tmp_path: Path
) -> None:
    """--conf spark.pyspark.python reaches the executors, and their failure is one line."""
    res = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "spark", str(PCAPS / "acks.pcap")]
        + ["-o", str(tmp_path / "out"), "--master", "local[1]"]
        + ["--conf", f"{ds.PYTHON_CONF}={bare_python}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode != 0
    ours = [line for line in res.stderr.splitlines() if line.startswith("pulsar-dissect:")]
    assert ours == [
        f"pulsar-dissect: executors cannot import the dissector package (Python {bare_python}): "
        f"ModuleNotFoundError: No module named 'dissector'; {ds.SHIP_HINT}"
    ]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out" / "frames").exists()
