"""Request rules on one connection: request ids and keep-alive.

Input: the protocol facts (dissector.facts) of requests by request_id (`on_pair`: answered,
unanswered, unmatched; `on_reused`) and of PINGs answered (`on_keepalive`: a PONG's
completion fact), PING frames (`HANDLERS`: a PING sent waits), the sweep (`due`,
`tell`: the engine's timers, Context.schedule), the connection's end.
Output: findings request.unanswered, request.unknown_response, request.id_reused and
keepalive.unanswered (one row per connection each); answers to LOOKUP and SEEK are handed
to the rules that learn from them (`ANSWERED`, filled by the engine; producers and consumers
learn theirs from their lifecycle facts).
Rules:
- Which command is a request and which response answers it is the facts' (one state machine
  per connection): this module matches nothing. A PRODUCER is answered by the
  PRODUCER_SUCCESS that says ready; request_id -1 on CLOSE_PRODUCER/CLOSE_CONSUMER is no
  request.
- unanswered: the requests the facts report never answered, when the connection closed
  (FIN/RST), or older than request_timeout when the capture ended; but not those the client
  sent while closing (after its first CLOSE_PRODUCER/CLOSE_CONSUMER) when the client then
  ended the connection itself: it gave them up (the C++ client may ask a
  PARTITIONED_METADATA between its CLOSE_PRODUCERs and CLOSE_CONSUMERs and send its FIN
  before the answer can come); unknown_response (a
  response the facts pair with no request) and id_reused (a request sent while its id is in
  flight for a request answered by the same type: its own response, or SUCCESS; the C++
  client's two counters, lookups and the rest, are told apart by their answers) need the
  connection's whole history (its CONNECT captured, no bytes missing): otherwise the
  request may be unseen.
- A PING is answered by the next PONG the other way (the facts pair them). One unanswered
  for keepalive seconds (at a close: for half of it, as clients close one interval after
  their unanswered PING) is keepalive.unanswered; the summary says when the other side
  answers PINGs (one-way).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from dissector.diagnose.state import MAX_TRACKED, ConnState, Context, Evidence, RuleStep, finding
from dissector.events import Direction, Frame, Pair, RequestIdReused
from dissector.facts.bounds import MAX_PENDING
from dissector.facts.commands import ANSWERED as OWN_RESPONSE
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_PONG = T["PONG"]
_CLOSES = frozenset({T["CLOSE_PRODUCER"], T["CLOSE_CONSUMER"]})
Answered = Callable[[Context, ConnState, Frame, Frame], None]
#: This module's timers (Context.schedule): a connection's oldest unanswered PING.
KIND = 0

#: request type -> (the response types that answer it, what learns from the answer); the
#: engine fills it in. Any other response to it (a stray type) teaches nothing.
ANSWERED: dict[int, tuple[frozenset[int], Answered]] = {}


def _other(direction: str) -> Direction:
    return B2C if direction == C2B else C2B


def on_pair(ctx: Context, conn: ConnState, pair: Pair) -> None:
    """A request's completion fact (dissector.facts.is_request_pair)."""
    request, response = pair.request, pair.response
    if (
        request is not None
        and request.command_type in _CLOSES
        and request.direction is C2B
        and (conn.closing_since is None or request.first_ts < conn.closing_since)
    ):
        conn.closing_since = request.first_ts
    if response is None:
        if request is not None and len(conn.requests) < MAX_PENDING:
            conn.requests.append(request)  # unanswered: judged at the connection's end
        return
    if request is None:
        if conn.trusted:
            conn.unknown.add(response)
        return
    learn = ANSWERED.get(request.command_type)
    if learn is not None and response.command_type in learn[0]:
        learn[1](ctx, conn, request, response)


def _answer(ctype: int) -> int:
    """What answers a request by type: its own response, or SUCCESS (-1 here)."""
    return ctype if ctype in OWN_RESPONSE else -1


def on_reused(ctx: Context, conn: ConnState, fact: RequestIdReused) -> None:
    """A request sent while an earlier one of its id waits, when their answers cannot be
    told apart by type (a LOOKUP's LOOKUP_RESPONSE and a CLOSE_CONSUMER's SUCCESS can: the
    C++ client numbers its lookups and its other requests with two counters)."""
    mine = _answer(fact.request.command_type)
    if conn.trusted and (not fact.waiting or any(_answer(t) == mine for t in fact.waiting)):
        conn.reused.add(fact.request)


