"""The layout's rules, read from the source's own import statements.

Data flows one way: capture -> flow -> tls -> pulsar -> pipeline -> tables -> read -> frontends.
- `flow/`, `tls/` and `pulsar/` are sans-IO: none imports another of the three, `tables`,
  `frontends`, the pipeline or `read`, nor pyarrow, pandas, scapy, pyspark, select or
  threads; nor do `journeys/` and `values/` (they may read `pulsar/`'s wire schema). (TLS is a
  stream-to-stream stage: the pipeline hands it TCP bytes and hands its
  plaintext on to Pulsar framing; the stages meet only in the pipeline and its
  per-connection state, `connection`.)
- `capture/` (bytes on disk or on the wire -> packets) imports no later stage; of pyarrow,
  only its filesystems (object storage, HDFS), in the modules that locate and list files.
- `tables/` imports no frontend nor `read/`; `read/` (the run driver) imports no frontend;
  `events`, `anomalies` and `errors` import no stage.
- No import cycles between the package's modules (imports inside functions included).
- Every module has a docstring on top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dissector"

SANS_IO_FORBIDDEN = (
    "pyarrow",
    "pandas",
    "scapy",
    "pyspark",
    "select",  # (socket is allowed: net and preamble format addresses with inet_ntop)
    "threading",
    "subprocess",
    "multiprocessing",
    "dissector.tables",
    "dissector.frontends",
    "dissector.pipeline",
    "dissector.conversation.connection",
    "dissector.conversation.records",
    "dissector.read",
    "dissector.capture",
)
RULES: dict[str, tuple[str, ...]] = {
    "dissector.flow": (*SANS_IO_FORBIDDEN, "dissector.pulsar", "dissector.tls"),
    "dissector.tls": (*SANS_IO_FORBIDDEN, "dissector.pulsar", "dissector.flow"),
    "dissector.pulsar": (*SANS_IO_FORBIDDEN, "dissector.flow", "dissector.tls"),
    # the joiner works on the pipeline's events, as the diagnosis rules do: sans-IO
    "dissector.journeys": (*SANS_IO_FORBIDDEN, "dissector.flow", "dissector.tls"),
    # payload values by the capture's schemas: sans-IO (may read `pulsar/`'s wire schema)
    "dissector.values": (
        *SANS_IO_FORBIDDEN,
        "dissector.flow",
        "dissector.tls",
        "dissector.journeys",
    ),
    "dissector.capture": (  # pyarrow: its filesystems only (test_capture_uses_pyarrow_fs_only)
        "pandas",
        "pyspark",
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
    "dissector.events": (
        "dissector.capture",
        "dissector.flow",
        "dissector.tls",
        "dissector.pulsar",
        "pyarrow",
    ),
    "dissector.anomalies": ("dissector.",),
    "dissector.errors": ("dissector.",),
}


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
    assert "dissector.flow.tcp" in edges["dissector.pipeline"]
    assert "dissector.pulsar.framing" in edges["dissector.pipeline"]
    assert "dissector.tls.session" in edges["dissector.conversation.connection"]
    assert "dissector.tls.keyring" in edges["dissector.tls.session"]
    assert "dissector.tables.schema" in edges["dissector.read.tables"]
    assert "dissector.read.driver" in edges["dissector.read.runs"]
    assert "pyarrow" in set(imports(PACKAGE / "tables" / "schema.py"))


def test_every_module_says_what_it_does() -> None:
    missing = [
        name
        for name, path in modules().items()
        if path.stat().st_size and ast.get_docstring(ast.parse(path.read_text())) is None
    ]
    assert not missing, missing
