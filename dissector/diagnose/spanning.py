"""Rules across connections: what spans reconnects, redirects and migrations.

Input: from the per-connection rules, SENDs and receipts of named producers, deliveries and
acks of subscribed consumers, LOOKUP and SEEK answers; from the engine, LOOKUP and SEEK
requests and FLOWs (`HANDLERS`; a FLOW starts a dispatch: dissector.diagnose.crossing) and
the lifecycle facts (`on_life`: PRODUCER/SUBSCRIBE declared, TOPIC_MIGRATED, a broker's
CLOSE_PRODUCER/CLOSE_CONSUMER naming an assigned broker); at the end, the capture's last
time (`finish`).
Output: findings producer.sequence_regression (across connections), lookup.redirect_loop
and topic.migrated_not_followed, one row per producer name, (client, topic) lookup chain or
migration; consumer.redelivered_after_ack, through dissector.diagnose.subscriptions.
Rules:
- Producers are keyed by (topic, producer name), consumers by (topic, subscription), lookup
  chains and migrations by (client address, topic): ids are per connection, names are not.
- A SEND on a new connection from the same client address at or below the highest sequence
  id a previous connection had receipted for that name regresses (a counter reset), unless
  the client closed that producer (CLOSE_PRODUCER): then it is a new producer, not a
  reconnect.
- Acks, deliveries and SEEKs of subscriptions (consumer.redelivered_after_ack):
  dissector.diagnose.subscriptions.
- More than max_redirects consecutive Redirect answers for one (client, topic), a Redirect
  to the broker just asked, the same Redirect (from the same broker to the same broker
  URL) twice in one run of Redirects (a cycle: dissector.diagnose.cycles), or a follow-up
  LOOKUP whose `authoritative` is not the Redirect's, is a redirect loop. A run ends at the
  chain's next non-Redirect answer.
- After TOPIC_MIGRATED or a broker CLOSE_* with an assigned broker URL, the same client must
  create the producer/consumer again on another broker within reconnect_wait; coming back
  to the same broker, later, or not at all (measured to the capture's end) is not following.
Memory: each key table holds at most MAX_KEYS entries (the oldest forgotten).
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from dissector.diagnose import crossing
from dissector.diagnose.cycles import Hops
from dissector.diagnose.cycles import name as broker_name
from dissector.diagnose.state import (
    MAX_KEYS,
    ConnState,
    ConsumerState,
    Context,
    Evidence,
    ProducerState,
    RuleStep,
    bounded,
    finding,
)
from dissector.diagnose.subscriptions import AckedSubscriptions
from dissector.events import Direction, EntityKind, Finding, Frame, Lifecycle, LifeStep
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
C2B = Direction.CLIENT_TO_BROKER
_REDIRECT = 0


@dataclass(slots=True)
class _Name:
    receipted: int = -1  # highest sequence id receipted
    conn: ConnState | None = None  # where
    regression: Evidence = field(default_factory=Evidence)
    detail: str = ""
    last: ConnState | None = None


@dataclass(slots=True)
class _Chain:
    redirects: int = 0  # consecutive, so far
    longest: int = 0
    authoritative: bool | None = None  # the last Redirect's, for the follow-up LOOKUP
    run: Evidence = field(default_factory=Evidence)  # the current run of Redirects
    hops: Hops = field(default_factory=Hops)  # its Redirects, for cycles
    loop: Evidence = field(default_factory=Evidence)
    why: list[str] = field(default_factory=list)
    last: ConnState | None = None


@dataclass(slots=True)
class _Move:
    url: str
    ts: int
    packet: int
    old: tuple[str, int]  # the broker left
    entity: str
    conn: ConnState


def _host(url: str) -> tuple[str | None, int | None]:
    """(host, port) of a service URL; the host as an IP literal's text when it is one."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None, None
    if host is not None:
        with contextlib.suppress(ValueError):
            host = str(ipaddress.ip_address(host))
    return host, port


def _client(conn: ConnState) -> str:
    return conn.key.client_ip if conn.key is not None else ""


def _broker(conn: ConnState) -> tuple[str, int]:
    return (conn.key.broker_ip, conn.key.broker_port) if conn.key is not None else ("", 0)


