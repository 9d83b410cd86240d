"""Authentication rules: credentials a client cannot refresh, challenges left unanswered.

Input (from the engine): the handshake facts (`Handshake`: a CONNECT's credential and
feature flags, a CONNECTED), the auth exchanges' completion facts (a `Pair` whose request is
an AUTH_CHALLENGE: answered by AUTH_RESPONSE, or never), each connection's end
(`Conversation`: how it ended, whose FIN or RST came first, its auth counts), then `finish`.
Output: `auth.challenge_unanswered`, one row per connection when it ends;
`auth.refresh_unsupported`, one row per client address and broker at the capture's end.
Rules:
- challenge_unanswered: an AUTH_CHALLENGE answered later than auth_wait (the broker's
  authenticationRefreshCheckSeconds: it closes the connection at its next check), or never
  answered: before the broker ended the connection (its FIN/RST first: the close is part of
  the evidence), or for longer than auth_wait before the connection or the capture ended (a
  client that closes its own connection sooner left; it did not ignore the challenge). A
  connection with bytes missing (a TCP gap: the answer may be in it) says nothing.
- refresh_unsupported: a connection captured whole and intact whose CONNECT carries a
  credential (auth_data) and does not offer `supports_auth_refresh`, accepted (CONNECTED),
  with no AUTH_CHALLENGE and every PING answered (a broker ends a connection whose PINGs
  go unanswered: keepalive.unanswered), that the broker ended (its FIN or RST came first: a
  client that closes its own connection is not this; unknown when the capture shows no
  FIN/RST) is a candidate; its lifetime runs from CONNECT to the broker's FIN/RST. The
  candidates of one client address and broker make a finding when at least two have
  similar lifetimes (a steady period: the token's lifetime) or when one ends at its own
  token's expiry: a JWT's `exp` claim (read from the credential, never shown; the secret is
  its signature), the close no earlier than SKEW_US before it and no later than auth_wait +
  SKEW_US after it.
  Similar: within min(auth_wait, 10% of the shorter) + SKEW_US of each other. The broker
  notices an expired credential at its next check (every auth_wait), so one lifetime's
  closes spread over up to one check; the 10% keeps lifetimes of different sizes (5 s and
  50 s) from passing for a period; SKEW_US covers `exp`'s whole seconds and the clocks of
  the capture and the broker. One connection closed with no `exp` to compare is no period.
- Bounds: per connection, the challenges waiting are the facts' (MAX_PENDING); candidates are
  kept per client and broker up to MAX_CANDIDATES (the oldest forgotten), the keys up to
  MAX_KEYS (`bounded`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dissector.diagnose.state import MAX_TRACKED, ConnState, Context, Evidence, bounded, finding
from dissector.events import (
    CloseReason,
    Conversation,
    Direction,
    Frame,
    Handshake,
    Outcome,
    Pair,
)
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_CONNECT, _CONNECTED = T["CONNECT"], T["CONNECTED"]
_CHALLENGE = T["AUTH_CHALLENGE"]
_CLOSED = frozenset({CloseReason.FIN, CloseReason.RST, CloseReason.PORT_REUSE})
REFRESH = "supports_auth_refresh"
#: Slack (µs) for a JWT's whole-second `exp` and the capture's and broker's clocks.
SKEW_US = 2_000_000
#: Broker-ended connections remembered per client address and broker.
MAX_CANDIDATES = 1_000
#: Largest credential read for its `exp` claim (a JWT is far smaller).
MAX_TOKEN = 16_384


def is_auth_pair(pair: Pair) -> bool:
    """Whether a completion fact is an AUTH_CHALLENGE's (answered or not)."""
    request = pair.request
    return request is not None and request.command_type == _CHALLENGE


def expiry_us(data: bytes) -> int | None:
    """A JWT credential's `exp` claim as µs since the epoch (None: not a JWT with one).
    Only the claims are decoded; nothing of the credential is kept or shown."""
    if len(data) > MAX_TOKEN or data.count(b".") != 2:
        return None
    part = data.split(b".")[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(part + b"=" * (-len(part) % 4)))
    except (ValueError, binascii.Error, RecursionError):  # not JSON; nested too deep
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, (int, float)) or not 0 < exp < 1e11:
        return None
    return round(exp * 1_000_000)


