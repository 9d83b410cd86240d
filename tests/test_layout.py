"""The layout's rules, read from the source's own import statements.

Data flows one way: FLOW below writes its order once, as docs/architecture.md draws it
("Data flow": `test_the_drawn_data_flow_is_the_tested_one` holds the two together):
the vocabulary at the bottom (errors, anomalies, events, findings), then the compiled
stages (`_core`), capture -> net -> flow -> tls -> pulsar -> conversation -> pipeline ->
the analyses (values, journeys, diagnose) -> tables -> metrics -> read -> frontends, and the public
faces (`dissector`, `dissector.spark`) on top.
- Every module of the package has its place in FLOW, and imports only its own package and
  the packages of the levels before its own: no import runs back up the flow, and packages of
  one level do not import each other. Imports inside functions and under TYPE_CHECKING count
  (a type named is knowledge of that module too). The few that run back up today are listed,
  each with its reason, in UPWARD: that list may only shrink (an entry no longer true fails).
- `net/`, `flow/`, `tls/` and `pulsar/` are sans-IO: none imports a later stage, pyarrow,
  pandas, scapy, pyspark, select or threads; nor do `conversation/` (per connection),
  `pipeline`, `journeys/`, `values/` and `diagnose/` (they may read `pulsar/`'s wire schema).
  (TLS is a stream-to-stream stage: the pipeline hands it TCP bytes and hands its plaintext
  on to Pulsar framing; the stages meet only in the pipeline and its per-connection state,
  `conversation`.)
- `capture/` (bytes on disk or on the wire -> packets) imports no later stage; of pyarrow,
  only its filesystems (object storage, HDFS), in the modules that locate and list files.
- `tables/` never reaches into the TLS stage; the live front end (`frontends/live/`) and the
  fleet job (`frontends/fleet/`) do not import each other, and live needs no Spark.
- No import cycles between the package's modules (imports inside functions included).
- Every module has a docstring on top.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dissector"

#: The vocabulary every stage speaks, at the bottom of the flow.
VOCABULARY: tuple[tuple[str, ...], ...] = (
    ("dissector.errors", "dissector.anomalies", "dissector._lazy", "dissector._pb"),
    ("dissector.events", "dissector.findings"),
)
#: The stages, in the order data flows through them (one level a line of the drawing in
#: docs/architecture.md); packages of one level are peers and do not import each other.
STAGES: tuple[tuple[str, ...], ...] = (
    ("dissector._core",),  # the compiled walk and frame scan the readers and framing call
    ("dissector.capture",),
    ("dissector.net",),
    ("dissector.flow",),
    ("dissector.tls",),
    ("dissector.keylog_files",),  # the TLS secrets a read is given, read from files
    ("dissector.pulsar",),
    ("dissector.facts",),  # the protocol facts: one state machine per connection
    ("dissector.conversation",),
    ("dissector.pipeline",),
    ("dissector.values", "dissector.journeys", "dissector.diagnose"),
    ("dissector.tables",),
    ("dissector.metrics",),  # counters, gauges, histograms from events and table batches
    ("dissector.read",),
    ("dissector.frontends",),
)
#: The public import paths (docs/python.md), on top of everything.
FACES: tuple[tuple[str, ...], ...] = (("dissector.spark", "dissector"),)
FLOW = (*VOCABULARY, *STAGES, *FACES)

#: Imports that run back up the flow today: (importer, imported) -> why. Only shrinks.
UPWARD: dict[tuple[str, str], str] = {
    ("dissector._core", "dissector.capture.pcap"): "type names only (TYPE_CHECKING)",
    ("dissector._core", "dissector.capture.pcapng"): "type names only (TYPE_CHECKING)",
    ("dissector.pulsar.messages", "dissector.values.cells"): (
        "type name only (TYPE_CHECKING): the values stage is handed in when asked for"
    ),
}

IO_LIBRARIES = (
    "pyarrow",
    "pandas",
    "scapy",
    "pyspark",
    "select",  # (socket is allowed: net and preamble format addresses with inet_ntop)
    "threading",
    "subprocess",
    "multiprocessing",
)
LATER_THAN_STAGES = (
    "dissector.tables",
    "dissector.frontends",
    "dissector.pipeline",
    "dissector.conversation",
    "dissector.read",
    "dissector.capture",
)
SANS_IO_FORBIDDEN = (*IO_LIBRARIES, *LATER_THAN_STAGES)
RULES: dict[str, tuple[str, ...]] = {
    "dissector.net": (*SANS_IO_FORBIDDEN, "dissector.flow", "dissector.tls", "dissector.pulsar"),
    "dissector.flow": (*SANS_IO_FORBIDDEN, "dissector.pulsar", "dissector.tls"),
    "dissector.tls": (*SANS_IO_FORBIDDEN, "dissector.pulsar", "dissector.flow", "dissector.net"),
    "dissector.pulsar": (*SANS_IO_FORBIDDEN, "dissector.flow", "dissector.tls", "dissector.net"),
    # the per-connection state and the wiring: sans-IO, whatever feeds them packets
    "dissector.conversation": (*IO_LIBRARIES, "dissector.pipeline", "dissector.tables",
                               "dissector.frontends", "dissector.read", "dissector.capture"),
    "dissector.pipeline": (*IO_LIBRARIES, "dissector.tables", "dissector.frontends",
                           "dissector.read", "dissector.capture"),
    # the joiner works on the pipeline's events, as the diagnosis rules do: sans-IO
    "dissector.journeys": (*SANS_IO_FORBIDDEN, "dissector.flow", "dissector.tls", "dissector.net"),
    "dissector.diagnose": (*SANS_IO_FORBIDDEN, "dissector.flow", "dissector.tls", "dissector.net"),
    # the protocol facts: one state machine per connection, on decoded frames: sans-IO
    "dissector.facts": (
        *SANS_IO_FORBIDDEN,
        "dissector.flow",
        "dissector.tls",
        "dissector.net",
        "dissector.diagnose",
    ),
    # payload values by the capture's schemas: sans-IO (may read `pulsar/`'s wire schema)
    "dissector.values": (
        *SANS_IO_FORBIDDEN,
        "dissector.flow",
        "dissector.tls",
        "dissector.net",
        "dissector.journeys",
    ),
    "dissector.capture": (  # pyarrow: its filesystems only (test_capture_uses_pyarrow_fs_only)
        "pandas",
        "pyspark",
        "dissector.net",
        "dissector.flow",
        "dissector.tls",
        "dissector.pulsar",
        "dissector.pipeline",
        "dissector.tables",
        "dissector.frontends",
        "dissector.read",
    ),
    # tables are built from the pipeline's records: they never reach into the TLS stage
    "dissector.tables": ("dissector.frontends", "dissector.read", "dissector.tls"),
    "dissector.read": ("dissector.frontends",),
    "dissector.frontends.live": ("pyspark", "dissector.frontends.fleet", "dissector.spark"),
    "dissector.frontends.fleet": ("dissector.frontends.live",),
    "dissector.events": (
        "dissector.capture",
        "dissector.net",
        "dissector.flow",
        "dissector.tls",
        "dissector.pulsar",
        "pyarrow",
    ),
    "dissector.anomalies": ("dissector.",),
    "dissector.errors": ("dissector.",),
}  # fmt: skip


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (generated bindings left out)."""
    out: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if "_pb" in rel.parts:
            continue
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def imports(path: Path) -> Iterator[str]:
    """Every module name an import statement of the file names (nested ones included)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def imported_modules(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules the file's import statements name, one per import: in
    `from a import b`, a.b when it is a module, else a (`b` is a name defined in a)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("dissector"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not (node.module + ".").startswith("dissector."):
                continue
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                yield child if child in known else node.module


def internal_edges() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a `from pkg import mod` counts as mod)."""
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = {t for t in imports(path) if t in known and t != name}
        edges[name] = targets
    return edges


