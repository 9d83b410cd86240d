"""The journeys' facts of MESSAGE and ACK (dissector.facts.consumed), made by the state machine.

Frames are encoded with dissector.pulsar.encoder and decoded by a FrameDecoder (as the
pipeline does), then observed. Expected values come from what the test encoded and from the
wire's rules: an ack_set is a Java BitSet's toLongArray() (bit i of word i >> 6; a word is a
signed 64-bit long, so bit 63 set makes it negative), a batch claim is at most MAX_BATCH
(10,000), ack_type 1 is Cumulative (PulsarApi.proto CommandAck.AckType).
"""

from __future__ import annotations

from typing import Any

from dissector.events import AckedId, AckedIds, Delivering, Direction, Frame
from dissector.facts import ConversationState
from dissector.facts.consumed import has, partial
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import MessageMetadata
from dissector.read.driver import make_pipeline
from dissector.read.options import ReaderOptions
from dissector.read.plan import EVENTS, TABLES, TEXT, plan_read

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
TOPIC = "persistent://public/default/consumed"


class _Link:
    """One connection's frames, decoded and observed; the facts of the latest kept."""

    def __init__(self, **state: Any) -> None:
        self.state = ConversationState(4, **state)
        self.decoders = {d: FrameDecoder(conn_id=4, direction=d) for d in Direction}
        self.packet = 0

    def send(self, direction: Direction, name: str, **fields: Any) -> list[Any]:
        self.packet += 1
        cmd = command(name, **fields)
        if name == "MESSAGE":
            meta = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
            data = encode_frame(cmd, metadata=meta, payload=b"x")
        else:
            data = encode_frame(cmd)
        (frame,) = self.decoders[direction].feed(data, packet=self.packet, ts=self.packet)
        assert isinstance(frame, Frame)
        _, facts = self.state.observe(frame)
        return facts


def _subscribed(link: _Link) -> None:
    link.send(C2B, "SUBSCRIBE", topic=TOPIC, subscription="orders", subType=1, consumer_id=2,
              request_id=1, consumer_name="alice")  # fmt: skip
    link.send(B2C, "SUCCESS", request_id=1)


def test_an_ack_set_is_a_java_bitset_of_signed_words() -> None:
    assert [i for i in range(8) if has((5,), i)] == [0, 2]  # 5 = 0b101
    assert has((-1,), 63) and has((-(2**63),), 63) and not has((-(2**63),), 62)
    assert has((0, 1), 64) and not has((0, 1), 0)
    assert not has((5,), 64)  # beyond its words: no bit
    assert not partial([]) and not partial([0, 0]) and partial([0, 4])


def test_a_message_is_delivered_to_its_subscribe() -> None:
    link = _Link(consumed=True)
    _subscribed(link)
    facts = link.send(B2C, "MESSAGE", consumer_id=2, redelivery_count=3, ack_set=[5],
                      message_id={"ledgerId": 7, "entryId": 9, "partition": 1})  # fmt: skip
    fact = facts[-1]
    assert type(fact) is Delivering
    assert (fact.conn_id, fact.consumer_id, fact.ledger, fact.entry, fact.partition) == (
        4, 2, 7, 9, 1,
    )  # fmt: skip
    assert fact.ack_set == (5,) and fact.redelivery_count == 3
    assert fact.consumer is not None
    c = fact.consumer
    assert (c.topic, c.subscription, c.sub_type, c.name) == (TOPIC, "orders", "Shared", "alice")


def test_an_ack_set_naming_no_entry_means_the_whole_entry() -> None:
    link = _Link(consumed=True)
    _subscribed(link)
    facts = link.send(B2C, "MESSAGE", consumer_id=2, ack_set=[0, 0],
                      message_id={"ledgerId": 7, "entryId": 9})  # fmt: skip
    assert type(facts[-1]) is Delivering and facts[-1].ack_set == ()
    assert facts[-1].partition == -1  # the wire's default: no partition said


def test_a_consumer_whose_subscribe_was_missed_is_none() -> None:
    link = _Link(consumed=True)
    facts = link.send(B2C, "MESSAGE", consumer_id=8, message_id={"ledgerId": 1, "entryId": 2})
    assert type(facts[-1]) is Delivering and facts[-1].consumer is None
    facts = link.send(C2B, "ACK", consumer_id=8, ack_type=0,
                      message_id=[{"ledgerId": 1, "entryId": 2}])  # fmt: skip
    assert type(facts[-1]) is AckedIds and facts[-1].consumer is None


def test_an_ack_says_its_ids_as_the_protocol_means_them() -> None:
    link = _Link(consumed=True)
    _subscribed(link)
    facts = link.send(C2B, "ACK", consumer_id=2, ack_type=1, message_id=[
        {"ledgerId": 3, "entryId": 4, "ack_set": [6], "batch_size": 20_000},
        {"ledgerId": 3, "entryId": 5, "batch_size": 0,
         "first_chunk_message_id": {"ledgerId": 3, "entryId": 1}},
    ])  # fmt: skip
    fact = facts[-1]
    assert type(fact) is AckedIds
    assert fact.cumulative and fact.consumer_id == 2 and fact.consumer is not None
    assert fact.ids == (
        AckedId(3, 4, -1, None, (6,), 10_000),  # the claim bounded at MAX_BATCH
        AckedId(3, 5, -1, (3, 1), (), None),  # a size below 1 is no size
    )
    individual = link.send(C2B, "ACK", consumer_id=2, ack_type=0,
                           message_id=[{"ledgerId": 3, "entryId": 6}])  # fmt: skip
    assert type(individual[-1]) is AckedIds and not individual[-1].cumulative


def test_the_facts_are_made_only_when_asked_for() -> None:
    for state in ({}, {"consumed": True, "pairs": False}):
        link = _Link(**state)
        _subscribed(link)
        got = link.send(B2C, "MESSAGE", consumer_id=2, message_id={"ledgerId": 1, "entryId": 1})
        got += link.send(C2B, "ACK", consumer_id=2, ack_type=0,
                         message_id=[{"ledgerId": 1, "entryId": 1}])  # fmt: skip
        assert not [f for f in got if type(f) in (Delivering, AckedIds)]


def test_a_redelivery_request_is_no_ack() -> None:
    link = _Link(consumed=True)
    _subscribed(link)
    link.send(B2C, "MESSAGE", consumer_id=2, message_id={"ledgerId": 1, "entryId": 1})
    got = link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=2)
    assert not [f for f in got if type(f) is AckedIds]


def test_the_read_plan_makes_them_for_the_journeys_and_the_event_api() -> None:
    """Tables: for the journeys alone; the event API: whenever it has pairs (its caller may
    join journeys of its own)."""
    on, off = ReaderOptions(), ReaderOptions(pairs=False)
    for options, tables, front, wanted in (
        (on, ["journeys"], TABLES, True),
        (off, ["journeys"], TABLES, True),  # the journeys read facts whatever pairs says
        (on, ["timeline", "findings"], TABLES, False),
        (on, ["journeys"], TEXT, True),  # live: a journeys table made beside the text
        (on, None, EVENTS, True),
        (off, None, EVENTS, False),
    ):
        pipe = make_pipeline(options, plan_read(options, tables, front))
        assert pipe._shared.consumed is wanted, (tables, front)
