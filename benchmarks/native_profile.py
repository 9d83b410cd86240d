"""Where the time goes in the compiled build: py-spy's native stacks, summarised per stage.

Input: a py-spy `record --native --format raw` output (one line per distinct stack: frames
from the root to the leaf separated by ';', then the sample count).
Output: per stage, samples and percent; the top functions by samples spent in them or in
the helpers they call.
Rules: a sample counts for the innermost frame that belongs to a stage: a Python frame by
its file (benchmarks.stages' rules), a frame of the compiled core by its C file
(dissector/_core/*.c: the stage it stands in for, `CORE_STAGES`). Interpreter, C library,
protobuf and Arrow frames count for the stage that called them. A sample under importlib is
startup. cProfile cannot see inside the compiled core; this can.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.stages import STAGES, stage_of

ROOT = Path(__file__).resolve().parent.parent
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def executable() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


#: The compiled core's C files -> the stage each stands in for.
CORE_STAGES = {
    "walk.c": "capture",
    "_walkmodule.c": "capture",
    "recent.c": "flow",
    "_recentmodule.c": "flow",
    "frames.c": "pulsar",
    "pbscan.c": "pulsar",
    "crc32c.c": "pulsar",
    "_framesmodule.c": "pulsar",
}


def classify(frame: str) -> tuple[str, str] | None:
    """(stage, function name) of a frame that belongs to a stage, else None."""
    m = _FRAME.match(frame)
    if m is None:
        return None
    name, file = m["name"], m["file"]
    if "dissector/_core/" in file:
        core = CORE_STAGES.get(file.rsplit("/", 1)[-1])
        return None if core is None else (core, f"{name} [C]")
    if ".so" in file or file.endswith(".c") or file.endswith(".h"):
        return None  # a library's native code: it counts for its Python caller
    stage = stage_of((file, 0, name))
    return None if stage is None else (stage, f"{file}({name})")


def summarize(raw_file: str, top: int = 15) -> dict[str, Any]:
    stages: Counter[str] = Counter()
    functions: Counter[tuple[str, str]] = Counter()
    with open(raw_file) as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            if any("<frozen importlib" in f for f in frames):
                stages["startup"] += n
                functions[("startup", "importing modules")] += n
                continue
            found = None
            for frame in reversed(frames):
                found = classify(frame)
                if found is not None:
                    break
            stage, function = found or ("other", "(no Python frame: interpreter, library threads)")
            stages[stage] += n
            functions[(stage, function)] += n
    total = sum(stages.values()) or 1
    return {
        "samples": total,
        "stages": [
            {"stage": s, "samples": stages[s], "percent": 100 * stages[s] / total} for s in STAGES
        ],
        "top": [
            {"function": f, "stage": s, "samples": n, "percent": 100 * n / total}
            for (s, f), n in functions.most_common(top)
        ],
    }
