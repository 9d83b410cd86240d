"""Producer rules on one connection: send timeout, receipt order, sequence regression, busy.

Input: the connection's SEND frames (through `HANDLERS`, by command type), its producers'
lifecycle facts (`on_life`: declared, created, failed, closed by either side), the SENDs'
completion facts (`on_pair`: receipted, failed, never answered; dissector.facts), the sweep
(`due`, `tell`: the engine's timers, Context.schedule), its end.
Output: findings producer.send_timeout, producer.receipt_out_of_order,
producer.sequence_regression (within the connection; across reconnects: spanning.py) and
producer.busy, each one row per producer with all its evidence (producer.busy: per
connection and topic, as a refused producer has no producer of its own to be a row of).
Rules:
- Which receipt answers which SEND is the facts' (one state machine per connection): a SEND
  waits until a SEND_RECEIPT or SEND_ERROR of its (producer_id, sequence_id); chunks of one
  message share a sequence id and each get a receipt. This module keeps no SEND waiting:
  the facts say which is its producer's oldest (`Pair.next_waiting`, the sweep's timer)
  and whether a receipt answered it (`Pair.in_order`). A SEND answered after
  the send timeout, left pending past it, or pending when the connection closed (FIN/RST)
  or the client closed the producer, is evidence of a timeout; at the capture's end only
  those older than the timeout count (the rest is not known).
- A receipt for a waiting sequence id other than the oldest waiting is out of order; only
  on a connection with no bytes missing (a receipt lost in a gap is not a broker's fault).
- A SEND whose sequence id is at or below one already sent (a chunk repeats its message's
  id), or at or below PRODUCER_SUCCESS.last_sequence_id (deduplication on), regresses.
- PRODUCER answered with ProducerBusy/ProducerFenced, or PRODUCER sent again for an open
  producer_id (no CLOSE_PRODUCER, no error in between), is busy: counted per topic of the
  connection, each row naming the producers refused (the first MAX_BUSY_NAMES).
"""

from __future__ import annotations

from typing import Any

from dissector.diagnose.state import (
    MAX_TRACKED,
    Busy,
    ConnState,
    Context,
    Evidence,
    ProducerState,
    RuleStep,
    finding,
)
from dissector.events import Frame, Lifecycle, LifeStep, Pair
from dissector.facts.bounds import MAX_PENDING
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES, enum_name

T = COMMAND_TYPES
_RECEIPT = T["SEND_RECEIPT"]
_BUSY_ERRORS = frozenset({"ProducerBusy", "ProducerFenced"})
#: This module's timers (Context.schedule): a producer's oldest SEND waiting.
KIND = 1
#: Producers a producer.busy row names (its `entity`); the count says how many there were.
MAX_BUSY_NAMES = 5


def _producer(conn: ConnState, frame: Frame, pid: int) -> ProducerState:
    """The producer of `pid`, made when the capture missed its PRODUCER."""
    p = conn.producers.get(pid)
    if p is None:
        p = conn.add_producer(ProducerState(pid, frame.topic, frame.last_ts, frame.stream_offset))
    return p


def on_life(ctx: Context, conn: ConnState, fact: Lifecycle) -> None:
    """A producer's step (dissector.facts.lifecycles): declared, created or failed, closed;
    a migration tells these rules nothing (spanning.py reads it)."""
    step = fact.step
    if step is LifeStep.DECLARED:
        _declared(conn, fact)
    elif step is LifeStep.CREATED or step is LifeStep.FAILED:
        _answered(conn, fact)
    elif step is not LifeStep.MIGRATED:
        _closed(ctx, conn, fact)


def _declared(conn: ConnState, fact: Lifecycle) -> None:
    """PRODUCER: a new producer; busy when its id is still open."""
    pid, frame, entity = fact.entity_id, fact.frame, fact.entity
    assert entity is not None  # the PRODUCER made it
    old = conn.producers.get(pid)
    p = ProducerState(pid, entity.topic, frame.last_ts, frame.stream_offset)
    p.name = fact.name
    if old is not None and old.open:
        detail = f"PRODUCER re-sent for producer_id {pid} without CLOSE_PRODUCER"
        _busy(conn, entity.topic, frame, detail, p.label())
    conn.add_producer(p)


