"""FLOW permits per consumer, granted, used and processed: the facts the flow rules read.

Input: FLOW, MESSAGE, SUBSCRIBE, ACK and REDELIVER_UNACKNOWLEDGED_MESSAGES frames from the
machine's table (`table.TRANSITIONS`: after the entity step, which adds a FLOW's
messagePermits to its consumer's `Entity.permits`; for a MESSAGE, after its delivery's
transition in `acks.py`; for an ACK, after its `Acked` fact), only when facts are wanted
(`state.pairing`): otherwise nothing is counted here.
Output: `Permits` facts appended (events.Permits): one per FLOW, and one per MESSAGE that
leaves its consumer with no permits (or fewer) or delivers its largest batch yet; the
consumer's `Entity.flows`, `.used`, `.entries` (MESSAGE commands), `.max_batch`,
`.processed`, `.redeliveries`, and each delivery's debit (`Delivered.permits`); per MESSAGE
fact, `entries_left`: its FLOWs' permits minus the MESSAGE commands delivered.
Rules:
- Permits are known only for a consumer created on this connection (its SUBSCRIBE seen):
  its permits left are its FLOWs' messagePermits minus the permits its deliveries used.
- A MESSAGE's debit (`debit`) is the broker's own when it says it: CommandMessage
  .message_permits (apache/pulsar PIP-491: the permits the broker debited for that command,
  the logical messages it delivers, 1 to 2**31-1; absent from older brokers, and a value
  out of that range is a protocol fault, not a debit). Otherwise the facts infer it as the
  broker counts: its batch's entries (num_messages_in_batch, 1 without metadata) or, with
  an ack_set (a batch delivered again in part), the entries its set bits leave to deliver.
- A delivery is processed (its debit added to `Entity.processed`) when an ACK completes it
  (an acknowledgement, or a discard: an ACK with a validation_error), or when the broker
  delivers its id again while it waits (the client had it and let it go). `used -
  processed` is the consumer's `pending`: what the client may still hold.
- Redeliveries are counted (a MESSAGE with a redelivery_count, or of an id delivered and
  still waiting, or acknowledged before; each REDELIVER_UNACKNOWLEDGED_MESSAGES): the leak
  rule starts its judgement again after one.
- A consumer id subscribed again starts a new consumer: the debits of deliveries made to its
  earlier life are forgotten (`Delivered.permits` 0), so their acks process nothing.
- A FLOW naming a consumer not created here makes a fact with `flows` 0 (its permits
  unknown); a MESSAGE to one makes none.
- A MESSAGE that leaves its consumer permits and delivers no larger batch than before
  changes nothing the rules read: it makes no fact (no object per MESSAGE on the hot path).
"""

from __future__ import annotations

from typing import Any

from dissector.events import Acked, Entity, Frame, Permits
from dissector.facts.store import Fact, Store
from dissector.pulsar.wire import COMMAND_TYPES

_ACK = COMMAND_TYPES["ACK"]

#: The mask of one word of an ack_set (a signed 64-bit integer on the wire).
_WORD = (1 << 64) - 1
#: The largest message_permits PIP-491 allows (Java reads it as a signed int).
MAX_DEBIT = (1 << 31) - 1


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


def debit(n: int, body: Any) -> tuple[int, bool]:
    """The permits a MESSAGE of a batch of n debits its consumer, and whether the broker
    said so (message_permits) rather than the facts inferring it."""
    if body.HasField("message_permits"):
        said = body.message_permits
        if 1 <= said <= MAX_DEBIT:
            return said, True
    return entries(n, body.ack_set), False


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
    facts.append(
        Permits(
            state.conn_id,
            frame,
            cid,
            consumer.flows,
            left,
            consumer.max_batch,
            consumer.used - consumer.processed,
            consumer.redeliveries,
        )
    )


def on_message(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A MESSAGE: the permits it debits; a fact when it leaves none or is the largest batch
    yet."""
    if not state.pairing:
        return
    cid = body.consumer_id
    consumer = state.entities.consumers.get(cid)
    if consumer is None:
        return
    meta = frame.metadata
    n = meta.num_messages_in_batch if meta is not None else 1
    used, said = debit(n, body)
    consumer.used += used
    consumer.entries += 1
    mid = body.message_id
    key = (mid.ledgerId, mid.entryId)
    delivered = state._delivered.get(cid)
    record = delivered.live.get(key) if delivered is not None else None
    again = body.redelivery_count > 0
    if record is not None:  # acks.on_message made or kept it
        if record.first_packet != frame.last_packet:  # delivered again while waiting
            consumer.processed += record.permits
            again = True
        record.permits = used
    acked = state._acked_ids.get(cid)
    if again or (acked is not None and key in acked):
        consumer.redeliveries += 1
    left = consumer.permits - consumer.used
    batch = max(n, used)
    if batch > consumer.max_batch:
        consumer.max_batch = batch
    elif left > 0:
        return
    facts.append(
        Permits(
            state.conn_id,
            frame,
            cid,
            consumer.flows,
            left,
            consumer.max_batch,
            consumer.used - consumer.processed,
            consumer.redeliveries,
            said,
            consumer.permits - consumer.entries,
        )
    )


def on_ack(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """An ACK, after its `Acked` fact: the deliveries it completed are processed; a
    REDELIVER_UNACKNOWLEDGED_MESSAGES is a redelivery asked for."""
    if not state.pairing:
        return
    consumer = state.entities.consumers.get(body.consumer_id)
    if consumer is None:
        return
    if ctype != _ACK:
        consumer.redeliveries += 1
        return
    fact = facts[-1] if facts else None
    if type(fact) is Acked:
        for _, record in fact.done:  # each taken out of what waits: processed once
            consumer.processed += record.permits


def on_subscribe(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A SUBSCRIBE: a consumer id subscribed again forgets its earlier life's debits."""
    if not state.pairing:
        return
    delivered = state._delivered.get(body.consumer_id)
    if delivered is not None:
        for record in delivered.live.values():
            record.permits = 0
