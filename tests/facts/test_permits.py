"""The facts of consumers' permits (events.Permits, dissector.facts.permits), as the flow rules
read them.

Frames are encoded and decoded as the pipeline does (tests.facts.test_machine's Link). Expected
values are counted by hand from what the test sent and the protocol (proto/pulsar_api.proto):
a FLOW grants messagePermits; a MESSAGE uses one permit per entry of its batch
(MessageMetadata.num_messages_in_batch, 1 without a batch), or, with an ack_set (a batch
delivered again in part), one per set bit among the batch's entries (a set bit: an entry
still to deliver).
"""

from __future__ import annotations

from dissector.facts.permits import entries
from dissector.pulsar.wire import MessageMetadata
from tests.facts.test_machine import B2C, C2B, OTHER, Link, _consumer, mid


def _batch(n: int) -> MessageMetadata:
    return MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=n
    )


def _facts(link: Link) -> list[tuple[str, int, int, int, int]]:
    """(command, consumer, FLOWs, permits left, largest batch) of each fact so far."""
    return [
        (f.frame.command_name, f.consumer_id, f.flows, f.left, f.max_batch) for f in link.permits
    ]


def test_entries_left_by_an_ack_set() -> None:
    assert entries(5, []) == 5  # no ack_set: the whole batch
    assert entries(3, [0b1111_1111]) == 3  # bits beyond the batch's entries do not count
    assert entries(4, [0b0101]) == 2
    assert entries(70, [-1, 0b1_1111_1111]) == 64 + 6  # -1: all 64 bits; then 6 entries left
    assert entries(70, [-1, 0b101]) == 64 + 2
    assert entries(130, [0, 0, 0b11]) == 2
    assert entries(3, [0]) == 0  # all of the batch delivered before: nothing to deliver


def test_flows_and_messages_count_permits_granted_and_used() -> None:
    link = Link()
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=3)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 0))  # 2 left: no fact
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 1), metadata=_batch(4))
    link.send(  # entries 0 and 2 of 4 still to deliver: 2 permits
        B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 2), metadata=_batch(4), ack_set=[0b0101]
    )
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=10)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 3), metadata=_batch(3))
    assert _facts(link) == [
        ("FLOW", 1, 1, 3, 1),
        ("MESSAGE", 1, 1, 3 - 1 - 4, 4),  # the largest batch yet, and no permits left
        ("MESSAGE", 1, 1, 3 - 1 - 4 - 2, 4),  # no permits left
        ("FLOW", 1, 2, 13 - 7, 4),
    ]  # the last MESSAGE leaves 3 and is no larger a batch: no fact
    c = link.state.consumers[1]
    assert (c.permits, c.used, c.flows, c.max_batch) == (13, 1 + 4 + 2 + 3, 2, 4)
    assert link.permits[0].frame.command_name == "FLOW" and link.permits[0].conn_id == 1


def test_a_consumer_not_created_here_has_its_permits_unknown() -> None:
    link = Link()
    _consumer(link, 2, OTHER)
    link.send(C2B, "FLOW", consumer_id=9, messagePermits=5)
    link.send(B2C, "MESSAGE", consumer_id=9, message_id=mid(1, 0), metadata=_batch(8))
    assert _facts(link) == [("FLOW", 9, 0, 0, 1)]  # FLOWs 0: unknown; the MESSAGE: none


def test_a_consumer_created_again_starts_with_no_permits() -> None:
    link = Link()
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=2)
    link.send(C2B, "CLOSE_CONSUMER", consumer_id=1, request_id=7)
    _consumer(link, 1)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 0))
    assert _facts(link) == [("FLOW", 1, 1, 2, 1), ("MESSAGE", 1, 0, -1, 1)]


def test_without_facts_wanted_nothing_is_counted() -> None:
    link = Link(pairs=False)
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=1)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 0), metadata=_batch(2))
    c = link.state.consumers[1]
    assert link.permits == [] and (c.permits, c.used, c.flows, c.max_batch) == (1, 0, 0, 1)
