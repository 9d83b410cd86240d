"""Consumers holding permits that get no MESSAGE: dispatch.stalled_with_permits.

A consumer the broker stopped dispatching to while the topic's producers were still
receipted, on any connection of the capture (the rule spans connections).

Input: its consumers' lifecycle facts (`on_life`: SUBSCRIBE declared, answered, closed),
their permits' facts after a FLOW (`on_permits`: events.Permits), the MESSAGE, SEND and
ACTIVE_CONSUMER_CHANGE frames (`HANDLERS`), the SEND receipts of every connection
(`on_receipt`: a SEND's completion fact), the broker's CONSUMER_STATS_RESPONSE saying the
consumer is blocked (`blocked`, from dissector.diagnose.stats), the clock (the sweep: `due`,
`tell`, Context.schedule), the connection's end.
Output: one finding row per consumer (every stall it had: their count, the longest), and the
listener told once a stall is established, while it lasts.
Rules:
- Watched: a consumer whose SUBSCRIBE was captured on a connection whole and intact (its
  permits and unacknowledged messages are the facts' ledger: `facts.permits.left`,
  `Entity.unacked`; nothing is counted here).
- A stall of consumer c runs from S to E: S its latest MESSAGE, or the FLOW that gave it
  permits again (from none), or its subscription's SUCCESS; E its next MESSAGE, its close,
  an ACTIVE_CONSUMER_CHANGE making it inactive (Failover: an inactive consumer gets
  nothing, by design), its connection's end or the capture's. Through it c held permits > 0.
- The stall is one when the topic's producers, on any connection of the capture, got a
  SEND_RECEIPT at r1 with S < r1 <= E - dispatch_wait (a message published after S stayed
  undelivered for dispatch_wait) and one at r2 > S + dispatch_wait (still receipted after
  dispatch_wait: the topic is alive), and no other consumer of the subscription got a MESSAGE
  in (S, E] (Shared, Key_Shared and Failover give messages to others by design: a priority
  level, a key range). A receipt of a SEND naming deliver_at_time does not count (delayed
  delivery). A CONSUMER_STATS_RESPONSE saying blockedConsumerOnUnackedMsgs for c within the
  stall, after a receipt r1 > S, is one without waiting for dispatch_wait, whoever else got
  messages: the broker says so.
- Without any receipt of the topic in the capture (the publish side is not in it) nothing is
  said: unknown. Without permits (0 or fewer) it is flow.starved's.
- Bounded: topics and subscriptions remembered up to MAX_KEYS (state.bounded), delayed SENDs
  up to MAX_TRACKED, consumers per connection up to the facts' MAX_ENTITIES; a topic lists a
  consumer once while it waits for a first receipt, up to MAX_TRACKED (the oldest forgotten).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from dissector.diagnose.state import (
    MAX_TRACKED,
    ConnState,
    Context,
    Evidence,
    RuleStep,
    bounded,
    finding,
)
from dissector.events import Entity, Frame, Lifecycle, LifeStep, Pair, Permits
from dissector.facts.bounds import MAX_ENTITIES
from dissector.facts.permits import left
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
_RECEIPT = T["SEND_RECEIPT"]
#: This module's timers (Context.schedule): a consumer whose stall may be established.
KIND = 3


class Topic:
    """One topic's SEND receipts, across connections, and the consumers waiting for one."""

    __slots__ = ("last_packet", "last_ts", "receipts", "waiting")

    def __init__(self) -> None:
        self.receipts = 0  # receipts counted so far
        self.last_ts = self.last_packet = 0
        self.waiting: list[Watch] = []  # stalls with no receipt yet (each listed once)


class Subscribed:
    """One subscription of a topic: its latest MESSAGE to any consumer of the capture."""

    __slots__ = ("last_ts",)

    def __init__(self) -> None:
        self.last_ts = 0


class Across:
    """What spans connections: topics, subscriptions, SENDs for later delivery."""

    __slots__ = ("delayed", "subs", "topics")

    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.subs: dict[tuple[str, str], Subscribed] = {}
        self.delayed: OrderedDict[tuple[int, int, int], None] = OrderedDict()


