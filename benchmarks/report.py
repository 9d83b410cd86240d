"""Benchmark results: printed, and saved as reports/bench_<name>.json.

Input: a benchmark name and its result dict. Output: the JSON on stdout and in reports/.
Rule: every benchmark reports the machine facts next to its numbers.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def save(name: str, result: dict[str, object]) -> None:
    result = {
        **result,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    out = ROOT / "reports" / f"bench_{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text + "\n")
