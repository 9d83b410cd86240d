"""schema.incompatible on crafted captures: a PRODUCER, SUBSCRIBE or GET_OR_CREATE_SCHEMA
refused with IncompatibleSchema, one row per (connection, topic) counting the refusals; with
values asked for, what differs between the schema offered and the topic's.

The scenes: a first producer's AVRO schema {id:long} accepted as version 0 (PRODUCER_SUCCESS
with schema_version 0), then a second producer offering AVRO {id:int, name:string} refused
twice with ServerError 18 (IncompatibleSchema, proto/pulsar_api.proto). The expected rows
follow from that: the fields each schema was written with, the refusals sent, the ERROR
packets; never from the dissector's output. Near misses: the same PRODUCER accepted; the
same PRODUCER refused with another error (ServiceNotReady).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dissector.findings import FindingCode as F
from dissector.read import read_capture
from tests.support.crafted import B2C, C2B, Conn, Msg, msg
from tests.support.scenes import TOPIC, Scene, findings

INCOMPATIBLE, NOT_READY = 18, 6  # ServerError.IncompatibleSchema, ServiceNotReady
AVRO, JSON_TYPE = 4, 2  # Schema.Type
MESSAGE = "org.apache.pulsar.broker.service.schema.exceptions.IncompatibleSchemaException"
V0 = (0).to_bytes(8, "big")
USER_OLD = {"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}]}
USER_NEW = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}],
}


def _schema(kind: int, name: str, definition: dict[str, Any] | None = None) -> dict[str, Any]:
    data = b"" if definition is None else json.dumps(definition).encode()
    return {"name": name, "schema_data": data, "type": kind}


def _producer(pid: int, name: str, schema: dict[str, Any] | None, topic: str = TOPIC) -> Msg:
    extra: dict[str, Any] = {} if schema is None else {"schema": schema}
    return msg(
        C2B, "PRODUCER", topic=topic, producer_id=pid, request_id=pid, producer_name=name, **extra
    )


def _error(rid: int, code: int = INCOMPATIBLE, message: str = MESSAGE) -> Msg:
    return msg(B2C, "ERROR", request_id=rid, error=code, message=message)


def _values_findings(path: Path) -> list[dict[str, Any]]:
    table = read_capture(path, tables=["findings"], values=True).arrow["findings"]
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _scene(*, error: int = INCOMPATIBLE, accepted: bool = False) -> tuple[Scene, list[Msg], Msg]:
    """Producer 1 (AVRO {id:long}) accepted as version 0; producer 2 (AVRO {id:int,
    name:string}) asked twice and answered `error` (accepted: answered PRODUCER_SUCCESS
    instead). Returns the scene, the second producer's answers and the first's success."""
    s = Scene()
    s.open()
    s.at(1.0, _producer(1, "old", _schema(AVRO, "User", USER_OLD)))
    success = msg(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="old", schema_version=V0)
    s.at(1.1, success)
    answers = []
    for i, t in enumerate((2.0, 3.0)):
        rid = 2 + i
        s.at(t, _producer(rid, "new", _schema(AVRO, "User", USER_NEW)))
        if accepted:
            answer = msg(B2C, "PRODUCER_SUCCESS", request_id=rid, producer_name="new")
        else:
            answer = _error(rid, error)
        s.at(t + 0.1, answer)
        answers.append(answer)
        if accepted:
            break
    s.close(5.0)
    return s, answers, success


def test_incompatible_schema_refusals_are_one_row_with_their_count(tmp_path: Path) -> None:
    s, errors, _ = _scene()
    rows = findings(s.write(tmp_path / "c.pcap"))
    assert [(r["code"], r["topic"], r["count"], r["value"], r["unit"]) for r in rows] == [
        (F.SCHEMA_INCOMPATIBLE, TOPIC, 2, 2.0, "refusals")
    ]
    (row,) = rows
    assert row["evidence"] == [s.packet(e) for e in errors]
    assert row["entity"] == "producer 2 (new), producer 3 (new)"
    assert row["severity"] == "error"
    summary = row["summary"]
    # without values: the offered schema's type and name only, the topic's not compared
    assert 'PRODUCER refused with IncompatibleSchema (2 times): offered AVRO "User";' in summary
    assert "{" not in summary and "not compared" in summary
    assert MESSAGE in summary


def test_with_values_the_row_says_what_differs_from_the_topics_schema(tmp_path: Path) -> None:
    s, errors, success = _scene()
    rows = _values_findings(s.write(tmp_path / "c.pcap"))
    assert [(r["code"], r["count"]) for r in rows] == [(F.SCHEMA_INCOMPATIBLE, 2)]
    (row,) = rows
    expected = (
        'offered AVRO "User" {id:int, name:string}; the topic\'s AVRO "User" {id:long} '
        "(version 0, PRODUCER_SUCCESS): field id int vs long, field name added"
    )
    assert expected in row["summary"], row["summary"]
    # the packet that showed the topic's schema is evidence too (counted 0)
    assert row["evidence"] == [s.packet(success), *(s.packet(e) for e in errors)]


def test_with_values_a_topic_schema_not_captured_is_said(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    s.at(1.0, _producer(1, "new", _schema(AVRO, "User", USER_NEW)))
    s.at(1.1, _error(1))
    s.close(2.0)
    (row,) = _values_findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.SCHEMA_INCOMPATIBLE and row["count"] == 1
    # nothing to compare with: the offered schema's type and name only
    assert 'offered AVRO "User"; the topic\'s schema is not in the capture' in row["summary"]


def test_a_schema_served_on_another_connection_is_the_topics(tmp_path: Path) -> None:
    """GET_SCHEMA_RESPONSE on one connection gives the topic's schema (a partition's topic);
    a GET_OR_CREATE_SCHEMA of JSON refused on another is compared with it."""
    s = Scene()
    one = s.open(Conn(client_port=40001))
    two = s.open(Conn(client_port=40002), 0.5)
    s.at(1.0, msg(C2B, "GET_SCHEMA", request_id=7, topic=TOPIC), one)
    served = msg(
        B2C, "GET_SCHEMA_RESPONSE", request_id=7, schema=_schema(JSON_TYPE, "User", USER_OLD),
        schema_version=(3).to_bytes(8, "big"),
    )  # fmt: skip
    s.at(1.1, served, one)
    part = f"{TOPIC}-partition-1"
    asked = msg(
        C2B, "GET_OR_CREATE_SCHEMA", request_id=8, topic=part,
        schema=_schema(JSON_TYPE, "User", USER_NEW),
    )  # fmt: skip
    refused = msg(
        B2C, "GET_OR_CREATE_SCHEMA_RESPONSE", request_id=8, error_code=INCOMPATIBLE,
        error_message="incompatible",
    )  # fmt: skip
    s.at(2.0, asked, two).at(2.1, refused, two)
    s.close(3.0, one).close(3.0, two)
    (row,) = _values_findings(s.write(tmp_path / "c.pcap"))
    assert (row["code"], row["topic"], row["count"], row["entity"]) == (
        F.SCHEMA_INCOMPATIBLE, part, 1, None
    )  # fmt: skip
    assert row["summary"].startswith("GET_OR_CREATE_SCHEMA refused with IncompatibleSchema")
    assert (
        'the topic\'s JSON "User" {id:long} (version 3, GET_SCHEMA_RESPONSE): field id int '
        "vs long, field name added; the broker said: incompatible"
    ) in row["summary"]
    assert row["evidence"] == [s.packet(served), s.packet(refused)]


def test_the_same_producer_accepted_is_no_finding(tmp_path: Path) -> None:
    s, _, _ = _scene(accepted=True)
    path = s.write(tmp_path / "c.pcap")
    assert findings(path) == []
    assert _values_findings(path) == []


def test_the_same_producer_refused_with_another_error_is_no_finding(tmp_path: Path) -> None:
    s, _, _ = _scene(error=NOT_READY)
    path = s.write(tmp_path / "c.pcap")
    assert [r["code"] for r in findings(path)] == []
    assert [r["code"] for r in _values_findings(path)] == []


def test_a_bytes_producer_refused_offers_bytes(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    s.at(1.0, _producer(1, "raw", None))
    s.at(1.1, _error(1))
    s.close(2.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.SCHEMA_INCOMPATIBLE
    assert "offered BYTES;" in row["summary"]


def test_findings_made_beside_values_of_messages_compare_the_same(tmp_path: Path) -> None:
    """The findings read beside the messages table with values (payloads decoded, the values'
    schema tracker taking the facts first) say what a findings-only read says."""
    s, _, _ = _scene()
    path = s.write(tmp_path / "c.pcap")
    both = read_capture(path, tables=["findings", "messages"], values=True).arrow["findings"]
    assert both.to_pylist() == _values_findings(path)


def test_a_get_schema_answered_by_an_error_is_no_finding_and_no_exception(
    tmp_path: Path,
) -> None:
    """GET_SCHEMA declares no schema: an ERROR answering it (IncompatibleSchema or not) makes
    a refused schema fact with no schema, and no schema.incompatible row (only PRODUCER,
    SUBSCRIBE and GET_OR_CREATE_SCHEMA offer a schema)."""
    s = Scene()
    s.open()
    s.at(1.0, msg(C2B, "GET_SCHEMA", request_id=4, topic=TOPIC)).at(1.1, _error(4))
    s.close(2.0)
    path = s.write(tmp_path / "c.pcap")
    assert findings(path) == [] and _values_findings(path) == []
    messages = read_capture(path, tables=["messages"], values=True).arrow["messages"]
    assert messages.num_rows == 0
