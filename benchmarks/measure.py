"""Time one command as a whole process and measure its peak memory.

Input: an argument list (and where its stdout goes).
Output: a Run: wall seconds (process start included), user and system CPU seconds, the exit
status, the tail of stderr, and peak memory three ways: `maxrss_mb`, the kernel's ru_maxrss
from wait4 (the largest single process among the command and the children it waited for,
exact); `tree_pss_mb`, the largest total PSS of the process tree sampled from /proc while
it runs (pages shared after fork counted once); `tree_mb`, the sum of every process's own
peak (VmHWM), an upper bound that counts shared pages in each process.
Rule: the command is started by benchmarks/launch.py, which times fork .. wait4 and reads
the rusage (see there why not from this process). `peak_mb`, the figure targets are judged
on, is the larger of `maxrss_mb` and `tree_pss_mb`: for one process it is ru_maxrss; with
worker processes it is what they held together at the worst sampled moment.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

LAUNCH = Path(__file__).resolve().parent / "launch.py"
SAMPLE_EVERY = 0.2  # seconds between /proc samples: cheap next to a benchmark's two cores


@dataclass
class Run:
    wall_s: float
    user_s: float
    sys_s: float
    maxrss_mb: float  # ru_maxrss: the largest single process, exact
    tree_pss_mb: float  # the largest sampled sum of PSS over the process tree
    tree_mb: float  # the sum of each process's own peak RSS: an upper bound
    exit_code: int
    stderr_tail: str

    @property
    def peak_mb(self) -> float:
        """The judged peak: the largest process, or the tree's simultaneous PSS total."""
        return max(self.maxrss_mb, self.tree_pss_mb)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _kib(path: str, field: str) -> int:
    """A `Field:   N kB` line of a /proc file (0 when the process is gone)."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class _TreeSampler(threading.Thread):
    """The command's process tree (the launcher excepted), every SAMPLE_EVERY seconds: each
    process's own peak (VmHWM, the last value seen), and the largest sum of the processes'
    proportional set sizes (PSS: a page shared by n processes counts 1/n in each)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peaks: dict[int, int] = {}
        self.pss_peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY):
            todo = _children(self.pid)
            pss = 0
            while todo:
                pid = todo.pop()
                hwm = _kib(f"/proc/{pid}/status", "VmHWM:")
                if hwm:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)
                pss += _kib(f"/proc/{pid}/smaps_rollup", "Pss:")
                todo += _children(pid)
            self.pss_peak = max(self.pss_peak, pss)


def run(
    args: list[str], stdout: Path | None = None, cwd: Path | None = None, timeout: float = 3600
) -> Run:
    """Run `args` once through benchmarks/launch.py; stdout to a file (or nowhere), the
    tail of stderr kept for the report. Past `timeout` its process group is killed."""
    out = stdout.open("wb") if stdout is not None else subprocess.DEVNULL
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "rusage.json"
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(LAUNCH), str(record), *args],
                stdout=out,
                stderr=subprocess.PIPE,
                cwd=cwd,
                start_new_session=True,
            )
            sampler = _TreeSampler(proc.pid)
            sampler.start()
            killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
            killer.start()
            _, err = proc.communicate()
            killer.cancel()
            sampler.stop.set()
            sampler.join()
        finally:
            if stdout is not None:
                out.close()  # type: ignore[union-attr]
        usage = json.loads(record.read_text()) if record.is_file() else {}
    text = err.decode(errors="replace").strip()
    return Run(
        wall_s=usage.get("wall_s", float("nan")),
        user_s=usage.get("user_s", float("nan")),
        sys_s=usage.get("sys_s", float("nan")),
        maxrss_mb=usage.get("maxrss_kib", 0) / 1024,
        tree_pss_mb=sampler.pss_peak / 1024,
        tree_mb=sum(sampler.peaks.values()) / 1024,
        exit_code=proc.returncode if usage else -9,
        stderr_tail="\n".join(text.splitlines()[-5:])[-1500:],
    )


def summary(runs: list[Run]) -> dict[str, float]:
    """min and median wall time, and the largest peak memory, over runs."""
    walls = [r.wall_s for r in runs]
    return {
        "min_s": min(walls),
        "median_s": statistics.median(walls),
        "peak_mb": max(r.peak_mb for r in runs),
        "maxrss_mb": max(r.maxrss_mb for r in runs),
        "tree_pss_mb": max(r.tree_pss_mb for r in runs),
        "tree_mb": max(r.tree_mb for r in runs),
    }
