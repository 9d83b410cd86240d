"""Both builds of the package: mypyc-compiled hot modules, and pure Python.

- Where a C compiler is present (and PULSAR_DISSECTOR_PURE is not set), `make install`
  compiles every module setup.py names (HOT): they import as C extensions, built after
  their sources were last changed.
- The pure-Python package passes the core's tests: a copy of the sources without any
  compiled module runs tests/net, tests/flow, tests/pulsar, tests/tables and the pipeline, fuzzing,
  crafted-capture and journeys tests (the rest of the suite runs on the installed build).
"""

from __future__ import annotations

import ast
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


def hot_modules() -> list[str]:
    """The module names of setup.py's HOT list (read from its source, not run)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            if isinstance(target, ast.Name) and target.id == "HOT":
                assert node.value is not None
                paths = ast.literal_eval(node.value)
                return [p.removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no HOT list")


def test_the_hot_modules_are_compiled_where_a_compiler_is() -> None:
    compiled = shutil.which(os.environ.get("CC", "cc")) is not None
    compiled = compiled and os.environ.get("PULSAR_DISSECTOR_PURE") != "1"
    names = hot_modules()
    assert "dissector.pipeline" in names and "dissector.pulsar.framing" in names
    for name in names:
        where = importlib.import_module(name).__file__ or ""
        assert where.endswith(".so") == compiled, (name, where)
        if compiled:  # a module edited since the build would run its old code
            source = ROOT / (name.replace(".", "/") + ".py")
            assert os.path.getmtime(where) >= source.stat().st_mtime, f"{name}: make install"


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
