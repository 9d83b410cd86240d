"""A consumer that returns fewer permits than it used: flow.permit_leak.

Input: the facts of the connection's consumers' permits (`on_permits`: events.Permits after
each FLOW: permits left, permits of deliveries not processed yet, redeliveries so far), of
its ACKs (`on_acked`: events.Acked, the deliveries a validation_error discarded, with the
permits each debited), its consumers' lifecycle facts (`on_life`: a consumer id subscribed
again ends the earlier consumer), its end (`close`).
Output: flow.permit_leak, one row per consumer: the permits leaked, its window at its first
FLOW and at its last, what caused it when the capture shows it (batches discarded with a
validation_error whose permits the client did not all return), evidence: the first FLOW,
the discards, the FLOWs after which the window stayed short.
Rules:
- A consumer's window is its FLOWs' messagePermits minus the permits of what it processed
  (acknowledged, discarded, or had delivered again): the permits the broker holds for it
  plus the deliveries it may still hold (`Permits.left + Permits.pending`). A client keeps
  its window at its receiver queue size W: it returns a message's permit when it takes the
  message out of its queue (in batches: the Java, C++ and Go clients send FLOW once half
  their queue is owed, flushing all they owe), before it acknowledges it. Just after a
  FLOW it owes nothing, so there the window is W plus what it took and has not yet
  acknowledged: never below W. A client that drops permits (the Java client returns 1 for
  a batch of P that failed its checksum: apache/pulsar#26336, PIP-491) has a window W -
  leak there, for good.
- The rule reads the window only just after a FLOW. Its baseline is the largest `left`
  seen just after a FLOW (then left = W - leak - the permits of messages still in the
  client's queue: never above W; the first FLOW's is the first grant). The shortfall is
  the baseline minus the window; it never exceeds the permits leaked (a healthy client's
  is <= 0 at every FLOW, whatever its batching; a capture ending mid-batch has no FLOW to
  judge: silent), so the row says "at least": a message taken and not yet acknowledged at
  a FLOW may or may not have had its permit returned. A leak is a shortfall of at least
  `leaked_permits` after each of the last two FLOWs of a stretch (the smaller counts): the
  client went on returning permits and did not make up.
- Redeliveries (a REDELIVER_UNACKNOWLEDGED_MESSAGES, negative acks, a redelivered MESSAGE)
  end a stretch (its leak, if established, is kept) and start another with a new baseline:
  a copy the client still queues while its id is delivered again (or acknowledged through
  the other copy) would otherwise count as processed before its permit came back. Stretches
  add up (each one's leak happened within it).
- Judged only for a consumer whose SUBSCRIBE was captured, on a connection whose CONNECT
  was seen and no byte is missing (`ConnState.trusted`); a consumer id subscribed again is
  a new consumer (its own windows). Nothing is said otherwise.
- Known look-alike: a client that shrinks its receiver queue on purpose (pulsar-client-go's
  auto-scaled queue under memory pressure, shrinkReceiverQueueSize) returns fewer permits
  too; the summary says when no discard in the capture explains the shortfall.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissector.diagnose.state import ConnState, ConsumerState, Context, Evidence, finding
from dissector.events import Acked, Lifecycle, LifeStep, Permits
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES, enum_name

_FLOW = COMMAND_TYPES["FLOW"]


@dataclass(slots=True)
class Ledger:
    """One consumer's windows, as the rule reads them after each FLOW."""

    start: int | None = None  # the window just after its first FLOW
    end: int = 0  # the window just after its latest FLOW
    first_flow: tuple[int, int] = (0, 0)  # (packet, time) of its first FLOW
    redeliveries: int = 0  # as of the latest FLOW
    leaked: int = 0  # permits leaked in stretches already ended
    flows: Evidence = field(default_factory=Evidence)  # FLOWs after which it stayed short
    # this stretch: FLOWs seen, its baseline (the largest `left` after one of them), the
    # shortfall after the latest and after the one before, the trailing short FLOWs
    seen: int = 0
    base: int = 0
    short: int = 0
    before: int = 0
    trailing: Evidence = field(default_factory=Evidence)
    #: discards of a batch (a debit of more than 1): validation error -> [batches, permits]
    discards: dict[str, list[int]] = field(default_factory=dict)
    causes: Evidence = field(default_factory=Evidence)  # their MESSAGEs and ACKs

    def stretch_leak(self) -> int:
        """The leak established in this stretch: short after its last two FLOWs."""
        return max(0, min(self.short, self.before)) if self.seen >= 2 else 0

    def end_stretch(self) -> None:
        """Redeliveries (or the consumer's end): keep what this stretch established."""
        leak = self.stretch_leak()
        if leak:
            self.leaked += leak
            self.flows.merge(self.trailing)
        self.seen = self.base = self.short = self.before = 0
        self.trailing = Evidence()


