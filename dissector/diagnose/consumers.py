"""Consumer rules on one connection: FLOW and permits, acks, holes, redeliveries.

Input: the connection's MESSAGE and REDELIVER_UNACKNOWLEDGED_MESSAGES frames (`HANDLERS`),
its consumers' lifecycle facts (`on_life`: events.Lifecycle, SUBSCRIBE declared, answered
SUCCESS or ERROR, CLOSE_CONSUMER from either side), the facts of its consumers' permits
(`on_permits`: events.Permits, after each FLOW and each MESSAGE that left its consumer none
or was its largest batch yet), the facts of its ACKs (`on_acked`: events.Acked, the
deliveries each acknowledged, numbered in first-delivery order, and its consumer's oldest
unacknowledged one before and after; the facts keep them, a redelivery keeping its first
place), the clock (the sweep: `due`, `tell`, the engine's timers, Context.schedule), its
end.
Output: findings flow.no_flow_after_subscribe, flow.starved, flow.overshoot,
consumer.ack_hole and consumer.redelivery_storm, one row per consumer; deliveries and acks
are also handed to dissector.diagnose.spanning (consumer.redelivered_after_ack follows a
subscription across connections).
Rules:
- Permits are counted by the facts (dissector.facts.permits: + FLOW messagePermits, - each
  MESSAGE's entries, its ack_set applied); this module counts none. They are judged only
  for a consumer whose SUBSCRIBE was captured on an intact connection.
- no FLOW within flow_wait of the SUBSCRIBE's SUCCESS (the first one later, or none until
  the consumer or connection ended): flow.no_flow_after_subscribe.
- permits at 0 (after at least one FLOW) for longer than flow_wait without a FLOW:
  flow.starved; permits below minus the largest batch delivered, and MESSAGE commands more
  than one beyond the permits (a broker estimating batch sizes, as Apache's default
  dispatch does, may send as many batches as permits): flow.overshoot.
- the oldest delivered-but-unacknowledged message older than ack_timeout while a message
  delivered after it was acknowledged: consumer.ack_hole (a batch-index ack with bits still
  set acknowledges nothing yet).
- at least `redeliveries` redelivery requests, or a MESSAGE whose redelivery_count reaches
  it: consumer.redelivery_storm. A request is a burst of REDELIVER_UNACKNOWLEDGED_MESSAGES:
  those within BURST_US of the burst's first count once (a client nacking a poll of n
  messages may send n commands of one id each at once: pulsar-rs does); a storm is the
  client asking again and again, not how many ids it names.
"""

from __future__ import annotations

from typing import Any

from dissector.diagnose.state import (
    ConnState,
    ConsumerState,
    Context,
    Evidence,
    RuleStep,
    finding,
)
from dissector.events import Acked, Delivered, Frame, Lifecycle, LifeStep, Permits
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
_FLOW = T["FLOW"]
#: This module's timers (Context.schedule): a consumer without permits or first FLOW.
KIND = 2
#: REDELIVER_UNACKNOWLEDGED_MESSAGES within this many µs of a burst's first are one request
#: (pulsar-rs sends a nack of n messages as n commands, microseconds apart).
BURST_US = 10_000


def consumer_of(conn: ConnState, frame: Frame, cid: int) -> ConsumerState:
    """The consumer of `cid`, made (permits unknown) when the capture missed its SUBSCRIBE."""
    c = conn.consumers.get(cid)
    if c is None:
        c = conn.add_consumer(ConsumerState(cid, frame.topic, None, frame.last_ts))
        c.known = False
    return c


def on_life(ctx: Context, conn: ConnState, fact: Lifecycle) -> None:
    """A consumer's step (dissector.facts.lifecycles): SUBSCRIBE declares it, SUCCESS
    subscribes it, ERROR or a CLOSE_CONSUMER from either side closes it (a migration tells
    these rules nothing: spanning.py reads it)."""
    step, frame = fact.step, fact.frame
    if step is LifeStep.DECLARED:
        entity = fact.entity
        assert entity is not None  # the SUBSCRIBE made it
        made = ConsumerState(fact.entity_id, entity.topic, entity.subscription, frame.last_ts)
        made.known = conn.intact
        made.subscribing = True
        conn.add_consumer(made)
        return
    if step is LifeStep.MIGRATED:
        return
    c = conn.consumers.get(fact.entity_id)
    if c is None:
        return
    if step is LifeStep.CREATED:
        c.subscribing = False
        c.subscribed_ts, c.subscribed_packet = frame.last_ts, frame.last_packet
        ctx.schedule(due(ctx, conn, c), KIND, conn, c, c.consumer_id)
    elif step is LifeStep.FAILED:
        c.subscribing = False
        c.open = False
    elif c.open:  # closed by either side
        c.open = False
        _end(ctx, conn, c, frame.last_ts)