@dataclass(slots=True)
class Watch:
    """One consumer of a trusted connection; its stall episode and its stalls found."""

    consumer_id: int
    conn: ConnState  # its connection (timers name it)
    entity: Entity  # the facts' record: permits granted and used, unacked
    topic: Topic
    sub: Subscribed
    label: str
    scheduled: int | None = None  # due time of its timer entry (Context.schedule)
    order: int = 0  # its place among the connection's consumers
    open: bool = True
    active: bool = True  # not made inactive by ACTIVE_CONSUMER_CHANGE
    since: int | None = None  # S: the stall's start (None: not subscribed yet, inactive)
    since_packet: int = 0
    permits: int = 0  # held through the stall (a FLOW may add)
    unacked: int = 0  # unacknowledged messages at S
    counted: int = 0  # the topic's receipts at S
    listed: bool = False  # in topic.waiting
    first_ts: int | None = None  # r1: the first receipt after S
    first_packet: int = 0
    blocked_ts: int | None = None  # the broker said blocked within this stall
    blocked_packet: int = 0
    told: bool = False  # the listener heard of this stall
    # the stalls found
    stalls: Evidence = field(default_factory=Evidence)
    longest: int = 0
    held: int = 0  # permits held in the longest
    receipted: int = 0  # receipts during the longest
    unacked_then: int = 0
    broker_blocked: bool = False  # any stall the broker called blocked
    stats: Any = None  # its CONSUMER_STATS requests and answers (stats.Stats)


def _across(ctx: Context) -> Across:
    if ctx.dispatch is None:
        ctx.dispatch = Across()
    across: Across = ctx.dispatch
    return across


def on_life(ctx: Context, conn: ConnState, fact: Lifecycle) -> None:
    """A consumer's step: watched once declared on a trusted connection, its first stall
    from its SUCCESS, ended by its close."""
    step, frame = fact.step, fact.frame
    if step is LifeStep.DECLARED:
        entity = fact.entity
        if entity is None or entity.topic is None or not conn.trusted:
            conn.dispatch.pop(fact.entity_id, None)
            return
        across = _across(ctx)
        topic = bounded(across.topics, entity.topic, Topic)
        sub = bounded(across.subs, (entity.topic, entity.subscription or ""), Subscribed)
        c = conn.consumers.get(fact.entity_id)
        kind = f", {entity.sub_type}" if entity.sub_type else ""
        label = f"consumer {fact.entity_id} (sub {entity.subscription}{kind})"
        order = 0 if c is None else c.order
        w = Watch(fact.entity_id, conn, entity, topic, sub, label, order=order)
        conn.dispatch[fact.entity_id] = w
        if len(conn.dispatch) > MAX_ENTITIES:  # the facts' bound on a connection's consumers
            del conn.dispatch[next(iter(conn.dispatch))]
        return
    watched: Watch | None = conn.dispatch.get(fact.entity_id)
    if watched is None or step is LifeStep.MIGRATED:
        return
    if step is LifeStep.CREATED:
        _start(ctx, conn, watched, frame)
    elif watched.open:  # failed, or closed by either side
        _end(ctx, conn, watched, frame.last_ts, frame)
        watched.open = False


