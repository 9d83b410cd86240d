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

from dissector.events import Frame, Permits
from dissector.facts.permits import entries
from dissector.pulsar.encoder import encode_frame
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


# ------------------------------------------------- the broker's debit (PIP-491) and processing


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, value: int | bytes) -> bytes:
    tag = _varint(number << 3 | wire)
    if isinstance(value, bytes):
        return tag + _varint(len(value)) + value
    return tag + _varint(value)


def message_command(cid: int, ledger: int, entry: int, permits: int | None) -> bytes:
    """A BaseCommand MESSAGE encoded by hand from proto/pulsar_api.proto, not by our
    bindings: BaseCommand.type (1) = MESSAGE (9), BaseCommand.message (9) = CommandMessage
    {consumer_id (1), message_id (2) = MessageIdData {ledgerId (1), entryId (2)},
    message_permits (6): PIP-491's uint32, a varint}."""
    mid = _field(1, 0, ledger) + _field(2, 0, entry)
    body = _field(1, 0, cid) + _field(2, 2, mid)
    if permits is not None:
        body += _field(6, 0, permits)
    return _field(1, 0, 9) + _field(9, 2, body)


def _message(link: Link, cid: int, entry: int, permits: int | None, n: int) -> Frame:
    """A MESSAGE of a batch of n carrying message_permits (None: without), fed as Link.send
    feeds frames."""
    link.ts += 1_000
    link.packet += 1
    data = encode_frame(
        message_command(cid, 1, entry, permits), metadata=_batch(n), payload=b"x", checksum=False
    )
    (frame,) = link.decoders[B2C].feed(data, packet=link.packet, ts=link.ts)
    assert isinstance(frame, Frame)
    _, facts = link.state.observe(frame)
    link.permits.extend(f for f in facts if type(f) is Permits)
    return frame


def test_message_permits_decodes_from_hand_built_bytes() -> None:
    link = Link()
    # field 6, varint: tag 0x30; 300 as a two-byte varint: 0xac 0x02
    assert message_command(1, 1, 0, 300) == bytes.fromhex(
        "0809 4a0b 0801 1204 08011000 30ac02"
    )  # 2 + 6 + 3 bytes
    frame = _message(link, 1, 0, 300, 8)
    assert frame.command_name == "MESSAGE"
    assert frame.body.HasField("message_permits") and frame.body.message_permits == 300
    assert frame.body.consumer_id == 1 and frame.body.message_id.entryId == 0
    bare = _message(link, 1, 1, None, 8)
    assert not bare.body.HasField("message_permits")


def test_the_broker_debit_replaces_the_inferred_one() -> None:
    link = Link()
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=20)
    _message(link, 1, 0, 3, 8)  # a batch of 8 of which the broker says it debited 3
    _message(link, 1, 1, None, 4)  # an older broker: 4 inferred from the batch
    _message(link, 1, 2, 0, 2)  # 0 is no debit (PIP-491: 1 to 2**31-1): 2 inferred
    _message(link, 1, 3, 2**31, 9)  # beyond it: 9 inferred
    facts = [(f.frame.command_name, f.left, f.max_batch, f.broker_debit) for f in link.permits]
    assert facts == [
        ("FLOW", 20, 1, False),
        ("MESSAGE", 20 - 3, 8, True),  # its largest batch yet
        ("MESSAGE", 20 - 3 - 4 - 2 - 9, 9, False),  # larger still (the other two: no fact)
    ]
    assert link.state.consumers[1].used == 3 + 4 + 2 + 9


def test_processed_permits_and_redeliveries() -> None:
    """pending = the debits of deliveries neither acknowledged (with or without a
    validation_error) nor delivered again; redeliveries counted for the leak rule."""
    link = Link()
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=50)
    _message(link, 1, 0, 5, 5)
    _message(link, 1, 1, None, 3)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 2))
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(1, 0)], validation_error=2)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=1)
    link.send(C2B, "ACK", consumer_id=1, ack_type=1, message_id=[mid(1, 1)])  # cumulative
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=0)
    link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1, message_ids=[mid(1, 2)])
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 2), redelivery_count=1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=0)
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(1, 2)])
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=0)
    flows = [
        (f.left, f.pending, f.redeliveries) for f in link.permits if f.frame.command_name == "FLOW"
    ]
    used = 5 + 3 + 1
    assert flows == [
        (50, 0, 0),
        (51 - used, 3 + 1, 0),  # the batch of 5 discarded: processed
        (51 - used, 1, 0),  # the 3 acknowledged (cumulative, up to entry 1)
        (51 - used - 1, 1, 2),  # entry 2 delivered again: its first delivery processed
        (51 - used - 1, 0, 2),  # and acknowledged
    ]
    c = link.state.consumers[1]
    assert (c.used, c.processed) == (used + 1, used + 1)


def test_a_consumer_subscribed_again_forgets_its_earlier_debits() -> None:
    link = Link()
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=10)
    _message(link, 1, 0, 4, 4)
    link.send(C2B, "CLOSE_CONSUMER", consumer_id=1, request_id=7)
    _consumer(link, 1)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=10)
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(1, 0)])  # the old one
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=0)
    flows = [(f.left, f.pending) for f in link.permits if f.frame.command_name == "FLOW"]
    assert flows == [(10, 0), (10, 0), (10, 0)]  # its ack processes nothing of the new one
    assert link.state.consumers[1].processed == 0
