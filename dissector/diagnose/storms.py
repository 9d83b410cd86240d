"""reconnect.storm: one client opening and ending connections to one broker at a high rate.

Input: through dissector.diagnose.refusals, the ERRORs the broker sent (their Pair facts) and
its CLOSE_PRODUCER / CLOSE_CONSUMER (lifecycle facts) on each connection, then the end of
each connection (`ended`: the Conversation, how it ended); at the end, `finish`.
Output: findings reconnect.storm, one row per (client address, broker address and port)
where at least `storm_per_minute` connections both opened and ended within one 60 s
window: the first packets of the worst window's connections as evidence (the first ones
and the last); the summary says how many in the worst minute, how many in all, and how they
ended: by close reason (fin, rst, port reuse) and what each said last (the latest ERROR
and the request it answered, the broker's CLOSE_*, or how far its handshake went).
Rules:
- A connection counts when the capture saw it open (its SYN) and end (FIN, RST, or a new
  SYN on its ports), not when it was open at the capture's start or end, nor closed by
  the dissector's own bounds (idle timeout, eviction).
- The worst window: for each connection's end, the connections of the key that opened at
  most 60 s before it (all of which ended by then).
Memory: per key, at most MAX_WINDOW connections in the window (beyond, the count is a
floor); keys up to MAX_KEYS; per open connection, its last word up to MAX_KEYS connections.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field

from dissector.diagnose.state import MAX_KEYS, ConnState, Context, Evidence, bounded, finding
from dissector.events import CloseReason, Conversation, Finding
from dissector.findings import FindingCode

#: Connections kept per key within the window: a storm this big is told as "at least".
MAX_WINDOW = 10_000
WINDOW_US = 60_000_000
_ENDED = frozenset({CloseReason.FIN, CloseReason.RST, CloseReason.PORT_REUSE})
#: (client ip, broker ip, broker port)
_Key = tuple[str, str, int]
#: one connection of a window: (opened µs, its first packet, conn_id, how it ended)
_Entry = tuple[int, int, int, str]


@dataclass(slots=True)
class _Storm:
    window: list[_Entry] = field(default_factory=list)  # a heap by opening time
    total: int = 0  # connections opened and ended, in all
    worst: int = 0
    evidence: Evidence = field(default_factory=Evidence)
    how: Counter[str] = field(default_factory=Counter)  # the worst window's endings
    conn: ConnState | None = None  # the worst window's last connection
    ts: int = 0  # its end
    told: bool = False


def _said(conn: ConnState, ev: Conversation, last: str | None) -> str:
    """What a connection said before it ended, in words."""
    if last is not None:
        return f"after {last}"
    info = ev.info
    if info.client_version is None and info.client_protocol is None:
        return "with no CONNECT"
    if info.server_version is None and info.server_protocol is None:
        return "right after CONNECT, with no CONNECTED"
    if not info.entities:
        return "after CONNECTED, with no producer or consumer"
    return "with its producers or consumers open"


class Storms:
    """Connections opened and ended per client and broker; see the module docstring."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.last: dict[int, str] = {}  # conn_id -> the latest ERROR or CLOSE_* seen on it
        self.storms: dict[_Key, _Storm] = {}

    def said(self, conn: ConnState, what: str) -> None:
        """An ERROR or a broker's CLOSE_* on `conn` (what: in words)."""
        self.last.pop(conn.conn_id, None)
        self.last[conn.conn_id] = what
        if len(self.last) > MAX_KEYS:
            del self.last[next(iter(self.last))]

    def ended(self, conn: ConnState, ev: Conversation) -> None:
        last = self.last.pop(ev.conn_id, None)
        if not ev.syn_seen or ev.ended not in _ENDED:
            return
        key = ev.key
        storm = bounded(self.storms, (key.client_ip, key.broker_ip, key.broker_port), _Storm)
        storm.total += 1
        how = f"({ev.ended}) {_said(conn, ev, last)}"
        window = storm.window
        heapq.heappush(window, (ev.start_ts, ev.first_packet, ev.conn_id, how))
        since = ev.end_ts - WINDOW_US
        while window and window[0][0] < since:
            heapq.heappop(window)
        if len(window) > MAX_WINDOW:
            heapq.heappop(window)
        if len(window) <= storm.worst:
            return
        storm.worst = len(window)
        storm.conn, storm.ts = conn, ev.end_ts
        th = self.ctx.th.storm_per_minute
        if storm.worst >= th:
            storm.evidence = Evidence()
            for opened, packet, _, _ in sorted(window):
                storm.evidence.add_at(packet, opened)
            storm.how = Counter(entry[3] for entry in window)
            if not storm.told:
                storm.told = True
                self.ctx.established(self._row(key, storm))

    def _row(self, key: tuple[str, int, str, int], storm: _Storm) -> Finding:
        client, _, broker, port = key
        ended = ", ".join(f"{n} ended {how}" for how, n in storm.how.most_common())
        floor = "at least " if storm.worst >= MAX_WINDOW else ""
        return finding(
            FindingCode.RECONNECT_STORM,
            storm.evidence,
            conn=storm.conn,
            ts=storm.ts,
            summary=f"{client} opened and ended {floor}{storm.worst} connections to "
            f"{broker}:{port} within one minute ({storm.total} in all): {ended}",
            count=storm.worst,
            value=storm.worst,
            unit="connections/min",
        )

    def finish(self) -> None:
        for (client, broker, port), storm in self.storms.items():
            if storm.worst >= self.ctx.th.storm_per_minute:
                self.ctx.emit(self._row((client, 0, broker, port), storm))
        self.storms.clear()
        self.last.clear()
