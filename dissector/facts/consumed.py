"""What a consumer's MESSAGE and ACK say, as the protocol means them: the journeys' facts.

Input: a MESSAGE's or ACK's sub-message and the connection's entities, from the machine's
table (`table.TRANSITIONS`, after `acks.on_message` / `acks.on_ack`), only when the
journeys read deliveries (`state.consumed`).
Output: per MESSAGE a `Delivering` fact, per ACK an `AckedIds` fact (dissector.events),
appended after the frame's other facts; and the reading of an ack_set every reader shares
(`partial`, `has`, `ACK_WORD`).
Rules:
- An ack_set is a Java BitSet as toLongArray() gives it: signed 64-bit words (ACK_WORD bits
  each), bit i of word i >> 6 standing for batch index i. On a MESSAGE its set bits are the
  entries delivered; on an ACK they are the entries left unacknowledged (its clear bits are
  acknowledged). One with no bit set names no entry apart: the whole entry is meant (the
  fact's `ack_set` is then ()).
- A message id's consumer is the connection's entity of its consumer id (its SUBSCRIBE:
  topic, subscription, type, name), None when the capture missed that SUBSCRIBE.
- An ACK of ack_type Cumulative (1) acknowledges, besides its ids, every message of the
  subscription before them; the batch size an ack says is bounded as any batch's claim
  (dissector.facts.batches.bounded), and not said when below 1.
"""

from __future__ import annotations

from typing import Any

from dissector.events import AckedId, AckedIds, Delivering, Frame
from dissector.facts.batches import bounded
from dissector.facts.store import Fact, Store

__all__ = ["ACK_WORD", "has", "on_ack", "on_message", "partial"]

#: Bits of one ack_set word (Java's BitSet.toLongArray(): 64-bit words): a batch-index ack of
#: a batch the capture did not show can name the entries of the words it carries only.
ACK_WORD = 64
_CUMULATIVE = 1


def partial(ack_set: Any) -> bool:
    """Whether an ack_set names entries apart (a bit set): else it means the whole entry."""
    return len(ack_set) > 0 and any(ack_set)


def has(ack_set: tuple[int, ...], i: int) -> bool:
    """Bit i of an ack_set's words (module rule)."""
    word = i >> 6
    return word < len(ack_set) and bool((ack_set[word] >> (i & 63)) & 1)


def _words(ack_set: Any) -> tuple[int, ...]:
    return tuple(ack_set) if partial(ack_set) else ()


def on_message(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A MESSAGE: its `Delivering` fact, when the journeys read them."""
    if not state.consumed:
        return
    mid = body.message_id
    consumer = state.entities.consumers.get(body.consumer_id)
    facts.append(
        Delivering(
            state.conn_id,
            body.consumer_id,
            consumer,
            mid.ledgerId,
            mid.entryId,
            mid.partition,
            _words(body.ack_set),
            body.redelivery_count,
        )
    )


def on_ack(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """An ACK: its `AckedIds` fact, when the journeys read them."""
    if not state.consumed:
        return
    ids = []
    for mid in body.message_id:
        first = None
        if mid.HasField("first_chunk_message_id"):
            chunk = mid.first_chunk_message_id
            first = (chunk.ledgerId, chunk.entryId)
        size = None
        if mid.HasField("batch_size") and mid.batch_size >= 1:
            size = bounded(mid.batch_size)
        ids.append(
            AckedId(mid.ledgerId, mid.entryId, mid.partition, first, _words(mid.ack_set), size)
        )
    consumer = state.entities.consumers.get(body.consumer_id)
    cumulative = body.ack_type == _CUMULATIVE
    facts.append(AckedIds(state.conn_id, body.consumer_id, consumer, cumulative, tuple(ids)))