def on_ping(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    pings = conn.pings.get(frame.direction.value)
    if pings is None:
        pings = conn.pings[frame.direction.value] = deque()
    if len(pings) < MAX_TRACKED:
        pings.append(frame)
        ctx.schedule(due(ctx, conn, conn), KIND, conn, conn, 0)


def on_keepalive(ctx: Context, conn: ConnState, pair: Pair) -> None:
    """A PONG's completion fact (`is_keepalive_pair`): the PING it answers, as the facts pair
    them (first in first out, per direction), waits no more. A PONG of no PING teaches
    nothing; a PING never answered is judged from what waits here (`close`)."""
    ping, pong = pair.request, pair.response
    if ping is None or pong is None:
        return
    asked = ping.direction.value
    pings = conn.pings.get(asked)
    if not pings:
        return
    if pings[0].stream_offset == ping.stream_offset:
        pings.popleft()
    else:  # an older one the facts' bound gave up on still waits here
        at = next((i for i, p in enumerate(pings) if p.stream_offset == ping.stream_offset), None)
        if at is None:
            return  # beyond MAX_TRACKED: not kept here
        del pings[at]
    conn.pongs[asked] = conn.pongs.get(asked, 0) + 1
    wait = pong.last_ts - ping.last_ts
    if wait > ctx.us["keepalive"]:
        _late(conn, asked, ping, wait)


def is_keepalive_pair(pair: Pair) -> bool:
    """Whether a completion fact is a PONG's (dissector.facts: FIFO_PAIRS)."""
    response = pair.response
    return response is not None and response.command_type == _PONG


def _late(conn: ConnState, asked: str, ping: Frame, wait: int) -> None:
    late = conn.ping_late.get(asked)
    if late is None:
        late = conn.ping_late[asked] = Evidence()
    late.add(ping)
    conn.ping_longest = max(conn.ping_longest, wait)


def due(ctx: Context, conn: ConnState, timed: ConnState) -> int | None:
    """The time after which a PING of `conn` has waited past the keep-alive interval
    (None: no PING waiting, or already told)."""
    if conn.ping_told:
        return None
    heads = [pings[0].last_ts for pings in conn.pings.values() if pings]
    return min(heads) + ctx.us["keepalive"] if heads else None


def tell(ctx: Context, conn: ConnState, timed: ConnState, now: int) -> None:
    """Tell the listener of a PING that just passed the keep-alive interval."""
    for asked, pings in conn.pings.items():
        if pings and now - pings[0].last_ts > ctx.us["keepalive"]:
            conn.ping_told = True
            wait = now - pings[0].last_ts
            ctx.established(
                finding(
                    FindingCode.KEEPALIVE_UNANSWERED,
                    Evidence.of(pings[0]),
                    conn=conn,
                    ts=now,
                    summary=f"a PING ({_side(asked)}) unanswered for {wait / 1e6:.1f} s",
                    value=wait / 1e6,
                    unit="s",
                )
            )
            return


def _side(asked: str) -> str:
    return "client to broker" if asked == C2B else "broker to client"


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended at `horizon` (closed: by FIN/RST)."""
    limit = ctx.us["keepalive"]
    at_close = limit // 2 if closed else limit
    for asked, pings in conn.pings.items():
        for ping in pings:
            if horizon - ping.last_ts >= at_close:
                _late(conn, asked, ping, horizon - ping.last_ts)
    for asked, late in conn.ping_late.items():
        one_way = ""
        if conn.pongs.get(_other(asked).value):
            one_way = "; the other side's PINGs were answered (one-way liveness)"
        ctx.emit(
            finding(
                FindingCode.KEEPALIVE_UNANSWERED,
                late,
                conn=conn,
                ts=late.first_ts + limit,
                summary=f"{late.count} PINGs ({_side(asked)}) got no PONG within "
                f"{ctx.th.keepalive:g} s (longest wait {conn.ping_longest / 1e6:.1f} s)" + one_way,
                value=conn.ping_longest / 1e6,
                unit="s",
            )
        )
    _requests(ctx, conn, horizon, closed)


def _requests(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    limit = ctx.us["request_timeout"]
    ev, names = conn.unanswered, conn.unanswered_names
    closing = conn.closing_since if closed and conn.closed_by is C2B else None
    for request in conn.requests:
        if closing is not None and request.first_ts > closing:
            continue  # given up by the client closing (module rules)
        if closed or horizon - request.last_ts > limit:
            ev.add(request)
            names[request.command_name] = names.get(request.command_name, 0) + 1
    conn.requests.clear()
    if ev:
        which = ", ".join(f"{n} {name}" for name, n in sorted(names.items()))
        ctx.emit(
            finding(
                FindingCode.REQUEST_UNANSWERED,
                ev,
                conn=conn,
                summary=f"{ev.count} requests never answered ({which}) before the "
                + ("connection closed" if closed else "capture ended"),
                value=(horizon - ev.first_ts) / 1e6,
                unit="s",
            )
        )
    for code, found, what in (
        (FindingCode.REQUEST_UNKNOWN_RESPONSE, conn.unknown, "responses to no pending request"),
        (FindingCode.REQUEST_ID_REUSED, conn.reused, "request ids reused while pending"),
    ):
        if found:
            ctx.emit(
                finding(
                    code,
                    found,
                    conn=conn,
                    summary=f"{found.count} {what}",
                    value=found.count,
                    unit="frames",
                )
            )


HANDLERS: dict[int, RuleStep] = {T["PING"]: on_ping}
