"""The schema tracker's held schemas: bounded in bytes, not in count (issue 42 item 5).

Sizes come from the definitions written here (1 MiB each), measured by tracemalloc around the
feeding, never from the tracker's own accounting.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from dissector.pulsar.wire import COMMAND_TYPES
from dissector.values import SchemaTracker, ValueDecoder
from dissector.values import held as held_module
from tests.support.schema_facts import feed
from tests.support.schema_wire import command, version

P = 1  # the producers' connection

SEND = COMMAND_TYPES["SEND"]
WIDE = 1 << 20  # bytes of each definition (MAX_DEFINITION_BYTES)


def wide_definition(k: int) -> bytes:
    """An Avro record schema of exactly WIDE bytes, distinct per k (its name)."""
    head = json.dumps({"type": "record", "name": f"W{k}", "fields": [], "doc": ""})
    text = head[:-2] + " " * (WIDE - len(head)) + '"}'
    assert len(text) == WIDE
    return text.encode()


def produce(t: SchemaTracker, k: int, definition: bytes) -> None:
    topic = f"persistent://public/default/wide-{k}"
    feed(
        t,
        P,
        command("PRODUCER", ("AVRO", definition, {}), topic=topic, producer_id=k, request_id=k),
    )
    feed(
        t,
        P,
        command("PRODUCER_SUCCESS", request_id=k, producer_name=f"p{k}", schema_version=version(0)),
    )


def test_the_tracker_holds_a_bounded_number_of_bytes_of_wide_schemas() -> None:
    n = 48  # 48 MiB of distinct definitions, each named by a producer and a topic version
    definitions = [wide_definition(k) for k in range(n)]
    t = SchemaTracker()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k, definition in enumerate(definitions):
            produce(t, k, definition)
        del definitions
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= held_module.MAX_HELD_SCHEMA_BYTES + (2 << 20), held
    kept = held_module.MAX_HELD_SCHEMA_BYTES // (WIDE + held_module.HELD_SCHEMA_OVERHEAD)
    assert held >= (kept - 2) * WIDE  # the newest are still held
    assert t.dropped["MAX_HELD_SCHEMA_BYTES"] == n - kept


def test_one_copy_of_a_schema_named_by_many_producers() -> None:
    definition = wide_definition(0)
    t = SchemaTracker()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(40):  # the same schema in 40 PRODUCER commands
            produce(t, k, bytes(definition))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * WIDE, held
    assert len(t.held) == 1


def _value_error(t: SchemaTracker, k: int) -> tuple[str, str | None]:
    res = t.resolve(P, SEND, k, version(0))
    assert res.schema is not None
    return res.label, ValueDecoder().decode(b"", res.schema).error


def test_a_forgotten_schema_says_so_and_comes_back_when_learnt_again(monkeypatch: Any) -> None:
    monkeypatch.setattr(held_module, "MAX_HELD_SCHEMA_BYTES", 2 * WIDE + 4096)
    drops: list[tuple[str, str]] = []
    t = SchemaTracker(on_drop=lambda bound, what: drops.append((bound, what)))
    definitions = [wide_definition(k) for k in range(3)]
    for k, definition in enumerate(definitions):
        produce(t, k, definition)
    assert drops == [("MAX_HELD_SCHEMA_BYTES", "topic persistent://public/default/wide-0: AVRO v0")]
    label, error = _value_error(t, 0)
    assert label == "AVRO v0"  # the row still names the schema it was written with
    assert error is not None and "forgotten at MAX_HELD_SCHEMA_BYTES" in error
    assert _value_error(t, 2) == ("AVRO v0", None)  # an empty record: {}
    # a new producer carries the same schema again: every map naming it has it back
    feed(
        t,
        P,
        command(
            "PRODUCER",
            ("AVRO", definitions[0], {}),
            topic="persistent://public/default/wide-0",
            producer_id=9,
            request_id=9,
        ),
    )
    assert _value_error(t, 0) == ("AVRO v0", None)
    assert t.versions("persistent://public/default/wide-0")[version(0)].definition == definitions[0]


@pytest.mark.parametrize("used", [True, False])
def test_the_least_recently_used_is_forgotten(monkeypatch: Any, used: bool) -> None:
    monkeypatch.setattr(held_module, "MAX_HELD_SCHEMA_BYTES", 2 * WIDE + 4096)
    t = SchemaTracker()
    produce(t, 0, wide_definition(0))
    produce(t, 1, wide_definition(1))
    if used:
        _value_error(t, 0)  # a message of schema 0: schema 1 is now the least recently used
    produce(t, 2, wide_definition(2))
    forgotten = {k for k in range(3) if _value_error(t, k)[1] is not None}
    assert forgotten == ({1} if used else {0})
