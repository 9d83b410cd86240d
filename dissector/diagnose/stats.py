"""The broker's own view of a consumer against the capture's: consumer.stats_mismatch.

Input: a watched consumer's (dissector.diagnose.dispatch: SUBSCRIBE captured on a whole,
intact connection) CONSUMER_STATS requests and their ACKs and MESSAGEs (`HANDLERS`), the
answers (`on_answer`: the request's completion fact, CONSUMER_STATS_RESPONSE), the
connection's end.
Output: one consumer.stats_mismatch row per consumer whose broker disagreed (its answers
that did, the largest difference); an answer saying blockedConsumerOnUnackedMsgs is handed
to the stall rule (`dispatch.blocked`).
Rules:
- The broker reads its consumer's numbers when the request reaches it: after every FLOW and
  ACK the client sent before it (one connection, in order), and after every MESSAGE it
  counted, which it writes before or just after its answer. So the capture's numbers are
  those of the facts' ledger (`facts.permits.left`, `Entity.unacked`) with the client's
  side taken at the request and the deliveries taken at the answer:
  permits = granted by FLOWs before the request - entries delivered before the answer;
  unacked = unacknowledged at the request + entries delivered between request and answer.
- Tolerance: MESSAGEs the broker counted but wrote after its answer: those seen within one
  round trip after the answer (the request-to-answer time of the capture, at least
  MIN_WINDOW_US). availablePermits agrees when capture - broker is between 0 and those
  entries; when the broker says the consumer is blocked, any broker number below the
  capture's agrees (a blocked consumer's FLOW permits are held apart until it is
  unblocked). unackedMessages agrees when broker - capture is between 0 and those entries;
  it is compared only for a Shared or Key_Shared consumer of a persistent topic (the broker
  counts no other) that acknowledged no batch in part (the broker counts a batch's indexes,
  the facts its whole batch).
- msgBacklog is the subscription's, on every connection and before the capture began: the
  capture cannot show the whole topic, so it is told, never compared (unknown).
- Bounded: MAX_ASKED requests waiting and answers waiting for their window per consumer.
"""

from __future__ import annotations

from typing import Any

from dissector.diagnose import dispatch
from dissector.diagnose.state import ConnState, Context, Evidence, RuleStep, finding
from dissector.events import Frame, Pair
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
_STATS, _STATS_RESPONSE = T["CONSUMER_STATS"], T["CONSUMER_STATS_RESPONSE"]
#: The least window after an answer for MESSAGEs the broker counted before it (µs): a
#: broker's write queued behind its answer leaves within it even when the capture's round
#: trip is a loopback's few microseconds.
MIN_WINDOW_US = 10_000
#: Requests waiting for their answer, and answers waiting for their window, per consumer.
MAX_ASKED = 64
_INDIVIDUAL = frozenset({"Shared", "Key_Shared"})
_U64 = 1 << 64


class Asked:
    """A CONSUMER_STATS request: the consumer's ledger when it was sent."""

    __slots__ = ("granted", "packet", "ts", "unacked", "used")

    def __init__(self, frame: Frame, granted: int, unacked: int, used: int) -> None:
        self.ts, self.packet = frame.last_ts, frame.last_packet
        self.granted, self.unacked, self.used = granted, unacked, used


class StatsAnswer:
    """An answer, waiting for its window to pass."""

    __slots__ = ("answer", "asked", "body", "deadline", "inflight", "used")

    def __init__(self, asked: Asked, answer: Frame, used: int) -> None:
        self.asked, self.answer, self.body = asked, answer, answer.body
        self.used = used  # entries delivered before the answer
        self.deadline = answer.last_ts + max(answer.last_ts - asked.ts, MIN_WINDOW_US)
        self.inflight = 0  # entries delivered within the window after it


class Stats:
    """One consumer's requests and answers, and its disagreements."""

    __slots__ = ("asked", "checks", "detail", "found", "partial", "worst")

    def __init__(self) -> None:
        self.asked: dict[int, Asked] = {}
        self.checks: list[StatsAnswer] = []
        self.partial = False  # it acknowledged a batch in part
        self.found = Evidence()
        self.detail = ""  # the first disagreement, in words
        self.worst = 0


def _stats(w: dispatch.Watch) -> Stats:
    if w.stats is None:
        w.stats = Stats()
    st: Stats = w.stats
    return st