def matches(name: str, prefix: str) -> bool:
    return name == prefix.rstrip(".") or name.startswith(prefix.rstrip(".") + ".")


def place(name: str) -> tuple[int, str] | None:
    """(level in FLOW, package) of a module: the package's own `dissector` is its
    `__init__` alone, not every module under it."""
    for level, units in enumerate(FLOW):
        for unit in units:
            if name == unit or (unit != "dissector" and matches(name, unit)):
                return level, unit
    return None


def test_every_module_has_its_place_in_the_flow() -> None:
    unplaced = [name for name in modules() if place(name) is None]
    assert not unplaced, f"add their package to FLOW (and to the drawing): {unplaced}"


def test_no_import_runs_back_up_the_flow() -> None:
    known = modules()
    found: dict[tuple[str, str], str] = {}
    for name, path in known.items():
        where = place(name)
        assert where is not None, name
        for target in set(imported_modules(path, known)):
            there = place(target)
            assert there is not None, (name, target)
            if there[1] == where[1] or there[0] < where[0]:
                continue
            found[name, target] = "peer" if there[0] == where[0] else "upward"
    new = sorted(
        f"{a} imports {b} ({how})" for (a, b), how in found.items() if (a, b) not in UPWARD
    )
    assert not new, "\n".join(new)
    stale = sorted(f"{a} -> {b}" for a, b in UPWARD if (a, b) not in found)
    assert not stale, f"no longer true, take them out of UPWARD: {stale}"


