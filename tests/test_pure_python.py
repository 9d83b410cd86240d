"""Both builds of the package: with the compiled core (C, dissector/_core), and pure Python.

- Only dissector/_core holds compiled modules: no other module of the package imports as an
  extension (a stale build of an older layout, such as the mypyc-compiled per-packet modules
  of before issue 39, would shadow its source and run old code); `make install` removes them.
- The pure-Python package passes the core's tests: a copy of the sources without any
  compiled module runs tests/net, tests/flow, tests/pulsar, tests/tables and the pipeline, fuzzing,
  crafted-capture and journeys tests (the rest of the suite runs on the installed build).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE_TESTS = [
    "tests/net",
    "tests/flow",
    "tests/pulsar",
    "tests/tables",
    "tests/test_pipeline.py",
    "tests/test_fuzz_findings.py",
    "tests/test_crafted_captures.py",
    "tests/test_one_truth.py",
    "tests/journeys",
    "tests/test_journeys_crafted.py",
    "tests/test_trace_context_crafted.py",
    "tests/values/test_wiring.py",
]


def test_only_the_c_core_is_compiled() -> None:
    package = ROOT / "dissector"
    stray = [
        str(path.relative_to(ROOT))
        for path in package.rglob("*.so")
        if path.parent != package / "_core"
    ]
    assert not stray, f"extensions that shadow their sources (make install removes them): {stray}"
    for name in ("dissector.pipeline", "dissector.flow.reassembly", "dissector.facts.machine"):
        where = importlib.import_module(name).__file__ or ""
        assert where.endswith(".py"), (name, where)


@pytest.mark.slow  # the core tests again, on a pure-Python copy (~2 min)
def test_the_pure_python_package_passes_the_core_tests(tmp_path: Path) -> None:
    copy = tmp_path / "pure"
    shutil.copytree(ROOT / "dissector", copy / "dissector", ignore=shutil.ignore_patterns("*.so"))
    shutil.copytree(ROOT / "tests", copy / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    for shared in ("pcaps", "proto", "scripts", "fuzz"):  # fuzz: TLS generators tests share
        (copy / shared).symlink_to(ROOT / shared)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [sys.executable, "-c", "import dissector.pipeline as p; print(p.__file__)"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where == str(copy / "dissector" / "pipeline.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CORE_TESTS],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
