"""The Apache broker's dispatch, against the Java client's record: who got what, and again.

Input:  one run of tests/support/apache/LifecycleClient.java (official Java client 4.0.0)
        against the session's Apache broker under tcpdump: a Failover subscription of two
        consumers (the active one closed), a Key_Shared subscription of two consumers and 20
        messages of 5 keys, a topic of 3 partitions, seeks (by message id, by publish time),
        negative acks (100 ms delay) and an ack timeout (1 s).
Output: assertions that our frames (ACTIVE_CONSUMER_CHANGE, SEEK,
        REDELIVER_UNACKNOWLEDGED_MESSAGES with their fields), messages (key, consumer,
        partition topic, redelivery count), timeline and entities agree with the record:
        the listener's becameActive/becameInactive calls, which consumer got which message,
        the message ids with their partition, what came back after each seek, each
        delivery's redelivery count; and that this healthy traffic raises no finding.
Rule:   expected values come from the record, never from our tables.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pandas as pd
import pytest

from tests.support.apache.broker import ApacheBroker
from tests.support.apache.lifecycle import Run, capture_run, rows

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

SCENARIOS = ["failover", "key_shared", "partitioned", "seek", "nack", "ack_timeout"]


@pytest.fixture(scope="module")
def run(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return capture_run(apache_broker, tmp_path_factory.mktemp("apache-dispatch"), SCENARIOS)


def _mid(entry: dict[str, Any]) -> tuple[int, int]:
    mid = entry.get("message_id", entry)
    return (mid["ledger_id"], mid["entry_id"])


def _wire(mid: dict[str, Any]) -> tuple[int, int]:
    """A MessageIdData as the frames table's fields column spells it."""
    return (mid["ledgerId"], mid["entryId"])


def _names(run: Run, topic: str) -> dict[tuple[int, int], str]:
    """(conn_id, consumer_id) -> the consumer's name, as SUBSCRIBE named it."""
    entities = run.entities(topic)
    consumers = entities[entities.kind == "consumer"]
    return {
        (int(c), int(i)): str(n)
        for c, i, n in zip(consumers.conn_id, consumers.entity_id, consumers.name, strict=True)
    }


def _delivered(run: Run, topic: str) -> pd.DataFrame:
    messages = run.capture.messages
    return messages[(messages.kind == "delivered") & (messages.topic == topic)]


def test_active_consumer_changes_are_the_listeners_calls(run: Run) -> None:
    scenario = run.scenario("failover")
    names = _names(run, scenario["topic"])
    frames = run.frames(scenario["topic"])
    changes = rows(frames[frames.command == "ACTIVE_CONSUMER_CHANGE"])
    # Each consumer's listener is called in the order its frames arrived; the calls of two
    # consumers run on the client's threads, so their interleaving in the record is not the
    # wire's: compare each consumer's own sequence.
    seen: dict[str, list[bool]] = {}
    for frame in changes:
        fields = json.loads(frame["fields"])
        name = names[(frame["conn_id"], fields["consumer_id"])]
        seen.setdefault(name, []).append(fields["is_active"])
    recorded: dict[str, list[bool]] = {}
    for e in scenario["events"]:
        recorded.setdefault(e["consumer"], []).append(e["active"])
    assert seen == recorded
    assert all(f["direction"] == "broker_to_client" for f in changes)
    first = names[(changes[0]["conn_id"], json.loads(changes[0]["fields"])["consumer_id"])]
    assert first == scenario["first_active"]
    entities = rows(run.entities(scenario["topic"]))
    assert {(e["name"], e["sub_type"], e["state"]) for e in entities} == {
        ("fo-a", "Failover", "closed_by_client"),
        ("fo-b", "Failover", "closed_by_client"),
    }


def test_key_shared_each_message_went_to_the_consumer_that_got_it(run: Run) -> None:
    scenario = run.scenario("key_shared")
    names = _names(run, scenario["topic"])
    delivered = rows(_delivered(run, scenario["topic"]))
    ours = Counter(
        (names[(m["conn_id"], m["consumer_id"])], m["key"], m["ledger_id"], m["entry_id"])
        for m in delivered
    )
    theirs = Counter((e["consumer"], e["key"], *_mid(e)) for e in scenario["received"])
    assert ours == theirs
    assert len({e["consumer"] for e in scenario["received"]}) == 2  # both consumers got some
    owner = {e["key"]: e["consumer"] for e in scenario["received"]}
    assert all(owner[e["key"]] == e["consumer"] for e in scenario["received"])
    assert {(e["key"], *_mid(e)) for e in scenario["sent"]} == {
        (k, ledger, entry) for _, k, ledger, entry in theirs
    }


