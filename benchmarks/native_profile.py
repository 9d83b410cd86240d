"""Where the time goes in the compiled build: py-spy's native stacks, summarised per stage.

Input: a py-spy `record --native --format raw` output (one line per distinct stack: frames
from the root to the leaf separated by ';', then the sample count), and the package's
compiled modules (the mypyc extensions beside their sources).
Output: per stage, samples and percent; the top functions by samples spent in them or in
the helpers they call.
Rules: a sample counts for the innermost frame that belongs to a stage: a Python frame by
its file (benchmarks.stages' rules), a mypyc-compiled function by its C symbol
(CPyDef_<module>___<function>, CPyPy_ for its Python entry) mapped to its module's stage.
Interpreter, C library, protobuf and Arrow frames count for the stage that called them. A
sample under importlib is startup. cProfile cannot see inside compiled modules; this can.
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
_NATIVE = re.compile(r"^CPy(?:Def|Py)_(?P<symbol>\w+)$")


def executable() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def compiled_modules(package: Path = ROOT / "dissector") -> dict[str, str]:
    """C symbol prefix ('framing___', 'pulsar___framing___', ...) -> stage of the module."""
    out: dict[str, str] = {}
    for ext in package.rglob("*.so"):
        source = ext.with_name(ext.name.split(".")[0] + ".py")
        parts = source.relative_to(package.parent).with_suffix("").parts
        stage = stage_of((str(source), 0, "f")) or "other"
        for n in range(1, len(parts) + 1):
            out["___".join(parts[-n:]) + "___"] = stage
    return out


class _Classifier:
    def __init__(self, modules: dict[str, str]) -> None:
        self.prefixes = sorted(modules.items(), key=lambda kv: -len(kv[0]))

    def frame(self, frame: str) -> tuple[str, str] | None:
        """(stage, function name) of a frame that belongs to a stage, else None."""
        m = _FRAME.match(frame)
        if m is None:
            return None
        name, file = m["name"], m["file"]
        native = _NATIVE.match(name)
        if native:
            symbol = native["symbol"]
            for prefix, module_stage in self.prefixes:
                if symbol.startswith(prefix):
                    module = prefix.rstrip("_").split("___")[-1]
                    function = symbol[len(prefix) :].replace("___", ".")
                    return module_stage, f"{module}.{function} [compiled]"
            return None
        if ".so" in file or file.endswith(".c") or file.endswith(".h"):
            return None  # a library's native code: it counts for its Python caller
        stage = stage_of((file, 0, name))
        return None if stage is None else (stage, f"{file}({name})")


def summarize(
    raw_file: str, top: int = 15, modules: dict[str, str] | None = None
) -> dict[str, Any]:
    classify = _Classifier(compiled_modules() if modules is None else modules)
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
                found = classify.frame(frame)
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