def on_request(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """CONSUMER_STATS: the consumer's ledger as the broker will read it."""
    w = conn.dispatch.get(body.consumer_id)
    if w is None:
        return
    st = _stats(w)
    e = w.entity
    st.asked[body.request_id] = Asked(frame, e.permits, e.unacked, e.used)
    if len(st.asked) > MAX_ASKED:
        del st.asked[next(iter(st.asked))]


def on_answer(ctx: Context, conn: ConnState, pair: Pair) -> None:
    """A CONSUMER_STATS request's completion fact: its answer waits for its window."""
    request, answer = pair.request, pair.response
    if request is None or answer is None or request.command_type != _STATS:
        return
    if answer.command_type != _STATS_RESPONSE or request.body is None:
        return
    body = answer.body
    if body is None or body.HasField("error_code"):
        return
    cid = request.body.consumer_id
    w = conn.dispatch.get(cid)
    if w is None or w.stats is None:
        return
    asked = w.stats.asked.pop(request.body.request_id, None)
    if asked is None:
        return
    if body.blockedConsumerOnUnackedMsgs:
        dispatch.blocked(ctx, conn, cid, answer)
    st = w.stats
    st.checks.append(StatsAnswer(asked, answer, w.entity.used))
    if len(st.checks) > MAX_ASKED:
        _judge(w, st.checks.pop(0))


def on_message(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A delivery: in an answer's window, the broker may have counted it before answering."""
    w = conn.dispatch.get(body.consumer_id)
    if w is None or w.stats is None or not w.stats.checks:
        return
    st = w.stats
    waiting = []
    for check in st.checks:
        if frame.last_ts <= check.deadline:
            check.inflight = w.entity.used - check.used
            waiting.append(check)
        else:
            _judge(w, check)
    st.checks = waiting


def on_ack(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """An ACK of part of a batch: the broker's unacked count is no longer the facts'."""
    w = conn.dispatch.get(body.consumer_id)
    if w is None or w.entity.max_batch <= 1 or (w.stats is not None and w.stats.partial):
        return  # (no batch delivered to it: no part of one to acknowledge)
    if any(mid.ack_set for mid in body.message_id):
        _stats(w).partial = True


def _signed(value: int) -> int:
    """A uint64 field the broker filled from a signed number."""
    return value - _U64 if value >= _U64 >> 1 else value


def _judge(w: dispatch.Watch, check: StatsAnswer) -> None:
    """Does the answer agree with the capture, within its tolerance?"""
    st, body, asked, inflight = w.stats, check.body, check.asked, check.inflight
    assert st is not None
    said: list[str] = []
    shown: list[str] = []
    worst = 0
    blocked = bool(body.blockedConsumerOnUnackedMsgs)
    if body.HasField("availablePermits"):
        broker = _signed(body.availablePermits)
        mine = asked.granted - check.used
        diff = mine - broker
        if not (0 <= diff <= inflight or (blocked and diff >= 0)):
            said.append(f"availablePermits {broker}")
            shown.append(f"{mine} permits ({asked.granted} granted, {check.used} delivered)")
            worst = max(worst, abs(diff))
    e = w.entity
    individual = e.sub_type in _INDIVIDUAL and not (e.topic or "").startswith("non-persistent:")
    if body.HasField("unackedMessages") and individual and not st.partial:
        broker = _signed(body.unackedMessages)
        mine = asked.unacked + check.used - asked.used
        diff = broker - mine
        if not 0 <= diff <= inflight:
            said.append(f"unackedMessages {broker}")
            shown.append(f"{mine} unacknowledged")
            worst = max(worst, abs(diff))
    if not said:
        return
    st.found.add_at(asked.packet, asked.ts)
    st.found.add_at(check.answer.last_packet, check.answer.last_ts, count=0)
    st.worst = max(st.worst, worst)
    if not st.detail:
        rtt = (check.answer.last_ts - asked.ts) / 1000
        backlog = (
            f"; msgBacklog {body.msgBacklog}: not compared (the capture cannot show the "
            "whole topic)"
            if body.HasField("msgBacklog")
            else ""
        )
        st.detail = (
            f"the broker said {', '.join(said)} (packet {check.answer.last_packet}); the "
            f"capture shows {', '.join(shown)}, with {inflight} messages delivered within "
            f"one round trip ({rtt:.1f} ms) after the answer{backlog}"
        )


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended: answers still in their window are judged (nothing later came);
    one row per consumer whose broker disagreed."""
    for w in conn.dispatch.values():
        st = w.stats
        if st is None:
            continue
        for check in st.checks:
            _judge(w, check)
        st.checks = []
        if not st.found:
            continue
        n = st.found.count
        ctx.emit(
            finding(
                FindingCode.CONSUMER_STATS_MISMATCH,
                st.found,
                conn=conn,
                topic=w.entity.topic,
                entity=w.label,
                summary=f"{w.label}: {n} CONSUMER_STATS_RESPONSE"
                + ("s" if n > 1 else "")
                + f" disagreed with the capture; the first: {st.detail}",
                value=float(st.worst),
                unit="messages",
            )
        )


HANDLERS: dict[int, RuleStep] = {
    _STATS: on_request,
    T["MESSAGE"]: on_message,
    T["ACK"]: on_ack,
}