class Spanning:
    """State across the connections of one capture; see the module docstring."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.names: dict[tuple[str | None, str, str], _Name] = {}
        self.subs = AckedSubscriptions()
        self.chains: dict[tuple[str, str], _Chain] = {}
        self.moves: dict[tuple[str, str | None], _Move] = {}
        self.unfollowed: list[tuple[_Move, Evidence, str]] = []

    # ------------------------------------------------------------------ producers

    def sent(self, conn: ConnState, p: ProducerState, seq: int, frame: Frame) -> None:
        meta = frame.metadata
        name = p.name or (meta.producer_name if meta is not None else None)
        if not name:
            return
        p.name = name
        st = bounded(self.names, (p.topic, name, _client(conn)), _Name)
        if st.conn is not None and st.conn is not conn and seq <= st.receipted:
            st.regression.add(frame)
            st.last = conn
            st.detail = (
                f"sequence id {seq} on conn {conn.conn_id}, at or below {st.receipted} "
                f"receipted on conn {st.conn.conn_id}"
            )

    def closed(self, conn: ConnState, p: ProducerState) -> None:
        """The client closed the producer (CLOSE_PRODUCER): the next one of that name is a
        new producer, not a reconnect, and may start its sequence anew."""
        if p.name:
            self.names.pop((p.topic, p.name, _client(conn)), None)

    def receipted(self, conn: ConnState, p: ProducerState, seq: int) -> None:
        if not p.name:
            return
        st = bounded(self.names, (p.topic, p.name, _client(conn)), _Name)
        if st.conn is not conn or seq > st.receipted:
            st.receipted, st.conn = seq, conn

    # ------------------------------------------------------------------ consumers

    def delivered(self, conn: ConnState, c: ConsumerState, key: tuple[int, int], f: Frame) -> None:
        self.subs.delivered(conn, c, key, f)

    def acked(
        self, c: ConsumerState, key: tuple[int, int], *, cumulative: bool, ack: Frame
    ) -> None:
        self.subs.acked(c, key, cumulative=cumulative, ack=ack)

    # ------------------------------------------------------------------ lookups

    def lookup(self, conn: ConnState, frame: Frame, body: Any) -> None:
        """A LOOKUP request: does it pass on the Redirect's authoritative flag?"""
        chain = self.chains.get((_client(conn), body.topic))
        if chain is None or chain.redirects == 0 or chain.authoritative is None:
            return
        if body.authoritative != chain.authoritative:
            chain.loop.add(frame)
            chain.last = conn
            chain.why.append(
                f"a LOOKUP with authoritative={body.authoritative} after a Redirect with "
                f"{chain.authoritative}"
            )
        chain.authoritative = None

    def lookup_answered(self, conn: ConnState, request: Frame, response: Frame) -> None:
        body = response.body
        chain = bounded(self.chains, (_client(conn), request.body.topic), _Chain)
        if body.response != _REDIRECT:
            self._end_run(chain)
            return
        chain.redirects += 1
        chain.run.add(response)
        chain.authoritative = body.authoritative
        url = body.brokerServiceUrl or body.brokerServiceUrlTls
        if _host(url) == _broker(conn):
            chain.loop.add(response)
            chain.last = conn
            chain.why.append(f"a Redirect to {url}, the broker asked")
        self._cycle(chain, conn, response, url, request.body.topic)
        if chain.redirects == self.ctx.th.max_redirects + 1:
            self.ctx.established(self._chain_finding(chain, request.body.topic, conn))

    def _cycle(self, chain: _Chain, conn: ConnState, response: Frame, url: str, topic: str) -> None:
        """The same Redirect twice in the run: a cycle (told once; its later repeats are
        evidence too)."""
        known = chain.hops.cycle
        asked = _host(conn.proxy_to) if conn.proxy_to else _broker(conn)  # behind a proxy
        cycle = chain.hops.add(asked, _host(url), response.last_packet, response.last_ts)
        if cycle is None:
            return
        chain.last = conn
        if known is not None:
            chain.loop.add(response)
            return
        for packet, ts in cycle.packets:
            if packet not in chain.loop.packets:  # not told already (a Redirect to itself)
                chain.loop.add_at(packet, ts)
        chain.why.append(
            f"a cycle of Redirects {cycle.named()} (the Redirect from {broker_name(asked)} to "
            f"{url} twice)"
        )
        self.ctx.established(self._chain_finding(chain, topic, conn))

    def _end_run(self, chain: _Chain) -> None:
        if chain.redirects > self.ctx.th.max_redirects:
            chain.loop.merge(chain.run)
            chain.why.append(f"{chain.redirects} consecutive Redirects")
        chain.longest = max(chain.longest, chain.redirects)
        chain.redirects = 0
        chain.run = Evidence()
        chain.hops = Hops()
        chain.authoritative = None

    def _chain_finding(self, chain: _Chain, topic: str, conn: ConnState | None) -> Finding:
        ev = chain.loop if chain.loop else chain.run
        why = "; ".join(dict.fromkeys(chain.why)) or f"{chain.redirects} consecutive Redirects"
        return finding(
            FindingCode.LOOKUP_REDIRECT_LOOP,
            ev,
            conn=conn,
            topic=topic,
            summary=f"LOOKUP of {topic}: {why}",
            value=float(max(chain.longest, chain.redirects)),
            unit="redirects",
        )

    # ------------------------------------------------------------------ migrations

    def moved(self, conn: ConnState, topic: str | None, url: str, entity: str, f: Frame) -> None:
        move = _Move(url, f.last_ts, f.last_packet, _broker(conn), entity, conn)
        self.moves[(_client(conn), topic)] = move
        if len(self.moves) > MAX_KEYS:
            del self.moves[next(iter(self.moves))]

    def created(self, conn: ConnState, topic: str | None, f: Frame) -> None:
        """A PRODUCER or SUBSCRIBE: does it follow a migration?"""
        move = self.moves.pop((_client(conn), topic), None)
        if move is None:
            return
        delay = f.last_ts - move.ts
        target = _host(move.url)
        back = _broker(conn) == move.old and target != move.old
        if back or delay > self.ctx.us["reconnect_wait"]:
            ev = Evidence()
            ev.add_at(move.packet, move.ts)
            ev.add(f)
            where = "to the same broker" if back else f"after {delay / 1e6:.1f} s"
            if len(self.unfollowed) < MAX_KEYS:
                self.unfollowed.append((move, ev, f"came back {where}"))

    # ------------------------------------------------------------------ the end

    def finish(self, horizon: int) -> None:
        ctx = self.ctx
        for (name_topic, name, _), st in self.names.items():
            if st.regression:
                ctx.emit(
                    finding(
                        FindingCode.PRODUCER_SEQUENCE_REGRESSION,
                        st.regression,
                        conn=st.last,
                        topic=name_topic,
                        entity=f"producer {name}",
                        summary=f"producer {name} reconnected and its sequence went backwards "
                        f"({st.detail})",
                        value=st.regression.count,
                        unit="sends",
                    )
                )
        self.subs.finish(ctx)
        for (_, topic), chain in self.chains.items():
            self._end_run(chain)
            if chain.loop:
                ctx.emit(self._chain_finding(chain, topic, chain.last))
        for move in self.moves.values():
            if horizon - move.ts > ctx.us["reconnect_wait"]:
                ev = Evidence()
                ev.add_at(move.packet, move.ts)
                wait = (horizon - move.ts) / 1e6
                self.unfollowed.append((move, ev, f"did not come back for {wait:.1f} s"))
        self.moves.clear()
        for move, ev, what in self.unfollowed:
            ctx.emit(
                finding(
                    FindingCode.TOPIC_MIGRATED_NOT_FOLLOWED,
                    ev,
                    conn=move.conn,
                    ts=move.ts + ctx.us["reconnect_wait"],
                    entity=move.entity,
                    summary=f"{move.entity} was sent to {move.url} and {what}",
                    value=(ev.last_ts - ev.first_ts) / 1e6 if ev.count > 1 else None,
                    unit="s",
                )
            )
        self.unfollowed.clear()


