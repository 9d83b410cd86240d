"""The state machine's message transitions: SEND -> receipt, MESSAGE -> ACK.

Input: (state, frame, command type, its sub-message, the facts so far) from the machine's
table (`table.TRANSITIONS`), only when facts are wanted (`state.pairing`): otherwise nothing
is kept (the entities count SENDs and deliveries in their own steps).
Output: the completion facts appended (`Pair`): SEND receipted or failed, MESSAGE
acknowledged, redelivered or asked again, stray acks (unmatched, and why if known); after an
ACK's pairs, its `Acked` fact: the consumer's oldest unacknowledged delivery before and after
it, the deliveries it acknowledged, and (with a validation_error) those its ids named (what
the diagnoses' consumer and discard rules read, with no delivery map of their own).
Rules:
- A SEND waits by producer_id, then sequence_id (keys in the order first sent), oldest
  first; SEND_RECEIPT or SEND_ERROR answers the oldest SEND of its key. Its fact says
  whether that key was the producer's first waiting (`Pair.in_order`) and the producer's
  oldest SEND still waiting (`Pair.next_waiting`): what the diagnoses' send timeout and
  receipt order read, with no pending map of their own.
- A MESSAGE is unacknowledged (`Delivered`, by (consumer_id, ledger, entry), in the order
  first delivered and numbered so) until an ACK names it: individual ids, or cumulative
  (everything of that consumer up to the id). A batch-index ack (an ack_set with bits still
  set) acknowledges part of a batch and completes nothing yet (a cumulative one completes
  what comes before that batch). A MESSAGE delivered again keeps its first place, time and
  number; before any ack or redelivery request it is `redelivered` (a pair).
- A delivery's pair waits until an ACK or a redelivery request (all pending without ids)
  names it: the request makes its pair (redelivered), it stays unacknowledged.
- An ack of nothing pending is unmatched; one acknowledged before (remembered up to
  ACKED_MEMORY per consumer) names the packet of its first ack.
- What waits is `held`: ids as plain ints, no decoded command, metadata, payload or bytes.
- A consumer's messages delivered and neither acknowledged nor asked for again are counted
  (`Entity.unacked`: a batch's entries to deliver, as its permits count them; a batch
  acknowledged in part still counts whole).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from dissector.events import Acked, Delivered, Frame, Outcome, Pair
from dissector.facts import bounds, consumed
from dissector.facts.deliveries import Deliveries
from dissector.facts.permits import entries
from dissector.facts.store import Fact, Store
from dissector.pulsar.wire import COMMAND_TYPES, SINGULAR_FIELDS

T = COMMAND_TYPES
_ACK = T["ACK"]
_REDELIVERED = Outcome.REDELIVERED
#: The deliveries of a consumer none was delivered to (shared, never added to).
_NOTHING: Deliveries[Delivered] = Deliveries()


class _Id:
    """A held MESSAGE's message id, as its pair row reads it."""

    __slots__ = ("entryId", "ledgerId")

    def __init__(self, ledger: int, entry: int) -> None:
        self.ledgerId, self.entryId = ledger, entry


class _Ids:
    """What a pair row reads of a held SEND's or MESSAGE's body (pairs.make_pair,
    Entities.lookup): its ids as plain ints, and which are set. A decoded command kept
    alive costs about 1 KB; this about 100 bytes."""

    __slots__ = ("consumer_id", "message_id", "present", "producer_id", "sequence_id")

    def __init__(self, ctype: int, body: Any) -> None:
        fields = SINGULAR_FIELDS.get(ctype, _BODY_IDS)
        self.present = tuple(n for n in _BODY_IDS if n in fields and body.HasField(n))
        self.producer_id = body.producer_id if "producer_id" in self.present else 0
        self.sequence_id = body.sequence_id if "sequence_id" in self.present else 0
        self.consumer_id = body.consumer_id if "consumer_id" in self.present else 0
        mid = body.message_id if "message_id" in self.present else None
        self.message_id = None if mid is None else _Id(mid.ledgerId, mid.entryId)

    def HasField(self, name: str) -> bool:  # the protobuf method it stands for
        return name in self.present


