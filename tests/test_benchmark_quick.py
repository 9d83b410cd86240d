"""The benchmark's quick mode runs end to end, and its counts agree with tshark's.

Input: `python -m benchmarks.run --quick --out TMP` (tiny captures, one run of each command).
Output: assertions: exit status 0, the report and raw results written, every command exited
0 and left output that its check read back, every target judged on a measured value, and
three independent counts of the small capture agree, command by command: what the generator
says it wrote, what tshark with benchmarks/pulsar.lua decodes (run here, not taken from the
report), and the rows of our frames parquet (read here).
Rule: tshark is a test dependency (`make test` installs it); without it this test fails.
"""

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

from dissector.pulsar.wire import COMMAND_NAMES

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    assert shutil.which("tshark"), "tshark is needed: `make test` installs it with apt"
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == str(out)
    return out, json.loads((out / "benchmark.json").read_text())


def test_every_command_ran_and_its_output_checked(quick):
    _, data = quick
    keys = {c["key"] for c in data["cases"]}
    assert {"ours.small.frames", "ours.small.j1", "ours.small.all1", "ours.large.j2"} <= keys
    assert {"ours.mib.messages", "tshark.small.tcp"} <= keys
    assert {"tshark.small.fields", "baseline.small.scapy", "baseline.large.walk"} <= keys
    for case in data["cases"]:
        assert case["status"] == "ok", (case["key"], case["detail"])
        assert [r["exit_code"] for r in case["runs"]] == [0], case["key"]
        assert case["runs"][0]["wall_s"] > 0 and case["runs"][0]["maxrss_mb"] > 0
        files = case["check"]["outputs"]
        assert files, case["key"]
        for f in files:
            assert Path(f["path"]).stat().st_size == f["bytes"] > 0, (case["key"], f)
    tables = {
        Path(f["path"]).name
        for c in data["cases"]
        if c["key"] == "ours.small.all"
        for f in c["check"]["outputs"]
    }
    assert {
        f"{t}.parquet"
        for t in ("frames", "messages", "anomalies", "conversations", "timeline", "entities")
    } <= tables


def test_report_judges_only_measured_values(quick):
    out, data = quick
    report = (out / "benchmark.md").read_text()
    assert "## Targets" in report and "Quick mode" in report
    assert len(data["targets"]) >= 9
    for target in data["targets"]:
        assert target["value"] is not None and target["met"] in (True, False), target
        assert target["target"] in report
    assert "error" not in data["profile"], data["profile"]
    assert {s["stage"] for s in data["profile"]["stages"]} >= {"capture", "flow", "pulsar"}
    assert len(data["profile"]["top"]) == 15


def test_start_up_is_measured_as_the_median_of_whole_processes(quick):
    out, data = quick
    startup = data["startup"]
    assert startup["status"] == "ok", startup["detail"]
    assert startup["runs"] == len(startup["wall_s"]) == 3  # quick mode: 3 timed runs
    assert startup["min_s"] <= startup["median_s"] <= startup["max_s"]
    assert startup["median_s"] == sorted(startup["wall_s"])[1]
    assert any(t["target"].startswith("read of a small capture") for t in data["targets"])
    assert "## Start-up" in (out / "benchmark.md").read_text()


def _tshark_commands(capture: str) -> Counter[str]:
    """Commands decoded by tshark with the Lua framer, counted by name."""
    proc = subprocess.run(
        [
            "tshark",
            "-n",
            "-X",
            f"lua_script:{ROOT / 'benchmarks' / 'pulsar.lua'}",
            "-o",
            f'uat:protobuf_search_paths:"{ROOT / "proto"}","TRUE"',
            "-o",
            "protobuf.preload_protos:TRUE",
            "-o",
            "protobuf.pbf_as_hf:TRUE",
            "-r",
            capture,
            "-Y",
            "pulsar",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-e",
            "pbf.pulsar.proto.BaseCommand.type",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    types = [t for line in proc.stdout.split() for t in line.split(",")]
    return Counter(COMMAND_NAMES[int(t)] for t in types)


def test_generator_tshark_and_our_frames_table_agree(quick):
    out, data = quick
    small = data["captures"]["small"]
    written = Counter(small["commands"])
    assert sum(written.values()) == small["frames"] > 1000
    assert written["SEND"] > 0.45 * small["frames"]  # SEND / SEND_RECEIPT dominate

    decoded = _tshark_commands(small["path"])
    table = pq.read_table(out / "work" / "small-frames.parquet", columns=["command"])
    ours = Counter(table.column("command").to_pylist())

    assert sum(decoded.values()) == small["frames"] == table.num_rows
    assert decoded == written == ours
    assert small["frames"] / small["packets"] > 1.5  # several frames share a packet