def test_partitions_are_named_per_frame_as_the_ids_say(run: Run) -> None:
    scenario = run.scenario("partitioned")
    topic = scenario["topic"]
    sent = {_mid(e): f"{topic}-partition-{e['partition']}" for e in scenario["sent"]}
    assert sorted({e["partition"] for e in scenario["sent"]}) == [0, 1, 2]
    frames = run.frames(topic)
    receipts = rows(frames[frames.command == "SEND_RECEIPT"])
    assert {(f["ledger_id"], f["entry_id"]): f["topic"] for f in receipts} == sent
    sends = frames[frames.command == "SEND"]
    assert Counter(sends.topic) == Counter(sent.values())
    messages = run.capture.messages
    delivered = rows(
        messages[(messages.kind == "delivered") & messages.topic.isin(set(sent.values()))]
    )
    assert sorted(
        (m["topic"], m["partition"], m["ledger_id"], m["entry_id"]) for m in delivered
    ) == (
        sorted((e["topic"], e["message_id"]["partition"], *_mid(e)) for e in scenario["received"])
    )
    entities = rows(run.entities(topic))
    assert sorted((e["kind"], e["topic"]) for e in entities) == sorted(
        (kind, t) for kind in ("consumer", "producer") for t in set(sent.values())
    )


def _between(frames: pd.DataFrame, start: int, end: int | None) -> list[tuple[int, int]]:
    """The ids of the MESSAGE frames after packet `start` (and before `end`)."""
    chosen = frames[(frames.command == "MESSAGE") & (frames.first_packet > start)]
    if end is not None:
        chosen = chosen[chosen.first_packet < end]
    return list(zip(chosen.ledger_id, chosen.entry_id, strict=True))


def test_seeks_are_answered_and_the_broker_sends_from_there_again(run: Run) -> None:
    scenario = run.scenario("seek")
    frames = run.frames(scenario["topic"])
    seeks = rows(frames[frames.command == "SEEK"])
    fields = [json.loads(f["fields"]) for f in seeks]
    assert [_wire(f["message_id"]) if "message_id" in f else None for f in fields] == [
        _mid(scenario["seek_id"]),
        None,
    ]
    assert fields[1]["message_publish_time"] == scenario["seek_timestamp"]
    timeline = run.timeline(scenario["topic"])
    answered = rows(timeline[timeline.request_command == "SEEK"])
    assert [(p["response_command"], p["outcome"], p["request_id"]) for p in answered] == [
        ("SUCCESS", "success", f["request_id"]) for f in seeks
    ]
    sent = [_mid(e) for e in scenario["sent"]]
    by_id = _between(frames, seeks[0]["last_packet"], seeks[1]["first_packet"])
    # The broker starts again at the id itself; the client hands over what follows it.
    assert by_id == sent[sent.index(_mid(scenario["seek_id"])) :]
    assert [_mid(e) for e in scenario["after_seek_id"]] == by_id[1:]
    by_time = _between(frames, seeks[1]["last_packet"], None)
    assert by_time == [_mid(e) for e in scenario["after_seek_timestamp"]] == sent
    # The broker closes the consumer on each seek (the client saw it disconnected): a row
    # per creation, two closed by the broker.
    assert (
        0
        < scenario["disconnected_ms_after_seek_id"]
        < (scenario["disconnected_ms_after_seek_timestamp"])
    )
    consumer = rows(run.entities(scenario["topic"]).query("kind == 'consumer'"))
    assert [e["state"] for e in consumer] == ["closed_by_broker"] * 2 + ["closed_by_client"]


@pytest.mark.parametrize("name", ["nack", "ack_timeout"])
def test_redelivery_requests_and_counts_are_the_clients(run: Run, name: str) -> None:
    scenario = run.scenario(name)
    frames = run.frames(scenario["topic"])
    asked = rows(frames[frames.command == "REDELIVER_UNACKNOWLEDGED_MESSAGES"])
    ids = [_wire(m) for f in asked for m in json.loads(f["fields"])["message_ids"]]
    assert Counter(ids) == Counter(_mid(e) for e in scenario["received"])
    assert all(f["direction"] == "client_to_broker" for f in asked)
    delivered = rows(_delivered(run, scenario["topic"]))
    got = Counter((m["ledger_id"], m["entry_id"], m["redelivery_count"] or 0) for m in delivered)
    want = Counter(
        (*_mid(e), e["redelivery_count"]) for e in scenario["received"] + scenario["redelivered"]
    )
    assert got == want
    timeline = run.timeline(scenario["topic"])
    pairs = timeline[timeline.request_command == "MESSAGE"]
    assert Counter(zip(pairs.response_command, pairs.outcome, strict=True)) == {
        ("REDELIVER_UNACKNOWLEDGED_MESSAGES", "redelivered"): len(scenario["received"]),
        ("ACK", "success"): len(scenario["redelivered"]),
    }


def test_healthy_dispatch_raises_no_finding_and_no_anomaly(run: Run) -> None:
    """One redelivery per message is no storm, and a seek's redeliveries are asked for."""
    assert rows(run.capture.findings) == []
    assert rows(run.capture.anomalies) == []
