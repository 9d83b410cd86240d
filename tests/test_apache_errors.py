"""The Apache broker's ERROR answers and its own closes, against the Java client's record.

Input:  one run of tests/support/apache/LifecycleClient.java (official Java client 4.0.0)
        against the session's Apache broker under tcpdump: ProducerBusy (a second producer of
        the same name), ProducerFenced (an Exclusive producer held by another), ConsumerBusy
        (a second consumer of an Exclusive subscription), TopicNotFound (a namespace without
        automatic topic creation), IncompatibleSchema (INT64 on a STRING topic),
        NotAllowedError (Shared on a namespace allowing Exclusive only), TopicTerminatedError
        (a producer on a terminated topic, and one open while the admin API terminates its
        topic), REACHED_END_OF_TOPIC, and a topic unload.
Output: assertions that our frames, timeline, entities and findings say what the client
        recorded: each exception's class (the Java client's ServerError mapping), the
        broker's message and request id it carries (`{"errorMsg": ..., "reqId": ...}`), its
        reachedEndOfTopic callback, its reconnects after the broker's closes.
Rule:   expected values come from the record (and the Java client's exception classes),
        never from our tables.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests.support.apache.broker import ApacheBroker
from tests.support.apache.lifecycle import Run, capture_run, rows

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

SCENARIOS = [
    "producer_busy",
    "consumer_busy",
    "topic_not_found",
    "incompatible_schema",
    "not_allowed",
    "terminated_producer",
    "terminate",
    "unload",
]
#: The Java client's exception class -> the ServerError it is made from (ClientCnx).
SERVER_ERROR = {
    "ProducerBusyException": "ProducerBusy",
    "ProducerFencedException": "ProducerFenced",
    "ConsumerBusyException": "ConsumerBusy",
    "TopicDoesNotExistException": "TopicNotFound",
    "IncompatibleSchemaException": "IncompatibleSchema",
    "NotAllowedException": "NotAllowedError",
    "TopicTerminatedException": "TopicTerminatedError",
}
#: (scenario, record key) -> (the request refused, the name it gave, its topic's record key)
REFUSALS = {
    ("producer_busy", "same_name"): ("PRODUCER", "busy-p", "topic"),
    ("producer_busy", "exclusive"): ("PRODUCER", "fenced", "exclusive_topic"),
    ("consumer_busy", "second"): ("SUBSCRIBE", "busy-b", "topic"),
    ("topic_not_found", "producer"): ("PRODUCER", "nf", "topic"),
    ("incompatible_schema", "int64"): ("PRODUCER", "longs", "topic"),
    ("not_allowed", "shared"): ("SUBSCRIBE", "na-c", "topic"),
    ("terminated_producer", "producer"): ("PRODUCER", "nf", "topic"),
    ("terminate", "send_after"): ("PRODUCER", "end-p", "topic"),
}
CLOSED_BY_BROKER = -1  # request_id 2**64-1 of a broker's CLOSE_PRODUCER/CLOSE_CONSUMER


@pytest.fixture(scope="module")
def run(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_run(apache_broker, tmp_path_factory.mktemp("apache-errors"), SCENARIOS)


def _refusal(run: Run, scenario: str, key: str) -> dict[str, Any]:
    """The exception the client recorded, with the broker's message and request id."""
    error: dict[str, Any] | None = run.scenario(scenario)[key]
    assert error is not None, f"{scenario}: the client was not refused"
    said = json.loads(error["message"])
    return {"class": error["class"], "message": said["errorMsg"], "request_id": said["reqId"]}