def _busy(conn: ConnState, topic: str | None, frame: Frame, detail: str, label: str) -> None:
    """A refusal or re-send of a producer of `topic` (frame: its evidence)."""
    busy = conn.busy.get(topic)
    if busy is None:
        busy = conn.busy[topic] = Busy()
        if len(conn.busy) > MAX_TRACKED:
            conn.busy.popitem(last=False)
    busy.evidence.add(frame)
    busy.detail = detail
    if label not in busy.producers and len(busy.producers) < MAX_BUSY_NAMES:
        busy.producers.append(label)


def _answered(conn: ConnState, fact: Lifecycle) -> None:
    """PRODUCER answered: created (PRODUCER_SUCCESS) or failed (ERROR)."""
    p = conn.producers.get(fact.entity_id)
    response = fact.frame
    body = response.body
    if fact.step is LifeStep.CREATED:
        if p is not None:
            p.name = fact.name or p.name
            p.last_sequence_id = body.last_sequence_id
        return
    if p is not None:
        p.open = False
    error = enum_name(body, "error") if body.HasField("error") else ""
    if error in _BUSY_ERRORS:
        detail = f"PRODUCER answered {error}: {body.message}".rstrip(": ")
        label = p.label() if p is not None else f"producer {fact.entity_id}"
        request = fact.request
        assert request is not None  # an answer's fact names its PRODUCER
        _busy(conn, request.body.topic, response, detail, label)