def _ledger(conn: ConnState, consumer_id: int) -> Ledger | None:
    """The leak ledger of a consumer whose permits are known (made at its first use)."""
    c = conn.consumers.get(consumer_id)
    if c is None or not c.known:
        return None
    if c.leak is None:
        c.leak = Ledger()
    led: Ledger = c.leak
    return led


def on_permits(ctx: Context, conn: ConnState, fact: Permits) -> None:
    """A consumer's permits after a FLOW: its window, its shortfall."""
    frame = fact.frame
    if frame.command_type != _FLOW or not fact.flows:
        return
    led = _ledger(conn, fact.consumer_id)
    if led is None:
        return
    window = fact.left + fact.pending
    if led.start is None:
        led.start = window
        led.first_flow = (frame.last_packet, frame.last_ts)
    led.end = window
    if fact.redeliveries != led.redeliveries:
        led.end_stretch()
        led.redeliveries = fact.redeliveries
    led.base = fact.left if not led.seen else max(led.base, fact.left)
    led.before, led.short = led.short, led.base - window
    led.seen += 1
    if led.short >= 1:
        led.trailing.add(frame)
    else:
        led.trailing = Evidence()


def on_acked(ctx: Context, conn: ConnState, fact: Acked) -> None:
    """An ACK's fact: the batches its validation_error discarded (a leak's usual cause)."""
    frame, body = fact.ack, fact.ack.body
    if not fact.discarded or not body.HasField("validation_error"):
        return
    led = _ledger(conn, fact.consumer_id)
    if led is None:
        return
    kind = enum_name(body, "validation_error")
    for delivered in fact.discarded:
        if delivered.permits > 1:
            counts = led.discards.setdefault(kind, [0, 0])
            counts[0] += 1
            counts[1] += delivered.permits
            led.causes.add_at(delivered.first_packet, delivered.first_ts, count=0)
            led.causes.add(frame)


def on_life(ctx: Context, conn: ConnState, fact: Lifecycle) -> None:
    """A consumer id subscribed again: the consumer it ends is judged now (before the
    consumer rules replace it)."""
    if fact.step is LifeStep.DECLARED:
        c = conn.consumers.get(fact.entity_id)
        if c is not None:
            _judge(ctx, conn, c)


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended: a row per consumer that leaked permits."""
    for c in conn.consumers.values():
        _judge(ctx, conn, c)


def _judge(ctx: Context, conn: ConnState, c: ConsumerState) -> None:
    led: Ledger | None = c.leak
    c.leak = None
    if led is None or led.start is None or not c.known or not conn.trusted:
        return
    led.end_stretch()
    if led.leaked < max(1, ctx.th.leaked_permits):
        return
    label = c.label()
    if led.discards:
        batches = sum(n for n, _ in led.discards.values())
        debited = sum(p for _, p in led.discards.values())
        kinds = ", ".join(f"{kind} {n}" for kind, (n, _) in sorted(led.discards.items()))
        what = "1 batch" if batches == 1 else f"{batches} batches"
        cause = (
            f"; it discarded {what} of {debited} messages in all ({kinds}): a client "
            "that returns 1 permit for a discarded batch loses the rest"
        )
    else:
        cause = (
            "; no discard in the capture explains it (a client dropping permits, or "
            "shrinking its receiver queue)"
        )
    ev = Evidence()
    ev.add_at(*led.first_flow, count=0)
    ev.merge(led.causes)
    ev.merge(led.flows)
    ev.packets.sort()
    ctx.emit(
        finding(
            FindingCode.FLOW_PERMIT_LEAK,
            ev,
            conn=conn,
            ts=led.flows.last_ts,
            topic=c.topic,
            entity=label,
            summary=f"{label} leaked at least {led.leaked} permits: its window (permits granted "
            f"minus those of the messages it processed) was {led.start} after its first FLOW "
            f"and {led.end} after its last, short after {led.flows.count} FLOWs{cause}",
            value=float(led.leaked),
            unit="permits",
            count=led.flows.count,
        )
    )