def on_permits(ctx: Context, conn: ConnState, fact: Permits) -> None:
    """A consumer's permits after a FLOW, or after a MESSAGE that left it none (or was its
    largest batch yet): a late first FLOW, a starvation's start or end, an overshoot."""
    frame = fact.frame
    c = consumer_of(conn, frame, fact.consumer_id)
    if frame.command_type == _FLOW:
        if fact.flows == 1 and c.known and c.subscribed_ts is not None:  # first: late?
            waited = frame.last_ts - c.subscribed_ts
            if waited > ctx.us["flow_wait"]:
                c.no_flow, c.no_flow_packet = waited, frame.last_packet
        c.flows = fact.flows
        _fed(ctx, c, frame.last_ts, frame)
        return
    c.max_batch = fact.max_batch
    if c.known and conn.intact:
        left = fact.left
        if left < -c.max_batch and fact.entries_left < -1:
            if not c.overshoot:
                c.overshoot_worst = 0
            c.overshoot.add(frame)
            c.overshoot_worst = min(c.overshoot_worst, left)
        if left <= 0 and c.flows and c.starved_since is None:
            c.starved_since, c.starved_packet = frame.last_ts, frame.last_packet
            ctx.schedule(due(ctx, conn, c), KIND, conn, c, c.consumer_id)


def _fed(ctx: Context, c: ConsumerState, now: int, frame: Frame | None) -> None:
    """A starvation episode ends (FLOW, close, end of capture)."""
    since = c.starved_since
    if since is None:
        return
    c.starved_since = None
    if now - since > ctx.us["flow_wait"]:
        c.starved.add_at(c.starved_packet, since)
        if frame is not None:
            c.starved.add_at(frame.last_packet, frame.last_ts, count=0)
        c.starved_longest = max(c.starved_longest, now - since)


