"""The fleet command on a Spark standalone cluster on loopback: a master and two workers
(one core, 1 GiB each) started from pyspark's own jars, executors in their own processes.

The driver is `pulsar-dissect spark --master spark://...` without PYSPARK_PYTHON: the
workers' `python3` on PATH cannot import the package, so the run only works if the command
sends the driver's interpreter to the executors. Its tables must equal `read_tables` row for
row (as local mode's do, tests/frontends/test_spark_lake.py), and the master must list the
application as run on both workers.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dissector.frontends import spark as ds
from dissector.read import ReaderOptions, read_tables
from dissector.tables.schema import SCHEMAS
from tests.support.lake import lake_rows, table_rows
from tests.support.spark_cluster import SparkCluster, env

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark"), workers=2, cores=1, memory="1g") as c:
        yield c


def test_fleet_command_on_a_standalone_cluster_equals_local(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    captures = ds.expand(str(PCAPS))
    out = tmp_path / "out"
    driver_env = env()
    driver_env.pop("PYSPARK_PYTHON", None)
    res = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "spark", *captures]
        + ["-o", str(out), "--master", cluster.url],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=driver_env,
        cwd=tmp_path,  # executors must not find the package in a working directory
    )
    assert res.returncode == 0, res.stderr[-3000:]
    want = read_tables(captures, ReaderOptions(per_series_ids=True))  # Spark's numbering
    for name in SCHEMAS:  # journeys too: no two samples overlap in time (joined alone)
        assert lake_rows(out, name) == table_rows(want[name]), name
    assert want["journeys"].num_rows > 100
    apps = cluster.status()["completedapps"]
    assert [a["name"] for a in apps] == ["pulsar-dissector"]
    assert apps[0]["cores"] == 2  # one executor on each worker
