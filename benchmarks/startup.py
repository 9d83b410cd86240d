"""Start-up: `pulsar-dissect read` of a small sample capture, the whole process, N times.

Input: `python -m benchmarks.startup [--runs N]` (or `measure(runs)` from benchmarks.run).
Output: the wall time of each run (process start, imports and the read: what a user with a
small capture waits for), their min, median and max, the judged figure (the median) against
the goal of issue 27 (at or under 0.3 s); the command's output lines are checked.
Rule: timed here only, never in pytest (tests/test_startup.py checks what the command
imports instead); one unmeasured run first, so that every timed run finds the byte-compiled
modules and the page cache in the same state.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import facts, measure
from benchmarks.suite import pulsar_dissect

ROOT = Path(__file__).resolve().parent.parent
#: The sample a user's first read looks like: 95 packets, 81 frames (the issue's "14-packet
#: capture": a small one; this is the bundled sample the README reads first).
SAMPLE = ROOT / "pcaps" / "produce_consume.pcap"
#: Issue 27: the start-up a user with a small capture feels must not grow.
GOAL_S = 0.3
#: Timed runs (start-up varies by a few ms from run to run: the median of many).
RUNS = 21


def measure_startup(runs: int = RUNS) -> dict[str, Any]:
    """Time `pulsar-dissect read SAMPLE` `runs` times (after one warm-up run)."""
    argv = [pulsar_dissect(), "read", str(SAMPLE)]
    walls: list[float] = []
    status, detail = "ok", ""
    load = facts.load()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.txt"
        for i in range(runs + 1):
            run = measure.run(argv, out, cwd=ROOT, timeout=60)
            lines = out.read_text(errors="replace").splitlines() if out.exists() else []
            if run.exit_code != 0 or len(lines) < 10:
                status = "failed"
                detail = f"exit status {run.exit_code}, {len(lines)} lines: {run.stderr_tail}"
                break
            if i:  # the first run only warms up
                walls.append(run.wall_s)
    median = statistics.median(walls) if walls and status == "ok" else None
    return {
        "argv": ["pulsar-dissect", "read", str(SAMPLE.relative_to(ROOT))],
        "status": status,
        "detail": detail,
        "runs": len(walls),
        "wall_s": walls,
        "min_s": min(walls) if walls else None,
        "median_s": median,
        "max_s": max(walls) if walls else None,
        "goal_s": GOAL_S,
        "met": None if median is None else median <= GOAL_S,
        "load_before": load,
    }


def target(result: dict[str, Any]) -> dict[str, Any]:
    """The start-up row of the report's targets (benchmarks.targets' form)."""
    return {
        "target": "read of a small capture (95 packets), whole process (median)",
        "measured": "seconds",
        "goal": f"<= {GOAL_S} s",
        "value": result["median_s"],
        "met": result["met"],
        "note": result["detail"],
    }


def section(result: dict[str, Any]) -> list[str]:
    """The report's start-up section (Markdown lines)."""
    if result["median_s"] is None:
        return ["", "## Start-up", "", f"Not measured: {result['detail']}"]
    return [
        "",
        "## Start-up",
        "",
        f"`{' '.join(result['argv'])}` (95 packets, text output), the whole process timed "
        f"{result['runs']} times after one warm-up run (`python -m benchmarks.startup`): "
        f"min {result['min_s']:.3f} s, **median {result['median_s']:.3f} s**, max "
        f"{result['max_s']:.3f} s; goal <= {GOAL_S} s. Almost all of it is Python and "
        "imports; tests/test_startup.py checks that this read imports neither pandas nor "
        "pyarrow's compute, Parquet, CSV or filesystem modules.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS, help=f"timed runs (default {RUNS})")
    parser.add_argument("--json", action="store_true", help="print the raw result as JSON")
    args = parser.parse_args(argv)
    result = measure_startup(args.runs)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print("\n".join(section(result)).strip())
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