def on_send(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    p = _producer(conn, frame, body.producer_id)
    seq = body.sequence_id
    meta = frame.metadata
    chunked = body.is_chunk or (meta is not None and meta.num_chunks_from_msg > 1)
    chunk = chunked and seq == p.highest_sent
    if not chunk and p.highest_sent >= 0 and seq <= p.highest_sent:
        p.regression.add(frame)
        p.regression_detail = f"sequence id {seq} after {p.highest_sent} on this connection"
    elif p.last_sequence_id >= 0 and seq <= p.last_sequence_id:
        p.regression.add(frame)
        p.regression_detail = (
            f"sequence id {seq} at or below PRODUCER_SUCCESS.last_sequence_id "
            f"{p.last_sequence_id} (deduplication drops it)"
        )
    if ctx.span is not None:
        ctx.span.sent(conn, p, seq, frame)
    high = body.highest_sequence_id if body.highest_sequence_id > seq else seq
    p.highest_sent = max(p.highest_sent, high)
    p.waiting += 1  # it waits in the facts until its receipt's fact comes (on_pair)
    if p.oldest is None:
        p.oldest = frame
    ctx.schedule(due(ctx, conn, p), KIND, conn, p, p.producer_id)


def on_pair(ctx: Context, conn: ConnState, pair: Pair) -> None:
    """A SEND's completion fact (dissector.facts.is_send_pair): receipted, failed, or never
    answered (at the connection's end, or shed by the facts' bound)."""
    sent = pair.request
    assert sent is not None and pair.producer_id is not None
    p = conn.producers.get(pair.producer_id)
    if p is None or sent.stream_offset < p.since:
        return  # a SEND of an earlier producer of that id: its state went with it
    if _closed_on(p, sent):
        _late(p, sent, p.closed_ts - sent.last_ts)  # waiting when the client gave up
        return
    p.waiting -= 1
    answer = pair.response
    if answer is None:
        if len(p.unanswered) < MAX_PENDING:
            p.unanswered.append(sent)  # judged when the connection ends (close)
        return
    after = pair.next_waiting
    p.oldest = None if after is None or _given_up(p, after) else after
    if answer.command_type == _RECEIPT:
        if not pair.in_order and conn.intact:
            p.out_of_order.add(answer)
        if ctx.span is not None:
            assert pair.sequence_id is not None
            ctx.span.receipted(conn, p, pair.sequence_id)
    wait = answer.last_ts - sent.last_ts
    if wait > ctx.us["send_timeout"]:
        _late(p, sent, wait)


def _closed_on(p: ProducerState, sent: Frame) -> bool:
    """Whether `sent` was waiting when the client closed `p` (a timeout, counted then)."""
    return p.closed_at is not None and sent.stream_offset < p.closed_at


def _given_up(p: ProducerState, sent: Frame) -> bool:
    """Whether `sent` was waiting when the client closed `p`, or is an earlier producer's of
    that id."""
    return sent.stream_offset < p.since or _closed_on(p, sent)


def _late(p: ProducerState, sent: Frame, wait: int) -> None:
    """`sent` is evidence of a timeout: it waited `wait` µs."""
    p.timeout.add(sent)
    p.longest_wait = max(p.longest_wait, wait)


def _closed(ctx: Context, conn: ConnState, fact: Lifecycle) -> None:
    """CLOSE_PRODUCER, from either side."""
    p = conn.producers.get(fact.entity_id)
    if p is None:
        return
    p.open = False
    frame = fact.frame
    if fact.step is LifeStep.CLOSED_BY_CLIENT:  # the client gave up on what is still waiting
        p.closed_at, p.closed_ts = frame.stream_offset, frame.last_ts
        p.oldest, p.waiting = None, 0  # their facts, when they come, are timeouts (on_pair)
        if ctx.span is not None:
            ctx.span.closed(conn, p)


def due(ctx: Context, conn: ConnState, p: ProducerState) -> int | None:
    """The time after which the oldest SEND of `p` still waiting has passed the send timeout
    (None: nothing waiting, or already told)."""
    if p.timeout_told or p.oldest is None:
        return None
    return p.oldest.last_ts + ctx.us["send_timeout"]


def tell(ctx: Context, conn: ConnState, p: ProducerState, now: int) -> None:
    """Tell the listener of a producer whose oldest SEND just passed the send timeout (the
    sweep calls it once `due` has passed)."""
    sent = p.oldest
    assert sent is not None
    p.timeout_told = True
    waiting = p.waiting
    ctx.established(
        finding(
            FindingCode.PRODUCER_SEND_TIMEOUT,
            Evidence.of(sent),
            conn=conn,
            ts=now,
            topic=p.topic,
            entity=p.label(),
            summary=f"{p.label()}: {waiting} SENDs unanswered, the oldest for "
            f"{(now - sent.last_ts) / 1e6:.1f} s",
            value=(now - sent.last_ts) / 1e6,
            unit="s",
            count=waiting,
        )
    )


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended at `horizon` (closed: by FIN/RST; else the capture ended)."""
    limit = ctx.us["send_timeout"]
    for p in conn.producers.values():
        for sent in p.unanswered:  # at a close all count; at the capture's end the old ones
            if closed or horizon - sent.last_ts > limit:
                _late(p, sent, horizon - sent.last_ts)
        p.unanswered.clear()
        label, topic = p.label(), p.topic
        if p.timeout:
            ctx.emit(
                finding(
                    FindingCode.PRODUCER_SEND_TIMEOUT,
                    p.timeout,
                    conn=conn,
                    ts=p.timeout.first_ts + limit,
                    topic=topic,
                    entity=label,
                    summary=f"{label}: {p.timeout.count} SENDs unanswered for more than "
                    f"{ctx.th.send_timeout:g} s or until the producer or connection closed "
                    f"(longest {p.longest_wait / 1e6:.1f} s)",
                    value=p.longest_wait / 1e6,
                    unit="s",
                )
            )
        if p.out_of_order:
            ctx.emit(
                finding(
                    FindingCode.PRODUCER_RECEIPT_OUT_OF_ORDER,
                    p.out_of_order,
                    conn=conn,
                    topic=topic,
                    entity=label,
                    summary=f"{label}: {p.out_of_order.count} SEND_RECEIPTs for a sequence "
                    "id other than the oldest pending one",
                    value=p.out_of_order.count,
                    unit="receipts",
                )
            )
        if p.regression:
            ctx.emit(
                finding(
                    FindingCode.PRODUCER_SEQUENCE_REGRESSION,
                    p.regression,
                    conn=conn,
                    topic=topic,
                    entity=label,
                    summary=f"{label}: {p.regression.count} SENDs went backwards "
                    f"({p.regression_detail})",
                    value=p.regression.count,
                    unit="sends",
                )
            )
    for topic, busy in conn.busy.items():
        ev = busy.evidence
        ctx.emit(
            finding(
                FindingCode.PRODUCER_BUSY,
                ev,
                conn=conn,
                topic=topic,
                entity=", ".join(busy.producers),
                summary=f"{ev.count} PRODUCER refusals or re-sends: {busy.detail}",
                value=ev.count,
                unit="producers",
            )
        )


HANDLERS: dict[int, RuleStep] = {T["SEND"]: on_send}
