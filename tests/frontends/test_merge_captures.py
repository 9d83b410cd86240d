"""Several captures in one read: those taken at the same time merge by timestamp (as
mergecap does), others follow in time order; connection ids stay small.

Expected values come from mergecap (the Wireshark suite's merger) and from reading each
capture on its own, never from the merged read itself.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli
from tests.support.crafted import STEP_US, Conn, baseline_session, ts_of, write_pcap

MERGECAP = shutil.which("mergecap")
EARLY_US = 3_600_000_000  # an hour: the earlier capture ends long before the others start


def ok(*args: str) -> str:
    res = cli(*args)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return res.stdout


def jsonl(*args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(*args, "--format", "jsonl").splitlines()]


@pytest.fixture
def captures(tmp_path: Path) -> dict[str, Path]:
    """Two hosts' captures of the same minute (packets interleave: b is half a step behind
    a), and a third, named last, an hour earlier than both."""
    a = baseline_session().segs
    b = baseline_session(Conn(client_port=41000)).segs
    b = [seg.replace(ts_us=ts_of(i) + STEP_US // 2) for i, seg in enumerate(b, start=1)]
    early = [
        seg.replace(ts_us=ts_of(i) - EARLY_US)
        for i, seg in enumerate(baseline_session(Conn(client_port=42000)).segs, start=1)
    ]
    return {
        "a": write_pcap(tmp_path / "a.pcap", a).path,
        "b": write_pcap(tmp_path / "b.pcap", b).path,
        "z": write_pcap(tmp_path / "z-early.pcap", early).path,
    }


def test_overlapping_captures_read_as_mergecap_merges_them(
    captures: dict[str, Path], tmp_path: Path
) -> None:
    if MERGECAP is None:
        pytest.skip("mergecap is not installed (make testdeps installs tshark's suite)")
    merged = tmp_path / "merged.pcap"
    subprocess.run([MERGECAP, "-F", "pcap", "-w", str(merged), str(captures["a"]),
                    str(captures["b"])], check=True)  # fmt: skip
    both = [str(captures["a"]), str(captures["b"])]
    for table in ("frames", "timeline", "anomalies"):
        got = jsonl("read", *both, "--table", table)
        want = jsonl("read", str(merged), "--table", table)
        assert got == want, table  # packet numbers, times, conn ids: all of them
        assert got or table == "anomalies", table
    conversations = jsonl("read", *both, "--table", "conversations")
    reference = jsonl("read", str(merged), "--table", "conversations")
    assert [{**r, "capture": None} for r in conversations] == [
        {**r, "capture": None} for r in reference
    ]
    owner = {r["client_port"]: r["capture"] for r in conversations}
    assert owner == {40000: str(captures["a"]), 41000: str(captures["b"])}
    assert sorted(r["conn_id"] for r in conversations) == [1, 2]


@pytest.mark.slow  # many command runs: left out of `make check`
def test_captures_of_other_times_follow_in_time_order(captures: dict[str, Path]) -> None:
    """z-early.pcap sorts last by name but is an hour older: it comes first, numbered as
    on its own (Wireshark's packet numbers), and times never run backwards."""
    paths = [str(captures[k]) for k in ("a", "b", "z")]
    alone = jsonl("read", str(captures["z"]), "--table", "frames")
    frames = jsonl("read", *paths, "--table", "frames")
    early = [f for f in frames if f["client_port"] == 42000]
    assert frames[: len(early)] == early  # the early capture's frames come first
    key = ("first_packet", "last_packet", "ts", "command", "stream_offset")
    assert [[f[k] for k in key] for f in early] == [[f[k] for k in key] for f in alone]
    later = [f["ts"] for f in frames[len(early) :]]
    assert later and max(f["ts"] for f in early) < min(later)  # ISO strings, one zone
    ids = sorted({f["conn_id"] for f in frames})
    assert ids == [1, 2, 3]  # small, on from one group to the next
    assert {f["conn_id"] for f in early} == {1}
    text = ok("read", *paths).splitlines()
    times = [float(line.split()[1]) for line in text if not line.lstrip().startswith("!")]
    assert times and min(times) >= 0  # relative to the read's first packet: z's


@pytest.mark.slow  # reads with -j 1, 2 and 3 (~6 s)
def test_several_processes_number_merged_captures_as_one(captures: dict[str, Path]) -> None:
    paths = [str(captures[k]) for k in ("a", "b", "z")]
    for table in ("frames", "conversations", "anomalies"):
        one = jsonl("read", *paths, "--table", table, "-j", "1")
        two = jsonl("read", *paths, "--table", table, "-j", "2")

        def order(r: dict[str, Any]) -> tuple[str, ...]:
            return (str(r["conn_id"]), json.dumps(r, sort_keys=True))

        assert sorted(one, key=order) == sorted(two, key=order), table
