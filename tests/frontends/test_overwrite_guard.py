"""Issue 31 F5: no output may be one of the run's inputs (captures, TLS key logs), whatever
the name it is given by; the run is refused with one line before anything is written.

Expected: the input's bytes (sha256) unchanged, exit 2, one line naming both.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dissector.errors import UsageError
from dissector.frontends.overwrite_guard import refuse_overwrite
from tests.support.cli import cli
from tests.support.samples import PCAPS

SAMPLE = PCAPS / "produce_consume.pcap"
KEYLOG = "CLIENT_RANDOM " + "00" * 32 + " " + "11" * 48 + "\n"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(SAMPLE, tmp_path / "in.pcap")
    (tmp_path / "kl.txt").write_text(KEYLOG)
    os.symlink("in.pcap", tmp_path / "link.pcap")
    os.link(tmp_path / "in.pcap", tmp_path / "hard.pcap")
    monkeypatch.chdir(tmp_path)
    return tmp_path


CASES = [
    ["read", "in.pcap", "-o", "in.pcap", "--format", "csv"],
    ["read", "in.pcap", "-o", "./in.pcap", "--format", "parquet"],
    ["read", "in.pcap", "--table", "frames", "--format", "jsonl", "-o", "{abs}/in.pcap"],
    ["read", "in.pcap", "-w", "./in.pcap", "--topic", "nothing"],
    ["read", "in.pcap", "-o", "link.pcap", "--format", "csv"],
    ["read", "link.pcap", "-o", "hard.pcap", "--format", "csv"],
    ["read", "in.pcap", "--tls-keylog", "kl.txt", "-o", "kl.txt", "--format", "csv"],
    ["read", "in.pcap", "--tls-keylog", "kl.txt", "-w", "kl.txt"],
    ["sql", "in.pcap", "SELECT * FROM frames", "--format", "csv", "-o", "in.pcap"],
    ["report", "in.pcap", "-o", "in.pcap.html"],  # not an input: allowed (control)
]


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize("args", CASES, ids=[" ".join(c[1:]) for c in CASES])
def test_an_output_onto_an_input_is_refused(work: Path, args: list[str]) -> None:
    args = [a.replace("{abs}", str(work)) for a in args]
    before = {p.name: _digest(p) for p in (work / "in.pcap", work / "kl.txt")}
    done = cli(*args)
    after = {p.name: _digest(p) for p in (work / "in.pcap", work / "kl.txt")}
    assert after == before
    if args[-1].endswith(".html"):
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "is the input" in lines[0], done.stderr
    assert not [p for p in os.listdir(work) if p.endswith(".part")]  # nothing half-written


def test_standard_output_appended_to_the_input_is_refused(work: Path) -> None:
    before = _digest(work / "in.pcap")
    with open(work / "in.pcap", "ab") as same:
        done = subprocess.run(
            [sys.executable, "-m", "dissector.frontends.cli", "read", "in.pcap"],
            stdout=same, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
    assert done.returncode == 2
    assert "standard output: is the input in.pcap" in done.stderr
    assert _digest(work / "in.pcap") == before


def test_a_folder_of_tables_whose_file_is_an_input(work: Path) -> None:
    (work / "out").mkdir()
    shutil.copy(SAMPLE, work / "out" / "frames.parquet")  # a capture that is named so
    done = cli("read", "out/frames.parquet", "-o", "out")
    assert done.returncode == 2
    assert "out/frames.parquet: is the input" in done.stderr


def test_refuse_overwrite_compares_identities(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"1")
    b.write_bytes(b"1")  # same bytes, another file: allowed
    refuse_overwrite([str(a)], [str(b), str(tmp_path / "new"), "-", None], stdout=None)
    with pytest.raises(UsageError):
        refuse_overwrite([str(a)], [str(tmp_path / "." / "a")], stdout=None)
    refuse_overwrite(["s3://bucket/a.pcap"], ["s3://bucket/a.pcap"], stdout=None)  # remote
    refuse_overwrite(["/dev/null"], ["/dev/null"], stdout=None)  # a device is a stream