def drawn_levels() -> list[set[str]]:
    """The packages docs/architecture.md's data flow names, a set per line of its drawing
    (what is in parentheses: `pkg/` or `module.py`)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Data flow", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    levels = []
    for line in block.splitlines():
        names = set()
        for inside in re.findall(r"\(([^)]*)\)", line):
            for stem, _ in re.findall(r"(?<![\w/.])(_?[a-z][a-z_]*)(/|\.py)(?![\w])", inside):
                names.add(f"dissector.{stem}")
        if names:
            levels.append(names)
    return levels


def test_the_drawn_data_flow_is_the_tested_one() -> None:
    assert drawn_levels() == [set(level) for level in STAGES]


def test_capture_uses_pyarrow_fs_only() -> None:
    users = {}
    for name, path in modules().items():
        if matches(name, "dissector.capture"):
            found = {t for t in imports(path) if matches(t, "pyarrow")}
            if found:
                users[name] = found
    assert users == {
        "dissector.capture.listing": {"pyarrow.fs"},
        "dissector.capture.locations": {"pyarrow.fs"},
    }


@pytest.mark.parametrize("owner", sorted(RULES))
def test_stages_import_only_what_comes_before_them(owner: str) -> None:
    broken = []
    for name, path in modules().items():
        if not matches(name, owner):
            continue
        for target in set(imports(path)):
            for banned in RULES[owner]:
                if banned.endswith("."):
                    if target.startswith(banned) and not matches(target, owner):
                        broken.append(f"{name} imports {target}")
                elif matches(target, banned):
                    broken.append(f"{name} imports {target}")
    assert not broken, "\n".join(sorted(broken))


def test_no_import_cycles() -> None:
    edges = internal_edges()
    # Package __init__ modules re-export their children: an edge from a child back to its
    # own package is how Python imports it anyway, not a cycle of ours.
    for name in edges:
        edges[name] = {t for t in edges[name] if not name.startswith(t + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_rules_see_real_imports() -> None:
    """The checks above read what they should: known edges are found."""
    edges = internal_edges()
    known = modules()
    assert "dissector.flow.tcp" in edges["dissector.pipeline"]
    assert "dissector.net.headers" in edges["dissector.pipeline"]
    assert "dissector.pulsar.framing" in edges["dissector.pipeline"]
    assert "dissector.tls.session" in edges["dissector.conversation.connection"]
    assert "dissector.tls.keyring" in edges["dissector.tls.session"]
    assert "dissector.tables.schema" in edges["dissector.read.tables"]
    assert "dissector.read.driver" in edges["dissector.read.runs"]
    assert "pyarrow" in set(imports(PACKAGE / "tables" / "schema.py"))
    # `from dissector import _core` names the module, not the package's __init__
    assert "dissector._core" in set(imported_modules(PACKAGE / "pulsar" / "framing.py", known))
    assert place("dissector") == (len(FLOW) - 1, "dissector")
    assert place("dissector.net.headers") == (len(VOCABULARY) + 2, "dissector.net")


def test_the_flow_test_finds_an_upward_import(tmp_path: Path) -> None:
    """A flow module importing a table module is found (the check is not vacuous)."""
    probe = tmp_path / "probe.py"
    probe.write_text('"""Probe."""\nfrom dissector.tables.schema import TABLES\n')
    targets = set(imported_modules(probe, modules()))
    assert targets == {"dissector.tables.schema"}
    flow, tables = place("dissector.flow.tcp"), place("dissector.tables.schema")
    assert flow is not None and tables is not None and tables[0] > flow[0]


def test_every_module_says_what_it_does() -> None:
    missing = [
        name
        for name, path in modules().items()
        if path.stat().st_size and ast.get_docstring(ast.parse(path.read_text())) is None
    ]
    assert not missing, missing


def test_records_are_named_through_dissector_events() -> None:
    """The records' modules (dissector/events/) are where each is defined; every other
    module names them as dissector.events.X, so a record can move between those modules
    without an importer changing (dissector/events/__init__.py's rule)."""
    known = modules()
    inside = [name for name in known if name.startswith("dissector.events.")]
    assert inside, "dissector/events/ is a package of modules"
    reaching = sorted(
        f"{name} imports {target}"
        for name, path in known.items()
        if not name.startswith("dissector.events")
        for target in imported_modules(path, known)
        if target.startswith("dissector.events.")
    )
    assert not reaching, "\n".join(reaching)