@dataclass(slots=True)
class AuthConn:
    """What one connection said of its credential and challenges."""

    connect: Frame | None = None  # the client's CONNECT
    method: str | None = None  # its auth method's name
    credential: bool = False  # it carries auth_data
    refresh: bool = False  # it offers supports_auth_refresh
    expires: int | None = None  # µs: its JWT's exp claim
    version: str | None = None
    protocol: int | None = None
    accepted: bool = False  # CONNECTED seen
    late: Evidence = field(default_factory=Evidence)  # answered later than auth_wait
    unanswered: list[Frame] = field(default_factory=list)  # never answered (the facts)
    longest: int = 0  # µs, of the late ones


class Candidate(NamedTuple):
    """A connection the broker ended, of a client that cannot refresh its credential."""

    conn: ConnState
    connect: Frame
    lifetime: int  # µs, CONNECT to the broker's FIN/RST
    close_packet: int
    close_ts: int
    at_expiry: bool  # the close came at its token's exp
    method: str | None
    version: str | None


class Auth:
    """The auth rules' state for one capture (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.conns: dict[int, AuthConn] = {}
        #: (client ip, broker ip, broker port) -> candidates, oldest first
        self.groups: dict[tuple[str, str, int], list[Candidate]] = {}

    def _state(self, conn: ConnState) -> AuthConn:
        state = self.conns.get(conn.conn_id)
        if state is None:
            state = self.conns[conn.conn_id] = AuthConn()
        return state

    def on_handshake(self, conn: ConnState, fact: Handshake) -> None:
        frame = fact.frame
        if frame.command_type == _CONNECT and frame.direction is C2B:
            state = self._state(conn)
            body: Any = frame.body
            data = body.auth_data if body.HasField("auth_data") else b""
            state.connect = frame
            state.method = fact.info.auth_method
            state.credential = bool(data)
            state.refresh = fact.info.supports(REFRESH)
            state.expires = expiry_us(data) if data else None
            state.version = fact.info.client_version
            state.protocol = fact.info.client_protocol
        elif frame.command_type == _CONNECTED:
            self._state(conn).accepted = True

    def on_pair(self, conn: ConnState, pair: Pair) -> None:
        """An AUTH_CHALLENGE answered (late: evidence) or never (judged at the end)."""
        challenge = pair.request
        assert challenge is not None
        state = self._state(conn)
        if pair.outcome is Outcome.UNANSWERED:
            if len(state.unanswered) < MAX_TRACKED:
                state.unanswered.append(challenge)
            return
        response = pair.response
        if response is None:
            return
        wait = response.last_ts - challenge.last_ts
        if wait > self.ctx.us["auth_wait"]:
            state.late.add(challenge)
            state.late.add(response)
            state.longest = max(state.longest, wait)

    def ended(self, conn: ConnState, ev: Conversation) -> None:
        """The connection ended: its challenges judged, and whether the broker ended it at
        its credential's end."""
        state = self.conns.pop(conn.conn_id, None)
        if state is None or not conn.intact:
            return
        self._challenges(conn, ev, state)
        self._candidate(conn, ev, state)

    def _challenges(self, conn: ConnState, ev: Conversation, state: AuthConn) -> None:
        ctx, wait = self.ctx, self.ctx.us["auth_wait"]
        closed = ev.ended in _CLOSED
        horizon = ev.end_ts if closed else max(ev.end_ts, ctx.now)
        evidence = Evidence()
        evidence.merge(state.late)
        longest = state.longest
        by_broker = closed and ev.closed_by is B2C
        never = [f for f in state.unanswered if by_broker or horizon - f.last_ts > wait]
        for f in never:
            evidence.add(f)
            longest = max(longest, horizon - f.last_ts)
        if not evidence:
            return
        late = state.late.count // 2
        parts = []
        if late:
            parts.append(f"{late} answered late (the longest after {state.longest / 1e6:.1f} s)")
        if never and closed:
            close_ts = ev.close_ts or ev.end_ts
            evidence.add_at(ev.close_packet or ev.last_packet, close_ts, 0)
            parts.append(
                f"{len(never)} never answered: {_closer(ev)} "
                f"{(close_ts - never[0].last_ts) / 1e6:.1f} s after the first"
            )
        elif never:
            parts.append(f"{len(never)} never answered before the capture ended")
        n = late + len(never)
        who = f" (client {state.version})" if state.version else ""
        ctx.emit(
            finding(
                FindingCode.AUTH_CHALLENGE_UNANSWERED,
                evidence,
                conn=conn,
                summary=f"{n} AUTH_CHALLENGE{'s' if n > 1 else ''} from the broker got no "
                f"AUTH_RESPONSE within {ctx.th.auth_wait:g} s{who}: " + "; ".join(parts),
                value=round(longest / 1e6, 3),
                unit="s",
                count=n,
            )
        )

    def _candidate(self, conn: ConnState, ev: Conversation, state: AuthConn) -> None:
        connect = state.connect
        if (
            connect is None
            or not conn.whole
            or not state.credential
            or state.refresh
            or not state.accepted
            or ev.info.auth_challenges
            or ev.info.pings > ev.info.pongs
            or ev.ended not in _CLOSED
            or ev.closed_by is not B2C
            or conn.key is None
        ):
            return
        close_ts = ev.close_ts
        at_expiry = state.expires is not None and (
            state.expires - SKEW_US
            <= close_ts
            <= state.expires + self.ctx.us["auth_wait"] + SKEW_US
        )
        key = (conn.key.client_ip, conn.key.broker_ip, conn.key.broker_port)
        group = bounded(self.groups, key, list)
        group.append(
            Candidate(
                conn,
                connect,
                close_ts - connect.last_ts,
                ev.close_packet,
                close_ts,
                at_expiry,
                state.method,
                state.version,
            )
        )
        if len(group) > MAX_CANDIDATES:
            del group[0]

    def finish(self) -> None:
        """The capture ended: each client's broker-ended connections judged together."""
        for (client, broker, port), group in self.groups.items():
            chosen = _steady(group, self.ctx.us["auth_wait"])
            chosen += [c for c in group if c.at_expiry and c not in chosen]
            if chosen:
                self._refresh_unsupported(client, f"{broker}:{port}", chosen)
        self.groups.clear()
        self.conns.clear()

    def _refresh_unsupported(self, client: str, broker: str, chosen: list[Candidate]) -> None:
        chosen.sort(key=lambda c: c.close_ts)
        evidence = Evidence()
        for c in chosen:
            evidence.add_at(c.connect.last_packet, c.connect.last_ts, 0)
            evidence.add_at(c.close_packet, c.close_ts)
        lifetimes = sorted(c.lifetime for c in chosen)
        period = lifetimes[len(lifetimes) // 2] / 1e6
        n = len(chosen)
        versions = sorted({c.version for c in chosen if c.version})
        methods = sorted({c.method for c in chosen if c.method})
        expired = sum(c.at_expiry for c in chosen)
        spread = f" ({lifetimes[0] / 1e6:.1f} to {lifetimes[-1] / 1e6:.1f} s)" if n > 1 else ""
        summary = (
            f"the broker ended {n} connection{'s' if n > 1 else ''} of client {client} to "
            f"{broker} about {period:.1f} s after CONNECT{spread}, with no AUTH_CHALLENGE"
            + (f", {expired} at its token's expiry (exp claim)" if expired else "")
            + f"; the client ({', '.join(versions) or 'version not said'}) authenticates with "
            + f"{', '.join(repr(m) for m in methods) or 'a credential'} and does not offer "
            + REFRESH
        )
        self.ctx.emit(
            finding(
                FindingCode.AUTH_REFRESH_UNSUPPORTED,
                evidence,
                conn=chosen[-1].conn,
                summary=summary,
                entity=f"client {client}",
                value=round(period, 3),
                unit="s",
                count=n,
            )
        )


def _closer(ev: Conversation) -> str:
    """Who ended a connection, in words."""
    if ev.closed_by is B2C:
        return "the broker ended the connection"
    return "the client ended the connection" if ev.closed_by is C2B else "the connection ended"


def _steady(group: list[Candidate], check: int) -> list[Candidate]:
    """The most candidates whose lifetimes are all similar (module docstring), when at least
    two; else none."""
    ordered = sorted(group, key=lambda c: c.lifetime)
    best: list[Candidate] = []
    lo = 0
    for hi in range(len(ordered)):
        while ordered[hi].lifetime - ordered[lo].lifetime > _tolerance(ordered[lo].lifetime, check):
            lo += 1
        if hi - lo + 1 > len(best):
            best = ordered[lo : hi + 1]
    return best if len(best) >= 2 else []


def _tolerance(shorter: int, check: int) -> int:
    """How far apart (µs) two lifetimes of one period may be (module docstring)."""
    return min(check, shorter // 10) + SKEW_US
