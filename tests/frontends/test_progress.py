"""The progress bar of long reads: on stderr when it is a terminal, never when piped.

A read's stderr is a pseudo-terminal in the first test (the bar's delay set to 0 through the
environment, so that a small capture shows it) and a pipe in the second; the tables written
are the same either way.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyarrow.parquet as pq

from tests.support.samples import CAPTURES

CAPTURE = next(p for p in CAPTURES if p.name.startswith("large_1mib"))


def _read(out: Path, stderr: int, jobs: str) -> int:
    env = {**os.environ, "PULSAR_DISSECT_PROGRESS_DELAY": "0"}
    cmd = [sys.executable, "-m", "dissector.frontends.cli", "read", str(CAPTURE), "-o", str(out)]
    return subprocess.run([*cmd, "-j", jobs], stderr=stderr, env=env, check=False).returncode


def _drain(fd: int) -> bytes:
    data = b""
    os.set_blocking(fd, False)
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except (BlockingIOError, OSError):
        pass
    return data


def test_a_terminal_gets_a_bar_with_the_capture_size(tmp_path: Path) -> None:
    size = CAPTURE.stat().st_size
    for jobs in ("1", "2"):
        main, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
        try:
            assert _read(tmp_path / jobs, child, jobs) == 0
            shown = _drain(main).decode(errors="replace")
        finally:
            os.close(main)
            os.close(child)
        assert "%|" in shown, shown  # tqdm's bar: "NN%|####  | done/total"
        total = f"{size * int(jobs) / 1024 / 1024:.2f}M"
        assert total in shown or f"{size * int(jobs) / 1024 / 1024:.1f}M" in shown, shown
        frames = pq.read_table(tmp_path / jobs / "frames.parquet").num_rows
        assert frames > 0


def test_a_pipe_gets_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PULSAR_DISSECT_PROGRESS_DELAY": "0"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dissector.frontends.cli",
            "read",
            str(CAPTURE),
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == b""


def test_no_thread_runs_while_workers_are_forked() -> None:
    """With workers, the bar is redrawn by the waiting parent, not by a thread: a thread
    holding a lock (stderr's, the import lock) when a worker is forked would leave that
    lock held in the worker forever (a -j 2 read hung that way once)."""
    import threading

    from dissector.frontends.progress import ReadProgress

    before = threading.active_count()
    with ReadProgress(100, threaded=False, enabled=True) as progress:
        assert threading.active_count() == before
        progress.counter.value = 40
        progress.draw()
        assert threading.active_count() == before
    with ReadProgress(100, threaded=True, enabled=True):
        assert threading.active_count() == before + 1  # one process: a thread is fine