#: The ids of a SEND's and a MESSAGE's body that a pair row reads.
_BODY_IDS = ("consumer_id", "producer_id", "sequence_id", "message_id")


def held(frame: Frame) -> Frame:
    """A SEND or MESSAGE as it waits for its answer: what its pair row reads (its ids,
    times, packets, offset, topic, command name), without its decoded command, metadata,
    payload view or bytes, which kept about 3 KB per frame alive (a consumer that never
    acks holds MAX_PENDING deliveries)."""
    ids = _Ids(frame.command_type, frame.body)
    return frame._replace(
        command=None, body=ids, metadata=None, broker_entry=None, payload=None, raw=None
    )


def on_send(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A SEND waits for its receipt, when facts are wanted: without them nothing reads what
    waits, so nothing is kept (a consumer that never acks held MAX_PENDING deliveries for no
    row)."""
    if not state.pairing:
        return
    waiting = state._sends.get(body.producer_id)
    if waiting is None:
        waiting = state._sends[body.producer_id] = {}
    queue = waiting.get(body.sequence_id)
    if queue is None:
        queue = waiting[body.sequence_id] = deque()
    queue.append(held(frame))
    state._pending += 1


def on_receipt(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """SEND_RECEIPT or SEND_ERROR: answers the oldest SEND of its (producer, sequence); the
    fact says whether that SEND was its producer's oldest waiting, and which one is now."""
    if not state.pairing:
        return
    waiting = state._sends.get(body.producer_id)
    queue = waiting.get(body.sequence_id) if waiting is not None else None
    if not queue:
        facts.append(state.pair(None, frame, None))
        return
    assert waiting is not None
    in_order = next(iter(waiting)) == body.sequence_id
    request = queue.popleft()
    state._pending -= 1
    if not queue:  # one key per message: an emptied queue would stay for good
        del waiting[body.sequence_id]
    next_waiting = next(iter(waiting.values()))[0] if waiting else None
    if not waiting:
        del state._sends[body.producer_id]
    facts.append(state.pair(request, frame, None, in_order=in_order, next_waiting=next_waiting))


def on_message(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A delivery (counted by the entity step): unacknowledged until an ACK names it."""
    if not state.pairing:
        return
    mid = body.message_id
    delivered = state._delivered.get(body.consumer_id)
    if delivered is None:
        delivered = state._delivered[body.consumer_id] = Deliveries()
    key = (mid.ledgerId, mid.entryId)
    record = delivered.live.get(key)
    consumer = state.entities.consumers.get(body.consumer_id)
    size = 1  # counted only for a consumer declared here (Entity.unacked)
    if consumer is not None:
        meta = frame.metadata
        size = entries(meta.num_messages_in_batch if meta is not None else 1, body.ack_set)
    if record is None:
        delivered.add(key, Delivered(held(frame), delivered.next_serial, size))
        state._pending += 1
        if consumer is not None:
            consumer.unacked += size
        return
    if record.waiting:  # delivered again before any ack: the broker redelivered it
        facts.append(state.pair(record.frame, frame, None, ack_of=key, outcome=_REDELIVERED))
    if consumer is not None:
        consumer.unacked += size - (record.size if record.waiting else 0)
    record.frame, record.waiting, record.size = held(frame), True, size
    delivered.add(key, record)  # its latest delivery; its first keeps its place


def on_ack(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """ACK or REDELIVER_UNACKNOWLEDGED_MESSAGES: completes the deliveries it names; an ACK's
    effect on its consumer's unacknowledged deliveries follows its pairs (`Acked`)."""
    if not state.pairing:
        return
    if ctype == _ACK:
        facts.extend(_acked(state, frame, body))
    else:
        facts.extend(_asked_again(state, frame, body))


def _asked_again(state: Store, frame: Frame, body: Any) -> list[Fact]:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: the deliveries it names (all without ids) are
    redelivered, their pairs made; they stay unacknowledged."""
    cid = body.consumer_id
    found = state._delivered.get(cid)
    pairs: list[Fact] = []
    if body.message_ids:
        done = state._acked_ids.setdefault(cid, OrderedDict())
        for mid in body.message_ids:
            key = (mid.ledgerId, mid.entryId)
            record = found.live.get(key) if found is not None else None
            if record is None or not record.waiting:
                pairs.append(_stray(state, frame, key, done))
                continue
            record.waiting = False
            _settled(state, cid, record)
            pairs.append(state.pair(record.frame, frame, None, ack_of=key))
    elif found is not None:
        for key, record in found.latest():
            if record.waiting:
                record.waiting = False
                _settled(state, cid, record)
                pairs.append(state.pair(record.frame, frame, None, ack_of=key))
    return pairs


def _settled(state: Store, cid: int, record: Delivered) -> None:
    """A delivery acknowledged or asked for again: its messages leave its consumer's
    unacknowledged count (`Entity.unacked`)."""
    consumer = state.entities.consumers.get(cid)
    if consumer is not None:
        consumer.unacked -= record.size


def _acked(state: Store, frame: Frame, body: Any) -> list[Fact]:
    """An ACK: its pairs, then its `Acked` fact."""
    cid = body.consumer_id
    found = state._delivered.get(cid, _NOTHING)
    live = found.live
    done_ids = state._acked_ids.setdefault(cid, OrderedDict())
    oldest = next(iter(live.values()), None)
    discarded: tuple[Delivered, ...] = ()
    if body.HasField("validation_error"):
        named = (live.get((mid.ledgerId, mid.entryId)) for mid in body.message_id)
        discarded = tuple(record for record in named if record is not None)
    pairs: list[Fact] = []
    done: list[tuple[tuple[int, int], Delivered]] = []
    highest: tuple[int, int] | None = None
    if body.ack_type == 1:  # cumulative: all up to the id
        partial = False
        for mid in body.message_id:
            upto = (mid.ledgerId, mid.entryId)
            if consumed.partial(mid.ack_set):  # its batch only in part
                record = live.get(upto)
                partial = partial or (record is not None and record.waiting)
                upto = (mid.ledgerId, mid.entryId - 1)
            if highest is None or upto > highest:
                highest = upto
            for key, record in found.take_upto(upto):
                state._pending -= 1
                done.append((key, record))
                if record.waiting:
                    _settled(state, cid, record)
                    pairs.append(state.pair(record.frame, frame, None, ack_of=key))
                    _remember_ack(done_ids, key, frame)
        if not pairs and body.message_id and not partial:
            first = body.message_id[0]
            pairs.append(_stray(state, frame, (first.ledgerId, first.entryId), done_ids))
    else:
        for mid in body.message_id:
            key = (mid.ledgerId, mid.entryId)
            record = live.get(key)
            if record is None or not record.waiting:
                pairs.append(_stray(state, frame, key, done_ids))
            if record is None or consumed.partial(mid.ack_set):
                continue  # a batch-index ack of part of the batch: it stays unacknowledged
            del live[key]
            state._pending -= 1
            done.append((key, record))
            if record.waiting:
                _settled(state, cid, record)
                _remember_ack(done_ids, key, frame)
                pairs.append(state.pair(record.frame, frame, None, ack_of=key))
    left = next(iter(live.values()), None)
    pairs.append(Acked(state.conn_id, frame, cid, oldest, left, tuple(done), discarded, highest))
    return pairs


def _remember_ack(
    done: OrderedDict[tuple[int, int], int], key: tuple[int, int], frame: Frame
) -> None:
    done[key] = frame.last_packet
    if len(done) > bounds.ACKED_MEMORY:
        done.popitem(last=False)


def _stray(
    state: Store,
    frame: Frame,
    key: tuple[int, int],
    done: OrderedDict[tuple[int, int], int],
) -> Pair:
    """An ack or redelivery request for no pending delivery: unmatched, and why if known."""
    pair = state.pair(None, frame, None, ack_of=key)
    earlier = done.get(key)
    if earlier is not None:
        pair = pair._replace(
            error_message=f"already acknowledged (packet {earlier})", first_ack_packet=earlier
        )
    return pair
