"""The front check: every output of every bundled and crafted capture, to prove a refactor
changes none of them (issue 38: outputs unchanged, byte for byte).

Input:  `dump DIR`: writes into DIR, per capture of the corpus (tests/support/truth_scenes.py:
        every bundled sample and crafted capture, the crafted ones made afresh), every table
        as JSON lines (`read -o`, `--values --fields`), the text views (`read`, `read -V`),
        `summary` (text and JSON) and `diagnose` (text and JSON).
        `compare OLD NEW`: the two dumps side by side.
Output: `dump`: the files, one per (capture, view); `compare`: one line per file that differs
        or is missing on one side, and exit 1 when any does (0 when all are equal).
Rule:   each view is the command a user runs (`python -m dissector.frontends.cli` in a process
        of its own, with this interpreter: whatever dissector it imports is the one checked),
        its stdout and exit code kept; every capture is in DIR/captures (the crafted ones
        written there, the bundled ones copied), so that the paths inside the outputs are the
        same in both dumps (relative to DIR). Two workers run the commands.
Usage:  python -m tests.support.front dump /tmp/front-old   (at the old commit)
        python -m tests.support.front dump /tmp/front-new   (at the new one)
        python -m tests.support.front compare /tmp/front-old /tmp/front-new
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.truth_scenes import corpus

#: view name -> the command's arguments after the capture's path (OUT: the tables' folder).
VIEWS: dict[str, list[str]] = {
    "read.txt": ["read"],
    "read-V.txt": ["read", "-V"],
    "summary.txt": ["summary"],
    "summary.json": ["summary", "--format", "json"],
    "diagnose.txt": ["diagnose"],
    "diagnose.json": ["diagnose", "--format", "json"],
    "tables": ["read", "--values", "--fields", "--format", "jsonl", "-o", "OUT"],
}


def _run(cwd: Path, argv: list[str]) -> tuple[int, bytes]:
    done = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", *argv],
        cwd=cwd,
        capture_output=True,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )
    return done.returncode, done.stdout


def _one(root: Path, name: str, capture: str, view: str, args: list[str]) -> None:
    out = root / "out" / name.replace("/", "_").replace(":", "_")
    out.mkdir(parents=True, exist_ok=True)
    command, *rest = args
    if "OUT" in rest:
        tables = out / "tables"
        rest = [str(tables.relative_to(root)) if a == "OUT" else a for a in rest]
        code, stdout = _run(root, [command, capture, *rest])
    else:
        code, stdout = _run(root, [command, capture, *rest])
        (out / view).write_bytes(stdout)
    (out / f"{view}.exit").write_text(f"{code}\n")


def dump(root: Path) -> None:
    """Write every view of every capture of the corpus under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "captures").mkdir(exist_ok=True)
    made = corpus(root / "captures")
    jobs = []
    for name, path in sorted(made.items()):
        if not path.is_relative_to(root):  # a bundled sample: copied, so that both dumps
            path = Path(shutil.copy(path, root / "captures" / path.name))  # name one path
        capture = os.path.relpath(path, root)
        jobs += [(root, name, capture, view, args) for view, args in VIEWS.items()]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(_one, *job) for job in jobs]:
            done.result()


def _files(root: Path) -> dict[str, bytes]:
    base = root / "out"
    return {str(p.relative_to(base)): p.read_bytes() for p in base.rglob("*") if p.is_file()}


def compare(old: Path, new: Path) -> int:
    """Print each output that differs; 1 when any does, else 0."""
    a, b = _files(old), _files(new)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    for key in differ:
        side = "only old" if key not in b else "only new" if key not in a else "differs"
        print(f"{side}: {key}")
    print(f"{len(a.keys() | b.keys())} outputs, {len(differ)} differ")
    return 1 if differ else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "dump":
        dump(Path(argv[1]).resolve())
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__.split("Usage:")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
