"""schema.incompatible against the Apache broker and the official Java client.

Input:  LifecycleClient.java's incompatible_schema scenario (Java client 4.0.0) under tcpdump:
        a producer "strings" declaring Schema.STRING creates the topic's schema, then a
        producer "longs" declaring Schema.INT64 is refused (IncompatibleSchemaException).
Output: assertions that `diagnose` finds that refusal where the client's record says it
        was refused, with the schema the client declared (type and name, as its SchemaInfo
        said them in the record) and the broker's message; with values, the topic's schema
        as the broker's admin API reports it (type, version) and what differs.
Rule:   expected values come from the client's record and the broker's admin API, never
        from our tables.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import dissector
from tests.support.apache.admin import admin
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.lifecycle import Run, capture_run, rows

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

SCENARIO = "incompatible_schema"


@pytest.fixture(scope="module")
def run(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_run(apache_broker, tmp_path_factory.mktemp("apache-schema"), [SCENARIO])


def _refused(run: Run) -> dict[str, Any]:
    """The client's exception for the INT64 producer: class and the broker's message."""
    error = run.scenario(SCENARIO)["int64"]
    assert error is not None, "the client was not refused"
    return {"class": error["class"], "message": json.loads(error["message"])["errorMsg"]}


def _declared(run: Run, producer: str) -> str:
    """How the row names a schema the client declared: `TYPE "name"`."""
    schema = run.scenario(SCENARIO)["schemas"][producer]
    return str(schema["type"]) + (f' "{schema["name"]}"' if schema["name"] else "")


def test_the_refused_producer_is_a_finding_with_the_schema_it_offered(run: Run) -> None:
    refused = _refused(run)
    assert refused["class"] == "IncompatibleSchemaException"
    topic = run.scenario(SCENARIO)["topic"]
    found = rows(run.capture.findings)
    assert [(f["code"], f["topic"], f["count"]) for f in found] == [
        ("schema.incompatible", topic, 1)  # one create(), refused once: not retried
    ]
    (row,) = found
    assert row["entity"].endswith("(longs)")
    assert row["conn_id"] in run.conns(topic)
    summary = row["summary"]
    assert f"offered {_declared(run, 'longs')};" in summary, summary
    assert refused["message"][:100] in summary
    assert "not compared" in summary


def test_with_values_the_topics_schema_is_the_one_the_broker_keeps(
    run: Run, apache_broker: ApacheBroker
) -> None:
    topic = run.scenario(SCENARIO)["topic"]
    local = topic.split("/")[-1]
    kept = admin(apache_broker, "GET", f"/admin/v2/schemas/public/default/{local}/schema")
    assert kept["type"] == run.scenario(SCENARIO)["schemas"]["strings"]["type"]
    capture = dissector.read_capture(
        run.path, ports=[apache_broker.port], tables=["findings"], values=True
    )
    (row,) = rows(capture.findings)
    assert (row["code"], row["topic"], row["count"]) == ("schema.incompatible", topic, 1)
    longs, strings = _declared(run, "longs"), _declared(run, "strings")
    longs_type, strings_type = (
        run.scenario(SCENARIO)["schemas"][p]["type"] for p in ("longs", "strings")
    )
    expected = (
        f"offered {longs}; the topic's {strings} (version {kept['version']}, "
        f"PRODUCER_SUCCESS): type {longs_type} vs {strings_type}"
    )
    assert expected in row["summary"], row["summary"]
