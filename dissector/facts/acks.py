"""The state machine's message transitions: SEND -> receipt, MESSAGE -> ACK.

Input: (state, frame, command type, its sub-message, the facts so far) from the machine's
table (`table.TRANSITIONS`), only when facts are wanted (`state.pairing`): otherwise nothing
is kept (the entities count SENDs and deliveries in their own steps).
Output: the completion facts appended (`Pair`): SEND receipted or failed, MESSAGE
acknowledged, redelivered or asked again, stray acks (unmatched, and why if known).
Rules:
- A SEND waits by producer_id, then sequence_id (keys in the order first sent), oldest
  first; SEND_RECEIPT or SEND_ERROR answers the oldest SEND of its key. Its fact says
  whether that key was the producer's first waiting (`Pair.in_order`) and the producer's
  oldest SEND still waiting (`Pair.next_waiting`): what the diagnoses' send timeout and
  receipt order read, with no pending map of their own.
- MESSAGE waits by (consumer_id, ledger, entry) until acknowledged: individual ids,
  cumulative (everything of that consumer up to the id), or a redelivery request (all
  pending without ids). A batch-index ack (an ack_set with bits still set) acknowledges part
  of a batch and completes nothing yet (a cumulative one completes what comes before that
  batch). A MESSAGE delivered again before any ack is `redelivered`.
- An ack of nothing pending is unmatched; one acknowledged before (remembered up to
  ACKED_MEMORY per consumer) names the packet of its first ack.
- What waits is `held`: ids as plain ints, no decoded command, metadata, payload or bytes.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

from dissector.events import Frame, Outcome, Pair
from dissector.facts import bounds
from dissector.facts.deliveries import Deliveries
from dissector.facts.store import Fact, Store
from dissector.pulsar.wire import COMMAND_TYPES, SINGULAR_FIELDS

T = COMMAND_TYPES
_ACK, _REDELIVER = T["ACK"], T["REDELIVER_UNACKNOWLEDGED_MESSAGES"]


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
    """A delivery (counted by the entity step): pending until acknowledged."""
    if not state.pairing:
        return
    mid = body.message_id
    delivered = state._delivered.get(body.consumer_id)
    if delivered is None:
        delivered = state._delivered[body.consumer_id] = Deliveries()
    key = (mid.ledgerId, mid.entryId)
    old = delivered.add(key, held(frame))
    if old is not None:  # delivered again before any ack: the broker redelivered it
        facts.append(state.pair(old, frame, None, ack_of=key, outcome=Outcome.REDELIVERED))
    else:
        state._pending += 1


def on_ack(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """ACK or REDELIVER_UNACKNOWLEDGED_MESSAGES: completes the deliveries it names."""
    if not state.pairing:
        return
    facts.extend(_acked(state, frame, ctype, body))


def _acked(state: Store, frame: Frame, ctype: int, body: Any) -> list[Pair]:
    cid = body.consumer_id
    found = state._delivered.get(cid)
    delivered = found.live if found is not None else OrderedDict()
    done = state._acked_ids.setdefault(cid, OrderedDict())
    ids = body.message_id if ctype == _ACK else body.message_ids
    pairs = []
    if ctype == _ACK and body.ack_type == 1:  # cumulative: all up to the id
        partial = False
        for mid in ids:
            upto = (mid.ledgerId, mid.entryId)
            if len(mid.ack_set) > 0 and any(mid.ack_set):  # its batch only in part
                partial = partial or upto in delivered
                upto = (mid.ledgerId, mid.entryId - 1)
            covered = found.take_upto(upto) if found else []
            for key, delivery in covered:
                pairs.append(state.pair(delivery, frame, None, ack_of=key))
                state._pending -= 1
                _remember_ack(done, key, frame)
        if not pairs and ids and not partial:
            key = (ids[0].ledgerId, ids[0].entryId)
            pairs.append(_stray(state, frame, key, done))
        return pairs
    if ctype == _REDELIVER and not ids:  # redeliver everything unacked
        for key in list(delivered):
            pairs.append(state.pair(delivered.pop(key), frame, None, ack_of=key))
            state._pending -= 1
        return pairs
    for mid in ids:
        key = (mid.ledgerId, mid.entryId)
        request = delivered.get(key)
        if request is None:
            pairs.append(_stray(state, frame, key, done))
            continue
        if ctype == _ACK and len(mid.ack_set) > 0 and any(mid.ack_set):
            continue  # batch-index ack of part of the batch: the delivery stays pending
        del delivered[key]
        state._pending -= 1
        if ctype == _ACK:
            _remember_ack(done, key, frame)
        pairs.append(state.pair(request, frame, None, ack_of=key))
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