def on_message(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A delivery: redelivered, and handed to the subscription (its permits: `on_permits`)."""
    c = consumer_of(conn, frame, body.consumer_id)
    if body.redelivery_count > 0:
        c.redelivered.add(frame)
        c.max_redelivery_count = max(c.max_redelivery_count, body.redelivery_count)
    if ctx.span is not None:
        mid = body.message_id
        ctx.span.delivered(conn, c, (mid.ledgerId, mid.entryId), frame)


def on_acked(ctx: Context, conn: ConnState, fact: Acked) -> None:
    """An ACK's fact: the deliveries it acknowledged, its consumer's oldest before and after."""
    frame, body = fact.ack, fact.ack.body
    c = consumer_of(conn, frame, fact.consumer_id)
    oldest, done = fact.oldest, fact.done
    # an ack in a transaction holds only if the transaction commits: an abort makes the
    # broker deliver those messages again, so the subscription is not told of it
    span = None if _transactional(body) else ctx.span
    # an ACK for a consumer the broker does not hold (its SUBSCRIBE not answered yet, or
    # closed) is dropped by the broker: it acknowledges nothing for the subscription
    if c.subscribing or not c.open:
        span = None
    # only acks of deliveries the capture holds count for the subscription: an id acked
    # before it was delivered (or delivered before the capture began) proves nothing
    if done and span is not None:
        if fact.upto is not None:  # cumulative
            span.acked(c, fact.upto, cumulative=True, ack=frame)
        else:
            for key, _ in done:
                span.acked(c, key, cumulative=False, ack=frame)
    closed = False
    for _, delivered in done:
        if delivered is oldest:
            closed = True
        else:
            c.acked_after = max(c.acked_after, delivered.number)
    if closed:
        assert oldest is not None
        _hole_closed(ctx, c, oldest, frame.last_ts, frame)
    c.oldest = fact.left


def _transactional(body: Any) -> bool:
    return bool(body.HasField("txnid_least_bits") or body.HasField("txnid_most_bits"))


def _hole_closed(
    ctx: Context, c: ConsumerState, oldest: Delivered, now: int, frame: Frame | None
) -> None:
    """The oldest unacked delivery was acked (or the consumer ended): was it a hole?"""
    delivered_ts = oldest.first_ts
    age = now - delivered_ts
    if c.acked_after > oldest.number and age > ctx.us["ack_timeout"]:
        c.hole.add_at(oldest.first_packet, delivered_ts)
        if frame is not None:
            c.hole.add_at(frame.last_packet, frame.last_ts, count=0)
        c.hole_age = max(c.hole_age, age)


def on_redeliver(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    c = consumer_of(conn, frame, body.consumer_id)
    c.redeliver_commands += 1
    if c.redeliver_requests and frame.last_ts - c.redeliver_burst <= BURST_US:
        return  # the same request, sent as several commands
    c.redeliver_burst = frame.last_ts
    c.redeliver_requests.add(frame)


def _end(ctx: Context, conn: ConnState, c: ConsumerState, now: int) -> None:
    """A consumer ends (closed, or its connection ended at `now`)."""
    _fed(ctx, c, now, None)
    if c.oldest is not None:
        _hole_closed(ctx, c, c.oldest, now, None)
    waited = now - (c.subscribed_ts if c.subscribed_ts is not None else now)
    if c.known and not c.flows and waited > ctx.us["flow_wait"]:
        c.no_flow = waited


def due(ctx: Context, conn: ConnState, c: ConsumerState) -> int | None:
    """The time after which `c` has had no permits (or no first FLOW) for longer than
    flow_wait (None: it has permits, is closed, or was told of)."""
    since = _since(c)
    return None if since is None else since + ctx.us["flow_wait"]


def _since(c: ConsumerState) -> int | None:
    """Since when `c` has had no permits, or waited for its first FLOW (open, not told)."""
    if c.starved_told or not c.open:
        return None
    if c.starved_since is None and c.known and c.flows == 0 and c.subscribed_ts is not None:
        return c.subscribed_ts
    return c.starved_since


def tell(ctx: Context, conn: ConnState, c: ConsumerState, now: int) -> None:
    """Tell the listener of a consumer that just became starved or waiting for FLOW (the
    sweep calls it once `due` has passed)."""
    since = _since(c)
    if since is None:
        return
    c.starved_told = True
    code = FindingCode.FLOW_STARVED if c.flows else FindingCode.FLOW_NO_FLOW_AFTER_SUBSCRIBE
    ctx.established(
        finding(
            code,
            Evidence(),
            conn=conn,
            ts=now,
            topic=c.topic,
            entity=c.label(),
            summary=f"{c.label()} has had 0 permits for {(now - since) / 1e6:.1f} s; "
            "the client sent no FLOW",
            value=(now - since) / 1e6,
            unit="s",
        )
    )


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended at `horizon`: one row per consumer and fault."""
    for c in conn.consumers.values():
        if c.open:
            _end(ctx, conn, c, horizon)
        label, topic = c.label(), c.topic
        if c.no_flow:
            ev = Evidence()
            ev.add_at(c.subscribed_packet, c.subscribed_ts or 0)
            if c.no_flow_packet:  # the FLOW that came at last
                ev.add_at(c.no_flow_packet, (c.subscribed_ts or 0) + c.no_flow, count=0)
            ctx.emit(
                finding(
                    FindingCode.FLOW_NO_FLOW_AFTER_SUBSCRIBE,
                    ev,
                    conn=conn,
                    ts=(c.subscribed_ts or 0) + ctx.us["flow_wait"],
                    topic=topic,
                    entity=label,
                    summary=f"{label} subscribed and the client sent no FLOW for "
                    f"{c.no_flow / 1e6:.1f} s ("
                    + (
                        "until its first FLOW)"
                        if c.no_flow_packet
                        else "until it closed or the capture ended)"
                    ),
                    value=c.no_flow / 1e6,
                    unit="s",
                )
            )
        if c.starved:
            ctx.emit(
                finding(
                    FindingCode.FLOW_STARVED,
                    c.starved,
                    conn=conn,
                    ts=c.starved.first_ts + ctx.us["flow_wait"],
                    topic=topic,
                    entity=label,
                    summary=f"{label} had 0 permits for up to {c.starved_longest / 1e6:.1f} s "
                    "with no FLOW from the client",
                    value=c.starved_longest / 1e6,
                    unit="s",
                )
            )
        if c.overshoot:
            ctx.emit(
                finding(
                    FindingCode.FLOW_OVERSHOOT,
                    c.overshoot,
                    conn=conn,
                    topic=topic,
                    entity=label,
                    summary=f"the broker delivered {c.overshoot.count} MESSAGEs to {label} "
                    f"beyond its permits and one batch ({c.max_batch}); permits fell to "
                    f"{c.overshoot_worst}",
                    value=float(-c.overshoot_worst),
                    unit="permits",
                )
            )
        if c.hole:
            ctx.emit(
                finding(
                    FindingCode.CONSUMER_ACK_HOLE,
                    c.hole,
                    conn=conn,
                    ts=c.hole.first_ts + ctx.us["ack_timeout"],
                    topic=topic,
                    entity=label,
                    summary=f"{label}: a delivered message stayed unacknowledged for "
                    f"{c.hole_age / 1e6:.1f} s while later ones were acknowledged",
                    value=c.hole_age / 1e6,
                    unit="s",
                )
            )
        _storm(ctx, conn, c)


def _storm(ctx: Context, conn: ConnState, c: ConsumerState) -> None:
    limit = ctx.th.redeliveries
    asked, again = c.redeliver_requests, c.redelivered
    if asked.count < limit and c.max_redelivery_count < limit:
        return
    ev = asked if asked.count >= limit else again
    label = c.label()
    gaps = ""
    if c.redeliver_commands > asked.count:
        gaps = f" ({c.redeliver_commands} commands)"
    if asked.count >= 2:
        gaps += f", every {(asked.last_ts - asked.first_ts) / (asked.count - 1) / 1e6:.1f} s"
    ctx.emit(
        finding(
            FindingCode.CONSUMER_REDELIVERY_STORM,
            ev,
            conn=conn,
            topic=c.topic,
            entity=label,
            summary=f"{label}: {asked.count} redelivery requests{gaps}; "
            f"{again.count} messages redelivered, redelivery_count up to "
            f"{c.max_redelivery_count}",
            value=float(max(asked.count, c.max_redelivery_count)),
            unit="redeliveries",
        )
    )


HANDLERS: dict[int, RuleStep] = {
    T["MESSAGE"]: on_message,
    T["REDELIVER_UNACKNOWLEDGED_MESSAGES"]: on_redeliver,
}