@pytest.mark.parametrize(("scenario", "key"), sorted(REFUSALS))
def test_the_error_is_paired_with_the_request_the_client_saw_refused(
    run: Run, scenario: str, key: str
) -> None:
    refused = _refusal(run, scenario, key)
    request, _, topic_key = REFUSALS[(scenario, key)]
    topic = run.scenario(scenario)[topic_key]
    timeline = run.capture.timeline
    pairs = rows(timeline[timeline.request_id == refused["request_id"]])
    assert [
        (
            p["request_command"],
            p["response_command"],
            p["outcome"],
            p["error_code"],
            p["error_message"],
            p["topic"],
        )
        for p in pairs
    ] == [(request, "ERROR", "error", SERVER_ERROR[refused["class"]], refused["message"], topic)]
    frames = run.capture.frames
    errors = rows(
        frames[(frames.command == "ERROR") & (frames.request_id == refused["request_id"])]
    )
    assert [f["direction"] for f in errors] == ["broker_to_client"]
    assert json.loads(errors[0]["fields"])["message"] == refused["message"]


@pytest.mark.parametrize(("scenario", "key"), sorted(REFUSALS))
def test_the_refused_producer_or_consumer_is_failed(run: Run, scenario: str, key: str) -> None:
    request, name, topic_key = REFUSALS[(scenario, key)]
    entities = run.entities(run.scenario(scenario)[topic_key])
    mine = rows(entities[entities.name == name])
    kind = "producer" if request == "PRODUCER" else "consumer"
    assert [(e["kind"], e["state"]) for e in mine][-1] == (kind, "failed")


def test_the_busy_producers_are_a_finding_and_nothing_else_is(run: Run) -> None:
    """Two PRODUCER refusals on one connection, on two topics (ProducerBusy on the topic,
    ProducerFenced on the exclusive one): a producer.busy finding per topic, naming the
    producer the client saw refused there; the second consumer of the Exclusive
    subscription, refused ConsumerBusy: a consumer.busy finding naming the first (busy-a)
    as its holder; the other refusals, the broker's closes and the unload's ACK crossing a
    redelivery raise none."""
    scenario = run.scenario("producer_busy")
    refused = {}  # topic -> (the refused producer's name, its exception)
    for key in ("same_name", "exclusive"):
        _, name, topic_key = REFUSALS[("producer_busy", key)]
        refused[scenario[topic_key]] = (name, _refusal(run, "producer_busy", key)["class"])
    assert sorted(c for _, c in refused.values()) == [
        "ProducerBusyException",
        "ProducerFencedException",
    ]
    # The unload scenario's ack race is no finding: after the unload the client subscribes
    # again, sends FLOW and acks the first message while the broker's dispatch for the FLOW
    # is already reading it: its MESSAGE crosses the ACK (dissector.diagnose.crossing).
    # The IncompatibleSchema refusal is its own finding (tests/test_apache_schema.py)
    schema = ("schema.incompatible", run.scenario("incompatible_schema")["topic"])
    found = [f for f in rows(run.capture.findings) if (f["code"], f["topic"]) != schema]
    busy = run.scenario("consumer_busy")
    assert _refusal(run, "consumer_busy", "second")["class"] == "ConsumerBusyException"
    consumer = [f for f in found if f["code"] == "consumer.busy"]
    findings = [f for f in found if f["code"] != "consumer.busy"]
    assert [(f["topic"], f["entity"], f["count"]) for f in consumer] == [
        (busy["topic"], "subscription busy-sub", 1)
    ]
    assert "(busy-a)" in consumer[0]["summary"], consumer[0]  # the first consumer holds it
    assert "still open" in consumer[0]["summary"], consumer[0]  # closed after the refusal
    assert consumer[0]["conn_id"] in run.conns(busy["topic"])
    assert sorted((f["code"], f["topic"], f["count"]) for f in findings) == sorted(
        ("producer.busy", topic, 1) for topic in refused
    )
    for f in findings:
        name, exception = refused[f["topic"]]
        assert f["entity"].endswith(f"({name})"), f
        assert SERVER_ERROR[exception] in f["summary"], f
        assert f["conn_id"] in run.conns(f["topic"])
    assert rows(run.capture.anomalies) == []


