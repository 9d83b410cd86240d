"""The same captures give the same summary and report on every run: nothing is ordered by a
set's order, which follows the hash seed (a new one in every Python process).

Expected values: the output of the same command in another process, under another hash seed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.samples import PCAPS

CAPTURES = sorted(str(p) for p in PCAPS.glob("*.pcap"))


def run(seed: int, *args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.mark.slow  # six runs over every sample
def test_summary_and_report_do_not_follow_the_hash_seed(tmp_path: Path) -> None:
    summaries, tables = [], []
    for seed in (1, 2, 3):
        summaries.append(
            run(seed, "summary", "-j", "1", "--format", "json", *CAPTURES, cwd=tmp_path)
        )
        run(seed, "report", "-j", "1", *CAPTURES, "-o", f"r{seed}.html", cwd=tmp_path)
        page = (tmp_path / f"r{seed}.html").read_text()
        found = re.search(r"<table id=latency-table>.*?</table>", page, re.S)
        assert found is not None
        tables.append(found.group(0))
    assert summaries[0] == summaries[1] == summaries[2]
    assert tables[0] == tables[1] == tables[2]
