"""A name means one thing in the package (issue 26: two `Summary` classes, two `Event`s, three
`TABLES`, and `conversations` for a table, a module of table declarations and the pairing
state).

Read from the source: each class or type alias (a CapWords name bound at a module's top) is
defined in one module; `TABLES` is the table registry and nothing else; `conversations` is a
table, not a module. Public names that were renamed keep working.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from dissector.events import CloseReason, ConnectionInfo, Conversation, DirectionStats, FlowKey
from dissector.tables.schema import TABLES

PACKAGE = Path(__file__).resolve().parent.parent / "dissector"
#: Names allowed in two modules (none left).
LEFT: set[str] = set()


def top_level_names() -> dict[str, list[str]]:
    """Name -> modules binding it at their top (classes, aliases, constants)."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_pb" in path.parts:
            continue
        module = str(path.relative_to(PACKAGE.parent))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(module)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        where[t.id].append(module)
    return where


def is_type_name(name: str) -> bool:
    return name[:1].isupper() and not name.isupper() and "_" not in name


def test_each_class_or_type_alias_is_defined_once() -> None:
    twice = {
        name: modules
        for name, modules in top_level_names().items()
        if is_type_name(name) and len(modules) > 1 and name not in LEFT
    }
    assert twice == {}


def test_tables_is_the_registry_only() -> None:
    assert top_level_names()["TABLES"] == ["dissector/tables/schema.py"]


def test_conversations_is_a_table_not_a_module() -> None:
    """`tables/conversations.py` declared the timeline and entities too, `pulsar/conversations.py`
    made no table at all (it pairs requests with responses): they are `tables/per_connection.py`
    and `pulsar/pairing.py` (and `tables/frames.py`, `tables/per_frame.py`)."""
    assert "conversations" in TABLES
    stems = {p.stem for p in PACKAGE.rglob("*.py") if "_pb" not in p.parts}
    assert stems & {"conversations", "frames", "timeline"} == set()


def test_renamed_public_names_still_work() -> None:
    """Conversation.summary is Conversation.info by its former name."""
    info = ConnectionInfo(client_version="v")
    stats = DirectionStats(
        packets=0,
        wire_bytes=0,
        stream_bytes=0,
        preamble_bytes=0,
        frames=0,
        frame_bytes=0,
        skipped_bytes=0,
        gap_bytes=0,
    )
    c = Conversation(
        conn_id=1,
        key=FlowKey("10.0.0.1", 1, "10.0.0.2", 6650),
        start_ts=0,
        end_ts=0,
        first_packet=1,
        last_packet=1,
        ended=CloseReason.FIN,
        syn_seen=True,
        encrypted=False,
        proxied_client=None,
        c2b=stats,
        b2c=stats,
        info=info,
        anomalies=0,
    )
    assert c.summary is c.info is info