def test_termination_reaches_the_consumer_and_closes_the_producer(run: Run) -> None:
    """The admin API terminates the topic: the broker closes the producer (CLOSE_PRODUCER,
    its re-creation refused with TopicTerminatedError) and tells the consumer
    REACHED_END_OF_TOPIC; the Java broker sends no SEND_ERROR, the send fails in the client."""
    scenario = run.scenario("terminate")
    assert scenario["reached_end_callback"] and scenario["has_reached_end"]
    last = json.loads(scenario["terminate_answer"]["body"])
    assert scenario["sent"][-1]["entry_id"] == last["entryId"]
    entities = run.entities(scenario["topic"])
    consumer = rows(entities[entities.name == "end-c"])
    producer = rows(entities[entities.name == "end-p"])
    assert [e["state"] for e in producer] == ["closed_by_broker", "failed"]
    assert producer[0]["sent"] == len(scenario["sent"])
    frames = run.frames(scenario["topic"])
    told = rows(frames[frames.command.isin(["REACHED_END_OF_TOPIC", "CLOSE_PRODUCER"])])
    assert sorted((f["command"], f["direction"]) for f in told) == [
        ("CLOSE_PRODUCER", "broker_to_client"),
        ("REACHED_END_OF_TOPIC", "broker_to_client"),
    ]
    close, end = sorted(told, key=lambda f: str(f["command"]))
    assert (close["request_id"], close["producer_id"]) == (
        CLOSED_BY_BROKER,
        producer[0]["entity_id"],
    )
    assert (end["consumer_id"], end["topic"]) == (consumer[0]["entity_id"], scenario["topic"])
    assert not frames.command.isin(["SEND_ERROR"]).any()
    sends = frames[frames.command == "SEND"]
    assert len(sends) == len(scenario["sent"])  # the send after termination never left
    delivered = rows(frames[frames.command == "MESSAGE"])
    assert [(f["ledger_id"], f["entry_id"]) for f in delivered] == [
        _mid(e) for e in scenario["received"]
    ]


def test_an_unload_closes_both_and_the_client_creates_them_again(run: Run) -> None:
    scenario = run.scenario("unload")
    assert scenario["producer_disconnected_ms"] > 0 and scenario["consumer_disconnected_ms"] > 0
    frames = run.frames(scenario["topic"])
    closes = rows(
        frames[
            frames.command.isin(["CLOSE_PRODUCER", "CLOSE_CONSUMER"])
            & (frames.direction == "broker_to_client")
        ]
    )
    assert sorted((f["command"], f["request_id"]) for f in closes) == [
        ("CLOSE_CONSUMER", CLOSED_BY_BROKER),
        ("CLOSE_PRODUCER", CLOSED_BY_BROKER),
    ]
    entities = run.entities(scenario["topic"])
    producer = rows(entities[entities.name == "unload-p"])
    consumer = rows(entities[entities.name == "unload-c"])
    states = ["closed_by_broker", "closed_by_client"]
    assert [(e["state"], e["sent"]) for e in producer] == list(zip(states, [1, 1], strict=True))
    assert [e["state"] for e in consumer] == states
    assert consumer[0]["delivered"] == 1  # its first message, received before the unload
    assert producer[0]["entity_id"] == producer[1]["entity_id"]
    timeline = run.timeline(scenario["topic"])
    made = timeline[timeline.request_command.isin(["PRODUCER", "SUBSCRIBE"])]
    assert Counter(zip(made.request_command, made.outcome, strict=True)) == {
        ("PRODUCER", "success"): 2,
        ("SUBSCRIBE", "success"): 2,
    }
    # The broker may deliver the first message again (its ack, grouped by the client, may not
    # have reached it before the unload); the client hands it over again or drops it as
    # acked (both seen): the same messages either way, each at least once on the wire.
    messages = run.capture.messages
    delivered = messages[(messages.topic == scenario["topic"]) & (messages.kind == "delivered")]
    wire = set(zip(delivered.ledger_id, delivered.entry_id, strict=True))
    assert wire == {_mid(e) for e in scenario["received"]}
    assert sum(e["delivered"] for e in consumer) == len(delivered)


def _mid(entry: dict[str, Any]) -> tuple[int, int]:
    return (entry["message_id"]["ledger_id"], entry["message_id"]["entry_id"])
