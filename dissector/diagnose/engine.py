"""The diagnosis engine: pipeline events in, findings out. Sans-IO.

Input: the events the pipeline already makes (ConversationOpened, Frame, Anomaly,
Conversation, and the protocol facts: Pair, RequestIdReused, Acked, Permits, Lifecycle,
Handshake, and SchemaFact when values are asked for (the read plan's `schemas`);
AppMessage is ignored), in order (`feed`); optionally the wall clock (`tick`, live); then
`finish` at the end of the capture (or group of captures).
Output: `Finding` records: from `feed` as episodes end (a connection closes, a late answer
arrives), from `finish` for what spans connections; a listener, when given, is told of a
finding as soon as it is established (a threshold passed), before its row is complete.
Rules:
- The engine is made only when the findings table is asked for (dissector.tables.builders):
  it costs the frames-only read nothing, and nothing in the per-frame pipeline.
- Requests are matched with their answers, and SENDs with their receipts, once, by the
  facts' state machine (dissector.facts): a completion fact comes right after its answer's
  Frame; the request rules (`requests.on_pair`), the producer rules (`producers.on_pair`)
  and the keep-alive rule (`requests.on_keepalive`: a PONG's) read those, and every pair
  times the connection's round trip (`crossing.timed`). Deliveries are
  matched with their acks there too: an ACK's fact (`Acked`) follows its Frame; the discard
  and consumer rules (`discards.on_acked`, `consumers.on_acked`) read it. Consumers' permits
  are counted there as well: a FLOW's fact (`Permits`), or a MESSAGE's that left its
  consumer none, follows its Frame; the flow rules (`consumers.on_permits`) and the leak
  rule (`leaks.on_permits`, which also reads ACKs' and SUBSCRIBEs' facts) read it. So are
  producers' and consumers' lives: a PRODUCER's or SUBSCRIBE's, their answer's, a CLOSE_*'s
  or a TOPIC_MIGRATED's fact (`Lifecycle`) follows its Frame; the producer, consumer and
  spanning rules (`on_life`) read it; and the handshake: a CONNECT's or CONNECTED's fact
  (`Handshake`) follows its Frame; the connection rules (`connection.on_handshake`) read it,
  and the auth and transaction rules (`auth.Auth`, `transactions.Transactions`: state of
  their own, told of handshakes, of AUTH_CHALLENGEs' and transaction requests' completion
  facts, of each connection's end, and of the capture's).
- Refusals and reconnects across connections (consumer.busy, reconnect.retry_loop,
  reconnect.storm: dissector.diagnose.refusals) read the request facts (ERRORs, LOOKUPs
  answered), the lifecycle facts and each connection's end.
  IncompatibleSchema refusals (their Pairs) and, with values asked for, the schema facts
  (`SchemaFact`) go to the schema rule (`schemas.SchemaRule`), which spans connections (a
  topic's schema may show on another one) and makes its rows at each connection's end.
- Each command type has a tuple of rule handlers (`DISPATCH`, built once from the rule
  modules' HANDLERS tables: connection, requests, producers, consumers, chunks, spanning).
- Time is the capture's: the latest event time seen. About every SWEEP_US of it, the timers
  that are due are checked (`_sweep`), so the listener learns of a stall while it lasts;
  rows are made when the connection ends (FIN/RST: pending things count; the capture's end:
  only what is older than its threshold). The rules put their due times in a heap
  (Context.schedule): a sweep takes out what is due, not every open connection, producer and
  consumer; what it finds to tell, it tells in the order of the connections, the rule
  modules (requests, producers, consumers) and their producers and consumers.
- What the rules checked and found in order (SENDs, requests and PINGs answered and how
  fast, permits followed, connections whole) is counted from the same facts
  (dissector.diagnose.checks); `checked` gives it after `finish`.
- A connection whose opening the engine did not see (a builder started mid-capture) gets
  state at its first event, with no endpoints (`key` None).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection
from typing import Any

from dissector.diagnose import (
    auth,
    checks,
    chunks,
    connection,
    consumers,
    crossing,
    discards,
    dispatch,
    leaks,
    producers,
    requests,
    schemas,
    spanning,
    stats,
    transactions,
)
from dissector.diagnose.refusals import Refusals
from dissector.diagnose.state import ConnState, Context, Listener, RuleStep
from dissector.events import (
    Acked,
    Anomaly,
    CloseReason,
    Conversation,
    ConversationOpened,
    EntityKind,
    Finding,
    Frame,
    Handshake,
    Lifecycle,
    Pair,
    Permits,
    RequestIdReused,
    SchemaFact,
)
from dissector.facts import is_request_pair, is_send_pair
from dissector.findings import Thresholds
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES

#: Capture time (µs) between two checks of every open connection's timers.
SWEEP_US = 1_000_000
#: Defaults of the ports the wrong-protocol rule knows (dissector.pipeline's).
BROKER_PORTS = frozenset({6650, 6651})
TLS_PORTS = frozenset({6651})
_CLOSED = frozenset({CloseReason.FIN, CloseReason.RST, CloseReason.PORT_REUSE})


def _dispatch() -> dict[int, tuple[RuleStep, ...]]:
    """Command type -> its handlers, in the order of the modules below."""
    out: dict[int, list[RuleStep]] = {}
    for table in (
        connection.HANDLERS,
        requests.HANDLERS,
        producers.HANDLERS,
        consumers.HANDLERS,
        chunks.HANDLERS,
        spanning.HANDLERS,
        dispatch.HANDLERS,
        stats.HANDLERS,
    ):
        for ctype, handler in table.items():
            out.setdefault(ctype, []).append(handler)
    return {ctype: tuple(handlers) for ctype, handlers in out.items()}


DISPATCH = _dispatch()
_ERROR = T["ERROR"]
_CONSUMER_STATS = T["CONSUMER_STATS"]
requests.ANSWERED.update(
    {
        T["LOOKUP"]: (frozenset({T["LOOKUP_RESPONSE"]}), spanning.lookup_answered),
        T["SEEK"]: (frozenset({T["SUCCESS"], _ERROR}), spanning.seek_answered),
    }
)
#: Rule modules with per-connection timers and rows, in the order their rows come.
_MODULES = (connection, requests, producers, consumers, discards, leaks, chunks, dispatch, stats)
#: Rule modules with timers (Context.schedule), by their KIND: `due` and `tell`.
_SWEPT: dict[int, Any] = {m.KIND: m for m in (requests, producers, consumers, dispatch)}
#: Where a timer's producer or consumer is found by its id.
_TIMED: dict[int, Callable[[ConnState], dict[int, Any]]] = {
    producers.KIND: lambda conn: conn.producers,
    consumers.KIND: lambda conn: conn.consumers,
    dispatch.KIND: lambda conn: conn.dispatch,
}


class Diagnoser:
    """Findings of one capture (or group of captures); see the module docstring."""

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        *,
        broker_ports: Collection[int] = BROKER_PORTS,
        tls_ports: Collection[int] = TLS_PORTS,
        listener: Listener | None = None,
    ) -> None:
        self.ctx = Context(thresholds or Thresholds(), listener)
        self.ctx.span = spanning.Spanning(self.ctx)
        self.refusals = Refusals(self.ctx)  # consumer.busy, reconnect.* (across connections)
        self.schemas = schemas.SchemaRule()  # schema.incompatible, across connections
        self.broker_ports, self.tls_ports = frozenset(broker_ports), frozenset(tls_ports)
        self.conns: dict[int, ConnState] = {}
        self.checks = checks.Checks()  # what was checked and found in order (`checked`)
        self.seen = 0  # the latest frame's time (the wall clock of `tick` is not the capture's)
        self._next_sweep = 0
        self._placed = 0  # connections added to `conns` so far (their `order`)
        self.auth = auth.Auth(self.ctx)  # credentials and challenges (auth.py)
        self.txn = transactions.Transactions(self.ctx)  # transactions (transactions.py)

    def _conn(self, conn_id: int) -> ConnState:
        conn = self.conns.get(conn_id)
        if conn is None:
            conn = self._open(ConnState(conn_id, None))
        return conn

    def _open(self, conn: ConnState) -> ConnState:
        """`conn` in `conns`, in the place of the one it replaces (a dict keeps a replaced
        key's place), else last."""
        old = self.conns.get(conn.conn_id)
        if old is not None:
            conn.order = old.order
        else:
            self._placed += 1
            conn.order = self._placed
        self.conns[conn.conn_id] = conn
        return conn

    def feed(self, ev: object) -> list[Finding]:
        """One pipeline event; the findings whose episode it ended."""
        ctx = self.ctx
        kind = type(ev)
        if kind is Frame:
            assert isinstance(ev, Frame)
            self._clock(ev.last_ts)
            if ev.last_ts > self.seen:
                self.seen = ev.last_ts
            if ev.body is not None:
                handlers = DISPATCH.get(ev.command_type)
                if handlers:
                    conn = self._conn(ev.conn_id)
                    for handler in handlers:
                        handler(ctx, conn, ev, ev.body)
        elif kind is Pair:
            assert isinstance(ev, Pair)
            crossing.timed(self._conn(ev.conn_id), ev)  # the connection's round trip
            self.checks.on_pair(ev)
            if ev.error_code == schemas.INCOMPATIBLE:
                self.schemas.on_pair(ev)
            if auth.is_auth_pair(ev):  # AUTH_RESPONSE's name also makes it a request pair
                self.auth.on_pair(self._conn(ev.conn_id), ev)
            if is_request_pair(ev):
                conn = self._conn(ev.conn_id)
                requests.on_pair(ctx, conn, ev)
                self.refusals.on_pair(conn, ev)
                if transactions.is_txn_pair(ev):
                    self.txn.on_pair(conn, ev)
                request = ev.request
                if request is not None and request.command_type == _CONSUMER_STATS:
                    stats.on_answer(ctx, conn, ev)
            elif is_send_pair(ev):
                conn = self._conn(ev.conn_id)
                producers.on_pair(ctx, conn, ev)
                dispatch.on_receipt(ctx, conn, ev)
            elif requests.is_keepalive_pair(ev):
                requests.on_keepalive(ctx, self._conn(ev.conn_id), ev)
        elif kind is Acked:
            assert isinstance(ev, Acked)
            conn = self._conn(ev.conn_id)
            discards.on_acked(ctx, conn, ev)  # creates the consumer first, as ever
            consumers.on_acked(ctx, conn, ev)
            leaks.on_acked(ctx, conn, ev)
        elif kind is Permits:
            assert isinstance(ev, Permits)
            self.checks.on_permits(ev)
            conn = self._conn(ev.conn_id)
            consumers.on_permits(ctx, conn, ev)
            leaks.on_permits(ctx, conn, ev)
            dispatch.on_permits(ctx, conn, ev)
        elif kind is Lifecycle:
            assert isinstance(ev, Lifecycle)
            conn = self._conn(ev.conn_id)
            if ev.kind is EntityKind.PRODUCER:
                producers.on_life(ctx, conn, ev)
            else:
                leaks.on_life(ctx, conn, ev)  # judges a consumer its id's new one replaces
                consumers.on_life(ctx, conn, ev)
                dispatch.on_life(ctx, conn, ev)
            spanning.on_life(ctx, conn, ev)
            self.refusals.on_life(conn, ev)
        elif kind is Handshake:
            assert isinstance(ev, Handshake)
            conn = self._conn(ev.conn_id)
            connection.on_handshake(ctx, conn, ev)
            self.auth.on_handshake(conn, ev)
            self.txn.on_handshake(conn, ev)
        elif kind is SchemaFact:
            assert isinstance(ev, SchemaFact)
            self.schemas.on_fact(ev)
        elif kind is RequestIdReused:
            assert isinstance(ev, RequestIdReused)
            requests.on_reused(ctx, self._conn(ev.conn_id), ev)
        elif kind is Anomaly:
            assert isinstance(ev, Anomaly)
            if ev.conn_id:
                connection.on_anomaly(ctx, self._conn(ev.conn_id), ev)
        elif kind is ConversationOpened:
            assert isinstance(ev, ConversationOpened)
            self._clock(ev.ts)
            self._open(ConnState(ev.conn_id, ev.key))
        elif kind is Conversation:
            assert isinstance(ev, Conversation)
            self._ended(ev)
        return self._take()

    def tick(self, now: int) -> list[Finding]:
        """The wall clock (live): timers are checked as if an event came at `now` (µs)."""
        self._clock(now)
        return self._take()

    def finish(self) -> list[Finding]:
        """The capture ended: connections still open end here, and what spans them."""
        ctx = self.ctx
        for conn in list(self.conns.values()):
            self._close(conn, ctx.now, closed=False)
        self.txn.finish(list(self.conns.values()))
        self.conns.clear()
        ctx.timers.clear()
        assert ctx.span is not None
        ctx.span.finish(ctx.now)  # the rules across connections end with the capture
        self.refusals.finish()
        self.auth.finish()
        return self._take()

    def checked(self) -> list[checks.CheckRow]:
        """What the rules checked and found in order, one row per check (after `finish`:
        the `checks` table, dissector.diagnose.checks); none when no connection was seen.
        Their time is the latest frame's (live's wall clock ticks are not the capture's)."""
        return self.checks.rows(self.seen)

    # ------------------------------------------------------------------ internals

    def _take(self) -> list[Finding]:
        out = self.ctx.out
        if not out:
            return out
        self.ctx.out = []
        return out

    def _clock(self, ts: int) -> None:
        ctx = self.ctx
        if ts > ctx.now:
            ctx.now = ts
        if ts >= self._next_sweep:
            if self._next_sweep:
                self._sweep(ts)
            self._next_sweep = ts + SWEEP_US

    def _sweep(self, now: int) -> None:
        """Tell the listener of what became due before `now`: the timers due are taken out
        of the heap, their due time computed again (what happened since may have moved it
        later: back in the heap, or cancelled it)."""
        ctx, heap = self.ctx, self.ctx.timers
        told: list[tuple[tuple[int, int, int], int, ConnState, Any]] = []
        while heap and heap[0][0] < now:
            due, _, kind, conn_id, ident = heapq.heappop(heap)
            conn = self.conns.get(conn_id)
            if conn is None:
                continue  # ended: its rows are made
            timed: Any = conn if kind == requests.KIND else _TIMED[kind](conn).get(ident)
            if timed is None or timed.scheduled != due:
                continue  # forgotten, or an earlier entry stood for it
            timed.scheduled = None
            module = _SWEPT[kind]
            again = module.due(ctx, conn, timed)
            if again is not None and again < now:
                told.append(
                    ((conn.order, kind, 0 if timed is conn else timed.order), kind, conn, timed)
                )
            else:
                ctx.schedule(again, kind, conn, timed, ident)
        told.sort(key=lambda t: t[0])
        for _, kind, conn, timed in told:
            _SWEPT[kind].tell(ctx, conn, timed, now)

    def _ended(self, ev: Conversation) -> None:
        conn = self.conns.pop(ev.conn_id, None)
        if conn is None:
            conn = ConnState(ev.conn_id, ev.key)
        if conn.key is None:
            conn.key = ev.key
        connection.on_conversation(conn, ev, self.broker_ports, self.tls_ports)
        closed = ev.ended in _CLOSED
        conn.closed_by = ev.closed_by
        self.refusals.ended(conn, ev)
        horizon = ev.end_ts if closed else max(ev.end_ts, self.ctx.now)
        self._close(conn, horizon, closed)
        self.auth.ended(conn, ev)
        self.txn.ended(conn)

    def _close(self, conn: ConnState, horizon: int, closed: bool) -> None:
        self.checks.on_close(conn)
        for module in _MODULES:
            module.close(self.ctx, conn, horizon, closed)
        self.refusals.close(conn)
        self.schemas.close(self.ctx, conn)
