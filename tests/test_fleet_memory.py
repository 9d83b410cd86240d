"""Bounded memory per task: what a Spark task runs for one capture series (the fleet job's
`_dissect_bundle`, the data source's `PulsarReader.read`) has the same peak memory for a
capture three times larger.

Each measurement is a fresh Python process (as a Python worker is) running the task's own
function on one series and reporting its peak RSS (`resource.getrusage`, ru_maxrss). The
captures are the benchmark generator's small-frame traffic (8 connections) at two sizes, both
beyond the steady state (a table's rows are held until BATCH_ROWS = 4,096 make a batch, so
the smaller has about two batches of frames: a capture under one batch would not be).
The test would fail for a task that held a series' table: the Arrow tables it writes grow
by more than twice the allowed RSS growth (checked too), and Python rows cost more still.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from benchmarks.captures import small
from dissector.frontends.partitioned import PARTITIONS

#: Allowed peak RSS growth from the small to the 3x capture (allocator noise included).
SLACK_MIB = 12

_TASK = """
import json, resource, sys
from dissector.read import ReaderOptions
mode, path, out = sys.argv[1:4]
if mode == "fleet":
    from dissector.frontends.fleet import job as fleet
    output = fleet._output_filesystem(out)
    import pyarrow.compute as pc
    rows, events = {}, 0  # the joiner's input recorded leaves in batches, as in Spark
    for batch in fleet._dissect_bundle(0, [(0, [path])], output, ReaderOptions()):
        kinds = batch.column("kind")
        events += pc.sum(pc.equal(kinds, "event")).as_py() or 0
        for row in batch.filter(pc.equal(kinds, "rows")).to_pylist():
            rows[row["topic"]] = row["ts"]
    rows["events"] = events
else:
    from dissector.frontends import spark
    reader = spark.PulsarReader({"table": "frames", "path": path})
    [part] = reader.partitions()
    rows = {"frames": sum(b.num_rows for b in reader.read(part))}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak": peak, "rows": rows}))
"""


def _task(mode: str, capture: Path, out: Path) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-c", _TASK, mode, str(capture), str(out)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result: dict[str, Any] = json.loads(res.stdout)
    return result


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("sizes")
    one, three = folder / "one.pcap", folder / "three.pcap"
    small(one, 0.1)  # 31,632 frames
    small(three, 0.3)
    return one, three


def _arrow_bytes(out: Path) -> int:
    hive = pads.partitioning(PARTITIONS, flavor="hive")
    return sum(
        pads.dataset(out / name, partitioning=hive).to_table().nbytes
        for name in ("frames", "messages", "timeline")
    )


@pytest.mark.slow  # two task processes on captures of 30,000+ frames (~5 s)
def test_fleet_task_memory_does_not_grow_with_the_series(
    captures: tuple[Path, Path], tmp_path: Path
) -> None:
    one, three = captures
    a = _task("fleet", one, tmp_path / "one")
    b = _task("fleet", three, tmp_path / "three")
    assert b["rows"]["frames"] >= 3 * a["rows"]["frames"] - 100
    assert b["rows"]["events"] >= 3 * a["rows"]["events"] - 100 > 10_000  # journeys recorded
    growth = b["peak"] - a["peak"]
    held = _arrow_bytes(tmp_path / "three") - _arrow_bytes(tmp_path / "one")
    assert held > 2 * SLACK_MIB << 20  # a task holding its tables would fail below
    assert growth < SLACK_MIB << 20, (a["peak"] >> 20, b["peak"] >> 20, held >> 20)


@pytest.mark.slow  # two task processes on captures of 30,000+ frames (~3 s)
def test_data_source_task_memory_does_not_grow_with_the_series(
    captures: tuple[Path, Path], tmp_path: Path
) -> None:
    one, three = captures
    a = _task("source", one, tmp_path)
    b = _task("source", three, tmp_path)
    assert b["rows"]["frames"] >= 3 * a["rows"]["frames"] - 100
    assert b["peak"] - a["peak"] < SLACK_MIB << 20, (a["peak"] >> 20, b["peak"] >> 20)
