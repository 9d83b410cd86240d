"""A producer or consumer re-created on its id keeps both rows in the entities table.

Input:  hand-encoded frames of one connection (tests.facts.test_machine.py's Link), in the
        order the Java client 4.0 sends them against Apache Pulsar 4.0 when the broker
        closes its producer and consumer (a topic unload, a seek): the broker's
        CLOSE_PRODUCER / CLOSE_CONSUMER (request_id -1), then PRODUCER / SUBSCRIBE again with
        the same ids, then the client's own closes (tests/test_apache_errors.py sees it
        on the wire).
Output: the connection's entities: the first incarnation closed by the broker, with its
        messages, then the re-created one closed by the client, with its own.
Rule:   expected states, times and counts are the frames written here, nothing else.
"""

from __future__ import annotations

import pytest

from dissector.events import Entity, EntityState
from dissector.facts import entities
from tests.facts.test_machine import B2C, C2B, TOPIC, U64, Link, err, mid


def _rows(link: Link, kind: str) -> list[Entity]:
    return [e for e in link.state.info.entities if e.kind.value == kind]


def test_a_producer_and_consumer_recreated_after_the_brokers_close_keep_both_rows() -> None:
    link = Link()
    made = link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=0, request_id=1)
    link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p")
    sub = link.send(
        C2B, "SUBSCRIBE", topic=TOPIC, subscription="s", subType=0, consumer_id=0, request_id=2
    )
    link.send(B2C, "SUCCESS", request_id=2)
    link.send(C2B, "SEND", producer_id=0, sequence_id=0)
    link.send(B2C, "MESSAGE", consumer_id=0, message_id=mid(10, 0))
    p_closed = link.send(B2C, "CLOSE_PRODUCER", producer_id=0, request_id=U64 - 1)
    c_closed = link.send(B2C, "CLOSE_CONSUMER", consumer_id=0, request_id=U64 - 1)
    again = link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=0, request_id=3)
    resub = link.send(
        C2B, "SUBSCRIBE", topic=TOPIC, subscription="s", subType=0, consumer_id=0, request_id=4
    )
    link.send(B2C, "SUCCESS", request_id=4)
    link.send(B2C, "PRODUCER_SUCCESS", request_id=3, producer_name="p")
    for seq in (1, 2):
        link.send(C2B, "SEND", producer_id=0, sequence_id=seq)
    link.send(B2C, "MESSAGE", consumer_id=0, message_id=mid(11, 0))
    p_end = link.send(C2B, "CLOSE_PRODUCER", producer_id=0, request_id=5)
    c_end = link.send(C2B, "CLOSE_CONSUMER", consumer_id=0, request_id=6)
    link.close()

    got = [(e.created_ts, e.state, e.closed_ts, e.sent) for e in _rows(link, "producer")]
    assert got == [
        (made.ts, EntityState.CLOSED_BY_BROKER, p_closed.ts, 1),
        (again.ts, EntityState.CLOSED_BY_CLIENT, p_end.ts, 2),
    ]
    got = [(e.created_ts, e.state, e.closed_ts, e.delivered) for e in _rows(link, "consumer")]
    assert got == [
        (sub.ts, EntityState.CLOSED_BY_BROKER, c_closed.ts, 1),
        (resub.ts, EntityState.CLOSED_BY_CLIENT, c_end.ts, 1),
    ]


def test_a_producer_refused_on_its_retry_keeps_the_row_of_its_first_creation() -> None:
    """The Java client after a topic's termination: closed by the broker, refused on retry."""
    link = Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=0, request_id=1)
    link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p")
    link.send(B2C, "CLOSE_PRODUCER", producer_id=0, request_id=U64 - 1)
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=0, request_id=2)
    link.send(B2C, "ERROR", request_id=2, error=err("TopicTerminatedError"), message="done")
    link.close()
    assert [e.state for e in _rows(link, "producer")] == [
        EntityState.CLOSED_BY_BROKER,
        EntityState.FAILED,
    ]


def test_beyond_the_bound_the_oldest_live_producer_is_retired_keeping_its_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bounds.MAX_ENTITIES live producers per connection (3 here): a fourth retires the
    first, whose row stays; a SEND naming it then concerns no topic."""
    monkeypatch.setattr(entities, "MAX_ENTITIES", 3)
    link = Link()
    made = [
        link.send(C2B, "PRODUCER", topic=f"{TOPIC}-{pid}", producer_id=pid, request_id=pid)
        for pid in range(4)
    ]
    assert sorted(link.state.producers) == [1, 2, 3]
    assert link.send(C2B, "SEND", producer_id=0, sequence_id=0).topic is None
    assert link.send(C2B, "SEND", producer_id=1, sequence_id=0).topic == f"{TOPIC}-1"
    link.close()
    rows = [(e.entity_id, e.created_ts) for e in _rows(link, "producer")]
    assert rows == [(pid, sent.ts) for pid, sent in enumerate(made)]
