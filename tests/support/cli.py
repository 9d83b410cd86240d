"""`pulsar-dissect` as a user runs it: a separate process, output captured as text.

Input: the command's arguments. Output: the finished process (exit code, stdout, stderr).
Rule: always `python -m dissector.frontends.cli` with this interpreter, so tests exercise
the installed command's code without depending on PATH.
"""

from __future__ import annotations

import subprocess
import sys


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )
