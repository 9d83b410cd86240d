"""`pulsar-dissect diagnose` and the findings table in every output.

- diagnose ranks findings by severity, then impact, grouped by connection (its worst
  finding first), each with its evidence; exit 0 whatever it found; --format json holds
  the same rows; thresholds are options (listed in --help) that change what is found.
- bad input is one line on stderr and a non-zero exit, as for the other commands.
- the findings rows are the same from `read --table findings` (-j 1 and -j 2, where the
  rule spans connections), `read_capture` and `diagnose --format json`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dissector.findings import REGISTRY, THRESHOLDS
from dissector.findings import FindingCode as F
from dissector.read import read_capture
from tests.support.cli import cli
from tests.support.scenes import Scene, faults_capture, producer, receipt, send


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return faults_capture(tmp_path_factory.mktemp("diag") / "faults.pcap")


def test_text_ranks_by_severity_and_impact(faults: Path) -> None:
    done = cli("diagnose", str(faults))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("3 findings in 3 connections (1 error, 2 warnings)")
    order = [out.index(code) for code in (
        F.PRODUCER_SEND_TIMEOUT, F.FLOW_NO_FLOW_AFTER_SUBSCRIBE, F.PRODUCER_SEQUENCE_REGRESSION
    )]  # fmt: skip
    assert order == sorted(order), out  # the error first; the warning with more evidence next
    assert "conn 1  10.0.0.1:40001 -> 10.0.0.2:6650" in out
    assert "why: " + REGISTRY[F.PRODUCER_SEND_TIMEOUT].hint in out
    assert "evidence: packets" in out


def test_json_holds_the_table_rows(faults: Path) -> None:
    done = cli("diagnose", str(faults), "--format", "json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    rows = [r for c in got["connections"] for r in c["findings"]]
    table = read_capture(faults, tables=["findings"]).arrow["findings"].to_pylist()
    assert got["findings"] == len(rows) == len(table) == 3
    key = sorted((r["code"], r["conn_id"], r["count"], r["summary"]) for r in table)
    assert sorted((r["code"], r["conn_id"], r["count"], r["summary"]) for r in rows) == key
    assert [c["conn_id"] for c in got["connections"]] == [1, 2, 3]


def test_thresholds_are_options(faults: Path) -> None:
    helped = cli("diagnose", "--help").stdout
    for name in THRESHOLDS:
        assert f"--{name.replace('_', '-')}" in helped
    looser = cli("diagnose", str(faults), "--flow-wait", "60", "--send-timeout", "60")
    assert looser.returncode == 0
    # a SEND pending at a FIN is a timeout whatever the threshold; the FLOW wait (43 s) is not
    assert F.PRODUCER_SEND_TIMEOUT in looser.stdout
    assert F.FLOW_NO_FLOW_AFTER_SUBSCRIBE not in looser.stdout


def test_nothing_wrong_says_so(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    for m in producer():
        s.at(0, m)
    s.at(1, send(0)).at(1.1, receipt(0)).close(2)
    done = cli("diagnose", str(s.write(tmp_path / "ok.pcap")))
    assert done.returncode == 0 and done.stdout.startswith("no findings")


@pytest.mark.parametrize(
    "args",
    [["/no/such/file.pcap"], ["--send-timeout", "soon", "x.pcap"], ["--redeliveries", "-1", "x"]],
)
def test_bad_input_is_one_line(args: list[str], tmp_path: Path) -> None:
    done = cli("diagnose", *args)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) <= 2  # argparse: usage line, then the error
    assert "Traceback" not in done.stderr


def test_not_a_capture_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    done = cli("diagnose", str(bad))
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1


def test_findings_are_equal_in_every_read(faults: Path, tmp_path: Path) -> None:
    """-j 2: one more worker reads every connection for the findings (the regression spans
    conns 1 and 3, which a sharded read splits)."""
    outs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        done = cli("read", str(faults), "-o", str(out), "-j", jobs)
        assert done.returncode == 0, done.stderr
        outs[jobs] = pq.read_table(out / "findings.parquet").sort_by("conn_id")
    assert outs["1"].num_rows == 3
    assert outs["1"].equals(outs["2"])
    frames = {j: pq.read_table(tmp_path / f"j{j}" / "frames.parquet").num_rows for j in outs}
    assert frames["1"] == frames["2"]
    alone = read_capture(faults, tables=["findings"]).arrow["findings"].sort_by("conn_id")
    assert alone.equals(outs["1"])


def test_live_prints_findings_as_established_then_the_rows_of_read(faults: Path) -> None:
    """`live --findings` replaying the capture: the send timeout is told once its threshold
    passed (before its row, made when conn 1 closes); the rows printed are read's."""
    from dissector.capture.files import open_capture
    from dissector.frontends.live.loop import run
    from dissector.frontends.live.options import LiveOptions
    from tests.support.live import FakeSource

    with open_capture(str(faults)) as reader:
        pkts = [(p.ts, p.data) for p in reader]
    out, err = io.StringIO(), io.StringIO()
    opts = LiveOptions(fmt="jsonl", tables=("findings",), findings=True, count=len(pkts))
    assert run(opts, out, err, source=FakeSource(pkts, 1)) == 0
    lines = out.getvalue().splitlines()
    told = [i for i, line in enumerate(lines) if line.startswith("finding (now): ERROR")]
    rows = [i for i, line in enumerate(lines) if line.startswith("finding: ERROR")]
    assert len(told) == 1 and len(rows) == 1 and told[0] < rows[0], lines
    assert f"{F.PRODUCER_SEND_TIMEOUT} conn 1: producer 1 (diag-producer)" in lines[told[0]]
    printed = [json.loads(line) for line in lines if line.startswith("{")]
    expected = read_capture(faults, tables=["findings"]).arrow["findings"].to_pylist()
    assert sorted((r["code"], r["conn_id"], r["summary"]) for r in printed) == sorted(
        (r["code"], r["conn_id"], r["summary"]) for r in expected
    )
