"""Issue 31 F11: a write that fails is one line and a non-zero exit, never a silent exit 0;
a device or FIFO named as an output is written in place, never replaced by a file.

/dev/full (the kernel's always-full device: every write fails with ENOSPC) stands in for a
full disk; expected: exit 2, one line saying "no space left on device", /dev/full still the
character device it was.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.samples import PCAPS

SAMPLE = str(PCAPS / "produce_consume.pcap")
FULL = "/dev/full"


def _device() -> tuple[int, int]:
    st = os.stat(FULL)
    assert stat.S_ISCHR(st.st_mode)
    return st.st_mode, st.st_rdev


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize(
    "args",
    [
        ["read", SAMPLE],
        ["read", SAMPLE, "-c", "1"],
        ["read", SAMPLE, "-V"],
        ["read", SAMPLE, "--table", "frames", "--format", "csv"],
        ["read", SAMPLE, "--table", "frames", "--format", "jsonl"],
        ["summary", SAMPLE],
        ["summary", SAMPLE, "--format", "json"],
        ["sql", SAMPLE, "SELECT count(*) FROM frames"],
        ["fields", "frames"],
        ["--help"],  # argparse passed over its failed write: exit 0
        ["read", "--help"],
        ["--version"],
    ],
    ids=lambda a: " ".join(x for x in a if x != SAMPLE),
)
def test_standard_output_on_a_full_device(args: list[str]) -> None:
    with open(FULL, "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dissector.frontends.cli", *args],
            stdout=full, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "no space left on device" in lines[0], done.stderr


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize(
    "args",
    [
        ["-w", FULL],
        ["--table", "frames", "--format", "csv", "-o", FULL],
        ["--table", "frames", "--format", "parquet", "-o", FULL],
        ["--table", "messages", "--format", "jsonl", "-o", FULL],
    ],
    ids=lambda a: " ".join(a),
)
def test_an_output_file_on_a_full_device(args: list[str]) -> None:
    before = _device()
    done = cli("read", SAMPLE, *args)
    assert _device() == before  # still the device: never renamed over
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "no space left on device" in lines[0], done.stderr
    assert "written" not in done.stderr


def test_a_fifo_output_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    done = cli("read", SAMPLE, "--table", "conversations", "--format", "csv", "-o", str(fifo))
    reader.join(timeout=120)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO
    assert sorted(os.listdir(tmp_path)) == ["pipe.csv"]  # no hidden file left beside it
    regular = tmp_path / "file.csv"
    again = cli("read", SAMPLE, "--table", "conversations", "--format", "csv", "-o", str(regular))
    assert again.returncode == 0, again.stderr
    assert got[0] == regular.read_bytes()  # the FIFO got what a file gets