def _start(ctx: Context, conn: ConnState, w: Watch, frame: Frame) -> None:
    """A stall may begin at `frame` (a MESSAGE, a FLOW giving permits, the SUCCESS)."""
    w.since, w.since_packet = frame.last_ts, frame.last_packet
    w.permits = left(w.entity)
    w.unacked = w.entity.unacked
    w.counted = w.topic.receipts
    w.first_ts, w.blocked_ts, w.told = None, None, False
    if not w.listed and w.open and w.active:
        waiting = w.topic.waiting
        waiting.append(w)
        w.listed = True
        if len(waiting) > MAX_TRACKED:  # consumers come and go on a topic never receipted
            for gone in waiting[: len(waiting) - MAX_TRACKED * 9 // 10]:
                gone.listed = False  # forgotten: its stall waits for nothing
            del waiting[: len(waiting) - MAX_TRACKED * 9 // 10]


def on_message(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A delivery: its consumer's stall ends (and another may begin); its subscription got
    a MESSAGE (other consumers' stalls are not the broker's fault)."""
    w = conn.dispatch.get(body.consumer_id)
    if w is None:
        c = conn.consumers.get(body.consumer_id)
        if c is not None and c.topic is not None and ctx.dispatch is not None:
            sub = ctx.dispatch.subs.get((c.topic, c.subscription or ""))
            if sub is not None:
                sub.last_ts = frame.last_ts
        return
    if w.open and w.active:
        _end(ctx, conn, w, frame.last_ts, frame)
        _start(ctx, conn, w, frame)
    w.sub.last_ts = frame.last_ts


def on_permits(ctx: Context, conn: ConnState, fact: Permits) -> None:
    """A FLOW: permits given to a consumer that had none begin its stall; more permits to
    one that had some are held through its stall."""
    w = conn.dispatch.get(fact.consumer_id)
    if w is None or not fact.flows or w.since is None:
        return
    frame = fact.frame
    if w.permits <= 0:
        if fact.left > 0:
            _start(ctx, conn, w, frame)
    else:
        w.permits = fact.left


def on_active(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """ACTIVE_CONSUMER_CHANGE: an inactive Failover consumer gets nothing by design."""
    w = conn.dispatch.get(body.consumer_id)
    if w is None or not w.open:
        return
    active = bool(body.is_active)
    if active == w.active:
        return
    if not active and w.since is not None:
        _end(ctx, conn, w, frame.last_ts, frame)
        w.since = None
    w.active = active
    if active:
        _start(ctx, conn, w, frame)


def on_send(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A SEND for later delivery (deliver_at_time): its receipt proves no dispatch due."""
    meta = frame.metadata
    if meta is not None and meta.HasField("deliver_at_time"):
        delayed = _across(ctx).delayed
        delayed[(conn.conn_id, body.producer_id, body.sequence_id)] = None
        if len(delayed) > MAX_TRACKED:
            delayed.popitem(last=False)


def on_receipt(ctx: Context, conn: ConnState, pair: Pair) -> None:
    """A SEND receipted: its topic's producers are alive; stalls waiting for a first
    receipt have one."""
    answer = pair.response
    if answer is None or answer.command_type != _RECEIPT or pair.topic is None:
        return
    across = _across(ctx)
    key = (conn.conn_id, pair.producer_id or 0, pair.sequence_id or 0)
    if across.delayed and key in across.delayed:
        del across.delayed[key]
        return  # delivered later by design
    topic = bounded(across.topics, pair.topic, Topic)
    topic.receipts += 1
    ts = answer.last_ts
    topic.last_ts, topic.last_packet = ts, answer.last_packet
    waiting, topic.waiting = topic.waiting, []
    for w in waiting:
        if w.since is not None and w.since >= ts and w.open:
            topic.waiting.append(w)  # began with this receipt's time: the next one
            continue
        w.listed = False
        if w.first_ts is None and w.since is not None and w.open:
            w.first_ts, w.first_packet = ts, answer.last_packet
            ctx.schedule(_due(ctx, w), KIND, w.conn, w, w.consumer_id)


def blocked(ctx: Context, conn: ConnState, cid: int, frame: Frame) -> None:
    """The broker answered that consumer `cid` is blocked on unacked messages."""
    w = conn.dispatch.get(cid)
    if w is None or w.since is None or frame.last_ts <= w.since:
        return
    if w.blocked_ts is None:
        w.blocked_ts, w.blocked_packet = frame.last_ts, frame.last_packet
        ctx.schedule(_due(ctx, w), KIND, conn, w, cid)


def _quiet(w: Watch, since: int) -> bool:
    """No other consumer of the subscription got a MESSAGE since `since`."""
    return w.sub.last_ts <= since


def _established(ctx: Context, w: Watch, end: int) -> bool:
    """Whether the stall from w.since to `end` is one (the module's rule)."""
    since, first = w.since, w.first_ts
    if since is None or first is None or w.permits <= 0 or not w.active:
        return False
    if w.blocked_ts is not None and w.blocked_ts <= end:
        return True
    wait = ctx.us["dispatch_wait"]
    return first <= end - wait and w.topic.last_ts > since + wait and _quiet(w, since)


def _due(ctx: Context, w: Watch) -> int | None:
    """The time after which the stall is established (None: it cannot be, as things
    stand); ctx.now + 1 when only a later receipt can make it one (looked at again)."""
    since, first = w.since, w.first_ts
    if w.told or not w.open or since is None or first is None or w.permits <= 0:
        return None
    if not w.active:
        return None
    if w.blocked_ts is not None:
        return max(w.blocked_ts, first)
    if not _quiet(w, since):
        return None
    wait = ctx.us["dispatch_wait"]
    at = max(first + wait, since + wait)
    if w.topic.last_ts > since + wait:
        return at
    return max(at, ctx.now + 1)


def due(ctx: Context, conn: ConnState, w: Watch) -> int | None:
    return _due(ctx, w) if conn.trusted else None


def tell(ctx: Context, conn: ConnState, w: Watch, now: int) -> None:
    """Tell the listener of a stall established now (the sweep calls it once `due` has
    passed)."""
    if w.told or w.since is None or not _established(ctx, w, now):
        return
    w.told = True
    ctx.established(_row(ctx, conn, w, Evidence(), now - w.since, ts=now))


def _end(ctx: Context, conn: ConnState, w: Watch, end: int, frame: Frame | None) -> None:
    """The stall from w.since ends at `end`: one, if the rule says so."""
    since = w.since
    if since is None or not conn.trusted or not _established(ctx, w, end):
        return
    w.stalls.add_at(w.since_packet, since)
    assert w.first_ts is not None
    w.stalls.add_at(w.first_packet, w.first_ts, count=0)
    if w.blocked_ts is not None:
        w.stalls.add_at(w.blocked_packet, w.blocked_ts, count=0)
        w.broker_blocked = True
    if w.topic.last_ts <= end:
        w.stalls.add_at(w.topic.last_packet, w.topic.last_ts, count=0)
    if frame is not None:
        w.stalls.add_at(frame.last_packet, frame.last_ts, count=0)
    if end - since >= w.longest:
        w.longest, w.held, w.unacked_then = end - since, w.permits, w.unacked
        w.receipted = w.topic.receipts - w.counted
    w.since = None


def _row(
    ctx: Context, conn: ConnState, w: Watch, ev: Evidence, took: int, *, ts: int | None = None
) -> Any:
    told = ts is not None
    held = w.permits if told else w.held
    receipts = w.topic.receipts - w.counted if told else w.receipted
    unacked = w.unacked if told else w.unacked_then
    blocked_flag = (w.blocked_ts is not None) if told else w.broker_blocked
    summary = (
        f"{w.label} got no MESSAGE for {took / 1e6:.1f} s holding {held} permits while the "
        f"topic's producers got {receipts} SEND_RECEIPTs; {unacked} messages delivered to it "
        "were unacknowledged when it began"
        + ("; the broker said blockedConsumerOnUnackedMsgs" if blocked_flag else "")
    )
    if not told and w.stalls.count > 1:
        summary += f" ({w.stalls.count} stalls, the longest shown)"
    return finding(
        FindingCode.DISPATCH_STALLED_WITH_PERMITS,
        ev,
        conn=conn,
        ts=ts,
        topic=w.entity.topic,
        entity=w.label,
        summary=summary,
        value=took / 1e6,
        unit="s",
    )


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended at `horizon`: its consumers' stalls end; one row each."""
    for w in conn.dispatch.values():
        if w.open:
            _end(ctx, conn, w, horizon, None)
            w.open = False
        if w.stalls:
            ctx.emit(_row(ctx, conn, w, w.stalls, w.longest))


HANDLERS: dict[int, RuleStep] = {
    T["MESSAGE"]: on_message,
    T["SEND"]: on_send,
    T["ACTIVE_CONSUMER_CHANGE"]: on_active,
}
