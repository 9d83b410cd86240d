"""FLOW permits per consumer, granted and used: the facts the diagnoses' flow rules read.

Input: FLOW and MESSAGE frames from the machine's table (`table.TRANSITIONS`: after the entity
step, which adds a FLOW's messagePermits to its consumer's `Entity.permits`, and, for a
MESSAGE, after its delivery's transition in `acks.py`), only when facts are wanted
(`state.pairing`): otherwise nothing is counted here.
Output: `Permits` facts appended (events.Permits): one per FLOW, and one per MESSAGE that
leaves its consumer with no permits (or fewer) or delivers its largest batch yet; the
consumer's `Entity.flows`, `.used` and `.max_batch`.
Rules:
- Permits are known only for a consumer created on this connection (its SUBSCRIBE seen):
  its permits left are its FLOWs' messagePermits minus the entries delivered to it. A
  MESSAGE uses its batch's entries (num_messages_in_batch, 1 without metadata) or, with an
  ack_set (a batch delivered again in part), the entries its set bits leave to deliver.
- A FLOW naming a consumer not created here makes a fact with `flows` 0 (its permits
  unknown); a MESSAGE to one makes none.
- A MESSAGE that leaves its consumer permits and delivers no larger batch than before
  changes nothing the rules read: it makes no fact (no object per MESSAGE on the hot path).
"""

from __future__ import annotations

from typing import Any

from dissector.events import Entity, Frame, Permits
from dissector.facts.store import Fact, Store

#: The mask of one word of an ack_set (a signed 64-bit integer on the wire).
_WORD = (1 << 64) - 1


def entries(n: int, ack_set: Any) -> int:
    """Entries of a batch of n still to deliver: set bits of ack_set (all when it is empty)."""
    if not ack_set:
        return n
    left = 0
    for i, word in enumerate(ack_set):
        bits = word & _WORD
        if n - 64 * i < 64:
            bits &= (1 << max(0, n - 64 * i)) - 1
        left += bits.bit_count()
    return left


def left(consumer: Entity) -> int:
    """A consumer's permits left now: its FLOWs' messagePermits minus the entries delivered
    to it (the ledger the Permits facts report, read at any moment: the diagnoses'
    dispatch and broker-stats rules)."""
    return consumer.permits - consumer.used


def on_flow(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A FLOW: its consumer's permits granted (`Entity.permits`, the entity step's) and
    FLOWs counted; its fact."""
    if not state.pairing:
        return
    cid = body.consumer_id
    consumer = state.entities.consumers.get(cid)
    if consumer is None:
        facts.append(Permits(state.conn_id, frame, cid, 0, 0, 1))
        return
    consumer.flows += 1
    left = consumer.permits - consumer.used
    facts.append(Permits(state.conn_id, frame, cid, consumer.flows, left, consumer.max_batch))


def on_message(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A MESSAGE: the permits its entries use; a fact when it leaves none or is the largest
    batch yet."""
    if not state.pairing:
        return
    consumer = state.entities.consumers.get(body.consumer_id)
    if consumer is None:
        return
    meta = frame.metadata
    n = meta.num_messages_in_batch if meta is not None else 1
    consumer.used += entries(n, body.ack_set)
    left = consumer.permits - consumer.used
    if n > consumer.max_batch:
        consumer.max_batch = n
    elif left > 0:
        return
    facts.append(
        Permits(state.conn_id, frame, body.consumer_id, consumer.flows, left, consumer.max_batch)
    )