def _span(ctx: Context) -> Spanning:
    span = ctx.span
    assert isinstance(span, Spanning)
    return span


def on_lookup(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    if frame.direction is C2B:
        _span(ctx).lookup(conn, frame, body)


def lookup_answered(ctx: Context, conn: ConnState, request: Frame, response: Frame) -> None:
    _span(ctx).lookup_answered(conn, request, response)


def on_life(ctx: Context, conn: ConnState, fact: Lifecycle) -> None:
    """A producer's or consumer's step: PRODUCER or SUBSCRIBE (does it follow a migration?);
    TOPIC_MIGRATED, or a broker's CLOSE_PRODUCER/CLOSE_CONSUMER naming an assigned broker (a
    move to follow)."""
    step, frame = fact.step, fact.frame
    if step is LifeStep.DECLARED:
        entity = fact.entity
        assert entity is not None  # the PRODUCER or SUBSCRIBE made it
        if fact.kind is EntityKind.CONSUMER:
            assert entity.subscription is not None  # a SUBSCRIBE names its subscription
            _span(ctx).subs.subscribed(conn, entity.topic, entity.subscription)
        _span(ctx).created(conn, entity.topic, frame)
        return
    url = fact.broker_url
    if url is None or (step is not LifeStep.MIGRATED and step is not LifeStep.CLOSED_BY_BROKER):
        return
    table: Any = conn.producers if fact.kind is EntityKind.PRODUCER else conn.consumers
    moving = table.get(fact.entity_id)
    if moving is not None:
        _span(ctx).moved(conn, moving.topic, url, moving.label(), frame)


def on_seek(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    c = conn.consumers.get(body.consumer_id)
    if c is not None and frame.direction is C2B and body.HasField("request_id"):
        _span(ctx).subs.seek(conn, c, body.request_id)


def seek_answered(ctx: Context, conn: ConnState, request: Frame, response: Frame) -> None:
    done = response.command_type == T["SUCCESS"]
    _span(ctx).subs.seek_answered(conn, request.body.request_id, done=done)


def on_flow(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A FLOW: its consumer's dispatch starts (crossing.py)."""
    c = conn.consumers.get(body.consumer_id)
    if c is not None and frame.direction is C2B:
        crossing.flowed(c, frame.last_ts)


HANDLERS: dict[int, RuleStep] = {
    T["LOOKUP"]: on_lookup,
    T["SEEK"]: on_seek,
    T["FLOW"]: on_flow,
}
