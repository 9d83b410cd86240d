"""The test tiers (docs/development.md, "Tests in tiers"): `make check` leaves out what needs
real peers, packet capture, Spark, external tools or a long run, and no such test can escape
its marker.

- The markers are registered, and unknown ones refused (--strict-markers).
- A source scan, independent of the automatic marking (tests/support/tiers.py walks code
  objects; this reads tokens): every test whose code, or the code of a function, class or
  fixture of its module (or a conftest) that it names, names a tier's program, peer or
  Spark is collected with that tier's marker.
- The guard: an unmarked test that starts a tier's program or opens a packet socket fails
  before anything starts.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import tokenize
import tomllib
from pathlib import Path

import pytest

from tests.conftest import COLLECTED, TIERS_DUMP
from tests.support import tiers

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

#: tier -> the words (names, or words in a string) in a test's code that need it.
WORDS = {
    "peers": re.compile(r"PulsarLite|run_\w*scenario|capture_scenario|record_tls|pulsar-lite"),
    "apache": re.compile(r"ApacheBroker|apache_broker|run_client|ApacheClient"),
    "capture": re.compile(
        r"require_capture|capture_denied|PacketSocket|AF_PACKET|Live|Tcpdump|tcpdump"
        r"|record_tls|capture_scenario"  # tcpdump records what a real client did
    ),
    "spark": re.compile(r"spark|SparkSession|SparkCluster"),
    "tools": re.compile(
        r"tshark|TSHARK|tcpdump|Tcpdump|mergecap|MERGECAP|chromium|CHROMIUM|MotoS3|moto_server"
        r"|record_tls|capture_scenario|PrometheusServer|PROMETHEUS|require_prometheus"
    ),
}


def test_the_tier_markers_are_registered_and_strict() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    ini = options["ini_options"]
    assert "--strict-markers" in ini["addopts"].split()
    assert [m.split(":")[0] for m in ini["markers"]] == list(tiers.TIERS)


def _code_words(lines: list[str], node: ast.FunctionDef | ast.ClassDef) -> set[str]:
    """The names, and the words of string literals, of a definition (decorators included;
    docstrings, comments and import statements left out)."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    body = node.body
    doc = (
        range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        else range(0)
    )
    text = textwrap.dedent("\n".join(lines[first - 1 : node.end_lineno])) + "\n"
    words: set[str] = set()
    starting, importing = True, False  # import statements name modules, not what is used
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            starting, importing = True, False
            continue
        if tok.type in (tokenize.NL, tokenize.COMMENT):
            continue
        importing = importing or (starting and tok.string in ("import", "from"))
        starting = False
        if importing:
            continue
        if tok.type == tokenize.NAME:
            words.add(tok.string)
        elif tok.type == tokenize.STRING and tok.start[0] + first - 1 not in doc:
            words.update(re.findall(r"[\w-]+", tok.string))
    return words


def _definitions(path: Path) -> dict[str, set[str]]:
    """Top-level function and class name -> its code words, for one module."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    return {
        node.name: _code_words(lines, node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef)
    }


def _reach(name: str, defs: dict[str, set[str]], shared: dict[str, set[str]]) -> set[str]:
    """The words of a test function and of every definition of its module (or a conftest's
    fixture) it names, transitively."""
    words: set[str] = set()
    todo, seen = [name], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        found = defs.get(current, shared.get(current, set()))
        words |= found
        todo += [w for w in found if w in defs or w in shared]
    return words


def _needed_by_source() -> dict[tuple[str, str], set[str]]:
    """(module path, test function) -> the tiers its code's words need."""
    shared: dict[str, set[str]] = {}
    for conftest in sorted(TESTS.rglob("conftest.py")):
        shared |= _definitions(conftest)
    needed = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        defs = _definitions(path)
        for name in defs:
            if name.startswith("test_"):
                words = _reach(name, defs, shared)
                tiers_ = {t for t, rx in WORDS.items() if any(rx.fullmatch(w) for w in words)}
                needed[str(path.relative_to(ROOT)), name] = tiers_
    return needed


@pytest.fixture(scope="module")
def collected(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[str]]:
    """Every test of the suite -> its tier markers: this session's collection when it holds
    every test module (make check, make test), else a collection of its own."""
    mine = request.config.stash.get(COLLECTED, {})
    modules = {str(p.relative_to(ROOT)) for p in TESTS.rglob("test_*.py")}
    if modules <= {nodeid.partition("::")[0] for nodeid in mine}:
        return mine
    dump = tmp_path_factory.mktemp("tiers") / "tiers.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env={**os.environ, TIERS_DUMP: str(dump)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    marked: dict[str, list[str]] = json.loads(dump.read_text())
    return marked


def test_every_test_naming_a_tier_carries_its_marker(collected: dict[str, list[str]]) -> None:
    needed = _needed_by_source()
    assert {t for found in needed.values() for t in found} == set(WORDS)  # the scan sees
    missing = []
    for nodeid, markers in collected.items():
        path, _, rest = nodeid.partition("::")
        function = rest.split("::")[-1].split("[")[0]
        for tier in sorted(needed.get((path, function), set()) - set(markers)):
            missing.append(f"{nodeid}: {tier}")
    assert not missing, "\n".join(missing)


def test_this_module_runs_in_make_check(collected: dict[str, list[str]]) -> None:
    mine = {k: v for k, v in collected.items() if k.startswith("tests/test_tiers.py::")}
    assert mine and not any(mine.values()), mine


def test_the_guard_stops_an_unmarked_test_before_it_starts_anything() -> None:
    # Programs, tiers and the socket family are named through tiers.py, not written here:
    # this test starts nothing (the guard refuses first, or the path does not exist) and
    # needs no tier itself.
    for tier, programs in tiers.PROGRAMS.items():
        for program in programs:
            with tiers.running([]), pytest.raises(tiers.TierError, match=tier):
                subprocess.run([f"/nonexistent/{program}", "--version"], check=False)
            with tiers.running(tiers.TIERS), pytest.raises(FileNotFoundError):  # let through
                subprocess.run([f"/nonexistent/{program}", "--version"], check=False)
    for tier, names in tiers.NAMES.items():
        family = socket.AddressFamily[names[0]]
        with tiers.running([]), pytest.raises(tiers.TierError, match=tier):
            socket.socket(family, socket.SOCK_RAW)
    with tiers.running([]):
        subprocess.run([sys.executable, "-c", "pass"], check=True)  # anything else runs
