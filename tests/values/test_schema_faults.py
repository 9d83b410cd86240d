"""schema.* anomaly rows (--values only): schemas that do not parse or are too large, once per
schema, and entries the schema tracker forgot at its bounds.

Expected codes, topics and versions come from the bytes tests/support/schema_fault_capture.py
crafts (what each format's own rules refuse), never from the dissector's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dissector.anomalies import AnomalyCode
from dissector.events import Direction
from dissector.read import read_capture
from dissector.values import Values
from dissector.values import schemas as schemas_module
from dissector.values.faults import MAX_DROP_REPORTS
from tests.support.schema_facts import feed
from tests.support.schema_fault_capture import (
    AVRO_TOPIC,
    DROPPED,
    EXPECTED,
    write_schema_fault_capture,
)
from tests.support.schema_wire import command

SCHEMA_CODES = {
    AnomalyCode.SCHEMA_INVALID,
    AnomalyCode.SCHEMA_TOO_LARGE,
    AnomalyCode.SCHEMA_DROPPED,
}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_schema_fault_capture(tmp_path_factory.mktemp("faults") / "faults.pcap")


def _anomalies(cap: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = cap.arrow["anomalies"].to_pylist()
    return rows


def test_each_faulty_schema_is_one_row(capture: Path) -> None:
    cap = read_capture(capture, values=True)
    rows = [r for r in _anomalies(cap) if r["code"] in SCHEMA_CODES]
    faults = [r for r in rows if r["code"] != AnomalyCode.SCHEMA_DROPPED]
    got = [(r["code"], r["detail"]) for r in faults]
    assert len(got) == len(EXPECTED), got
    for (code, detail), (name, topic, label) in zip(got, EXPECTED, strict=True):
        assert code == getattr(AnomalyCode, name)
        assert detail.startswith(f"topic {topic}: {label}: "), detail
    # each at the broker's answer that versioned it: a frame going to the client
    assert {r["direction"] for r in faults} == {Direction.BROKER_TO_CLIENT.value}
    assert all(r["packet"] > 0 and r["severity"] == "warning" for r in rows)
    assert [r["detail"] for r in rows if r["code"] == AnomalyCode.SCHEMA_DROPPED] == [DROPPED]
    # the bad AVRO schema's messages: no value, and no row of their own
    sent = [m for m in cap.arrow["messages"].to_pylist() if m["topic"] == AVRO_TOPIC]
    assert len(sent) == 2
    assert all(m["value"] is None and m["value_schema"] == "AVRO v5" for m in sent)


def test_without_values_no_schema_rows_and_nothing_else_changes(capture: Path) -> None:
    plain = _anomalies(read_capture(capture))
    assert not [r for r in plain if r["code"] in SCHEMA_CODES]
    with_values = [r for r in _anomalies(read_capture(capture, values=True))]
    assert [r for r in with_values if r["code"] not in SCHEMA_CODES] == plain


def test_forgotten_producers_are_reported_up_to_a_bound(monkeypatch: Any) -> None:
    """MAX_HANDLES + n producers: n forgotten, the first MAX_DROP_REPORTS one row each, then
    one row saying the rest are counted only."""
    monkeypatch.setattr(schemas_module, "MAX_HANDLES", 10)
    values = Values()
    extra = MAX_DROP_REPORTS + 5
    producers = [
        command("PRODUCER", topic="t", producer_id=n, request_id=n) for n in range(10 + extra)
    ]
    rows = feed(values, 1, *producers)
    assert values.schemas.dropped == {"MAX_HANDLES": extra}
    assert [r.code for r in rows] == [AnomalyCode.SCHEMA_DROPPED] * (MAX_DROP_REPORTS + 1)
    assert rows[0].detail == "MAX_HANDLES: topic t: producer 0 of connection 1 forgotten"
    assert rows[-1].detail.endswith(
        "further entries forgotten at this bound are counted, not reported"
    )
