"""A consumer's unacknowledged messages (`Entity.unacked`, dissector.facts.acks): what a broker
counts as its unackedMessages, as the broker-stats and dispatch rules read it.

Frames are encoded and decoded as the pipeline does (tests.facts.test_machine's Link).
Expected values are counted by hand from what the test sent: a MESSAGE adds its batch's
entries (1 without a batch; with an ack_set, its set bits), an ACK naming a whole delivery or
a cumulative ACK covering it takes them away, a batch-index ACK with bits still set takes
nothing yet, a redelivery request takes away what it names (all without ids), and the
delivery made again adds them back.
"""

from __future__ import annotations

from dissector.pulsar.wire import MessageMetadata
from tests.facts.test_machine import B2C, C2B, Link, _consumer, mid


def _batch(n: int) -> MessageMetadata:
    return MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=n
    )


def _unacked(link: Link, cid: int = 1) -> int:
    return link.state.consumers[cid].unacked


def test_deliveries_add_and_acks_take_away() -> None:
    link = Link()
    _consumer(link, 1)
    for entry in (1, 2, 3):
        link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, entry))
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 4), metadata=_batch(5))
    assert _unacked(link) == 3 + 5
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 2)])
    assert _unacked(link) == 2 + 5
    # a batch-index ack with bits still set: the batch stays whole
    partial = mid(3, 4, ack_set=[0b11000])
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[partial])
    assert _unacked(link) == 2 + 5
    link.send(C2B, "ACK", consumer_id=1, ack_type=1, message_id=[mid(3, 4)])  # cumulative
    assert _unacked(link) == 0


def test_a_redelivery_request_takes_away_and_the_delivery_again_adds_back() -> None:
    link = Link()
    _consumer(link, 1)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1))
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 2), metadata=_batch(4))
    link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1, message_ids=[mid(3, 2)])
    assert _unacked(link) == 1
    link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1)  # all
    assert _unacked(link) == 0
    link.send(  # its ack_set: two of its four entries still to deliver
        B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 2), metadata=_batch(4),
        redelivery_count=1, ack_set=[0b0110],
    )  # fmt: skip
    assert _unacked(link) == 2
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 2)])
    assert _unacked(link) == 0


def test_a_delivery_repeated_before_any_ack_counts_once() -> None:
    link = Link()
    _consumer(link, 1)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1), metadata=_batch(3))
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1), metadata=_batch(3))
    assert _unacked(link) == 3
