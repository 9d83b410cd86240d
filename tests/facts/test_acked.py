"""The facts of ACKs (events.Acked): each consumer's unacknowledged deliveries, as the consumer
and discard rules read them.

Frames are encoded and decoded as the pipeline does (tests.facts.test_machine's Link). Expected
values come from what the test sent: which MESSAGEs came first (their times and packets, given
by the test), which ids each ACK named, and the protocol (proto/pulsar_api.proto): an ACK
acknowledges the ids it names (cumulative: everything up to the id; a batch-index ack with bits
still set only part of its batch); REDELIVER_UNACKNOWLEDGED_MESSAGES asks for deliveries again
and acknowledges nothing.
"""

from __future__ import annotations

from dissector.events import Acked
from dissector.pulsar.wire import MessageMetadata
from tests.facts.test_machine import B2C, C2B, Link, Sent, linked, mid

_BATCH = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3)


def _last(link: Link) -> Acked:
    return link.acked[-1]


def _first(link: Link, sent: Sent) -> tuple[int, int]:
    """The time and packet of a MESSAGE as the test sent it."""
    return sent.ts, sent.frame.last_packet


def test_a_redelivery_keeps_the_first_delivery_its_place_time_and_number() -> None:
    link = Link()
    a = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1))
    b = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 2))
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1), redelivery_count=1)
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 2)])
    fact = _last(link)
    assert fact.ack.command_name == "ACK" and fact.consumer_id == 1 and fact.conn_id == 1
    assert fact.oldest is not None and fact.oldest is fact.left  # (3, 1): still the oldest
    assert (fact.oldest.first_ts, fact.oldest.first_packet) == _first(link, a)
    ((key, done),) = fact.done
    assert key == (3, 2) and (done.first_ts, done.first_packet) == _first(link, b)
    assert fact.oldest.number < done.number  # (3, 1) was delivered first
    assert fact.discarded == ()


def test_a_redelivery_request_pairs_the_delivery_and_leaves_it_unacknowledged() -> None:
    link = Link()
    a = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1))
    asked = link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1)
    linked(asked.pairs[0], a, asked, "redelivered")
    assert link.acked == []  # only an ACK makes the fact
    again = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1), redelivery_count=1)
    assert again.pairs == []  # its earlier delivery's pair was made by the request
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 1)])
    linked(ack.pairs[0], again, ack, "success")
    fact = _last(link)
    ((key, done),) = fact.done
    assert key == (3, 1) and done is fact.oldest and fact.left is None
    assert (done.first_ts, done.first_packet) == _first(link, a)
    assert link.close() == []


def test_an_ack_after_a_redelivery_request_acknowledges_what_was_not_delivered_again() -> None:
    link = Link()
    a = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1))
    link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1, message_ids=[mid(3, 1)])
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 1)])
    linked(ack.pairs[0], None, ack, "unmatched")  # its pair was made by the request
    ((key, done),) = _last(link).done
    assert key == (3, 1) and (done.first_ts, done.first_packet) == _first(link, a)


def test_a_cumulative_ack_of_part_of_a_batch_acknowledges_what_comes_before_it() -> None:
    link = Link()
    a = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1))
    b = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 2), metadata=_BATCH)
    # slot 2 of the batch still unacknowledged (bitset 0b100)
    link.send(C2B, "ACK", consumer_id=1, ack_type=1, message_id=[mid(3, 2, ack_set=[4])])
    fact = _last(link)
    assert [key for key, _ in fact.done] == [(3, 1)] and fact.upto == (3, 1)
    assert fact.left is not None and (fact.left.first_ts, fact.left.first_packet) == _first(link, b)
    assert fact.oldest is not None and fact.oldest.first_ts == a.ts


def test_an_individual_batch_index_ack_acknowledges_nothing_yet() -> None:
    link = Link()
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 2), metadata=_BATCH)
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 2, ack_set=[4])])
    fact = _last(link)
    assert fact.done == () and fact.left is fact.oldest is not None and fact.upto is None


def test_an_ack_with_a_validation_error_names_the_deliveries_it_discards() -> None:
    link = Link()
    a = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 1))
    b = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 2))
    link.send(
        C2B,
        "ACK",
        consumer_id=1,
        ack_type=0,
        message_id=[mid(3, 2), mid(9, 9), mid(3, 1)],
        validation_error=1,  # DecompressionError
    )
    fact = _last(link)
    assert [(d.first_ts, d.first_packet) for d in fact.discarded] == [
        _first(link, b),
        _first(link, a),
    ]  # in the order named; (9, 9) was never delivered
    assert [key for key, _ in fact.done] == [(3, 2), (3, 1)]
