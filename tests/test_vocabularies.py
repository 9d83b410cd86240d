"""Closed sets of values are named, not retyped: tables and frontends compare with the enums of
dissector.events (`Outcome.SUCCESS`, `Direction.CLIENT_TO_BROKER`), never with the string.

A retyped value that drifts (a typo, a renamed value) would make a comparison silently false:
a summary that counts no errors, a plot with no produced line. The rows keep the very same
strings (the enums are StrEnums); tests/test_anomalies.py does the same for anomaly codes.
"""

from __future__ import annotations

import ast
import re
from enum import StrEnum
from pathlib import Path

from dissector import events
from dissector.anomalies import Severity
from dissector.events import (
    Checksum,
    CloseReason,
    Direction,
    EntityKind,
    EntityState,
    MessageKind,
    Outcome,
)
from dissector.tables.schema import TABLES

PACKAGE = Path(__file__).resolve().parent.parent / "dissector"
#: Where rows' values are compared: the tables' declarations, every frontend, the pipeline
#: and its per-connection state.
SCANNED = [
    *sorted((PACKAGE / "tables").rglob("*.py")),
    *sorted((PACKAGE / "frontends").rglob("*.py")),
    PACKAGE / "pipeline.py",
    PACKAGE / "conversation" / "connection.py",
    PACKAGE / "conversation" / "records.py",
]
#: Every closed vocabulary: the StrEnums of dissector.events, and the anomalies' severities.
VOCABULARIES: list[type[StrEnum]] = [
    *(
        v
        for v in vars(events).values()
        if isinstance(v, type) and issubclass(v, StrEnum) and v.__module__.startswith("dissector.")
    ),
    Severity,
]
VALUES = {str(member) for enum in VOCABULARIES for member in enum}


def compared_literals(path: Path) -> list[str]:
    """`line: value` for each vocabulary value written as a string and compared (==, !=, in,
    `.isin(...)`), in Python or in Python source held in a string (a column's expression)."""
    in_source = re.compile(r"""(?:==|!=|\bin)\s*\(?\s*["']([a-z_0-9]+)["']""")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        operands: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op in operands:
                if isinstance(op, ast.Tuple | ast.List | ast.Set):
                    operands = [*operands, *op.elts]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "isin":
            operands = list(node.args)
        for op in operands:
            if isinstance(op, ast.Constant) and op.value in VALUES:
                found.append(f"{op.lineno}: {op.value}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{node.lineno}: {v}" for v in in_source.findall(node.value) if v in VALUES]
    return found


def test_the_vocabularies_are_found() -> None:
    assert {Checksum, CloseReason, Direction, EntityKind, EntityState, Outcome} < set(VOCABULARIES)


def test_tables_and_frontends_compare_with_named_values() -> None:
    offences = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in SCANNED
        for hits in [compared_literals(path)]
        if hits
    }
    assert offences == {}, "compare with the enum of dissector.events, not its string"


def test_the_scan_finds_a_compared_value(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        'a = x == "success"\n'
        'b = "unmatched" != x\n'
        'c = x in ("client_to_broker", "other")\n'
        'd = F.col("outcome").isin("error")\n'
        "e = \"sum(1 for e in s if e.kind == 'producer')\"\n"
        'f = x == "not_a_value"\n'
        'g = {"success": 1}\n'
    )
    assert compared_literals(source) == [
        "1: success",
        "2: unmatched",
        "3: client_to_broker",
        "4: error",
        "5: producer",
    ]


def test_columns_describe_their_values_from_the_enums() -> None:
    """A column holding a closed set lists every value of its enum in its description."""
    columns = {
        ("frames", "direction"): Direction,
        ("frames", "checksum"): Checksum,
        ("messages", "direction"): Direction,
        ("messages", "kind"): MessageKind,
        ("anomalies", "direction"): Direction,
        ("anomalies", "severity"): Severity,
        ("conversations", "ended"): CloseReason,
        ("timeline", "outcome"): Outcome,
        ("entities", "kind"): EntityKind,
        ("entities", "state"): EntityState,
    }
    for (table, column), enum in columns.items():
        doc = TABLES[table].describe()[column]
        assert all(member.value in doc for member in enum), (table, column, doc)
