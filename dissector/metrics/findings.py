"""The findings' series: a finding counted once, when it is established, open while it lasts.

Input: findings told as established (`told`: the Diagnoser's listener, Context.listener: the
timers' stalls while they last, the spanning rules' episodes as they pass their threshold),
the findings table's rows (`rows`), connections ending (`ended`), the read's end (`finish`);
the feed's open connections (a mapping by conn_id, read as they change).
Output: the store's findings_total and findings_open (code, severity).
Rules:
- A finding counts once: when it is told, or when its row comes if it never was. A row is the
  told finding's when their keys are equal: code, topic, entity, and the connection, for a
  finding of one connection (a PING, a producer, a consumer: the stalls the engine's sweep
  tells), or the client's address for the rules that follow a client across connections
  (`ACROSS`: told with the connection at hand, their row names the episode's last one, or
  none: a redirect chain's row without a loop shown; a row without a client then matches
  any client's). Both carry these (the Finding; the row's conn_id, client_ip, code, topic,
  entity); the severity is the code's (the registry).
- A key told again before its row came is the same finding (a consumer's every stall, a
  redirect chain told at its cycle and at its count: one row each); a row of a key not
  told counts then, as do the rows beyond the first of a key told once (a connection's
  PINGs unanswered in both directions: two rows).
- Open while its connection is: the told one's until its row comes, then the row's (rows
  made when a connection ends come after that end: not open); every connection's ended
  ones close at its end. At the read's end a finding told but never made a row (the engine
  judged the episode whole and found none) is no longer open; it stays counted.
- Bounded: MAX_TOLD findings told and waiting for their row, the oldest forgotten (its row
  would count again).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping

import pyarrow as pa

from dissector.events import Finding
from dissector.findings import FindingCode
from dissector.metrics.store import MetricStore

TOTAL, OPEN = "pulsar_dissect_findings_total", "pulsar_dissect_findings_open"
#: Codes whose rule follows a client across connections: told with the connection at hand,
#: their row names the episode's last connection (dissector.diagnose: storms, retries,
#: spanning's lookup chains): matched by the client's address rather than the connection.
ACROSS = frozenset(
    {
        FindingCode.RECONNECT_STORM,
        FindingCode.RECONNECT_RETRY_LOOP,
        FindingCode.LOOKUP_REDIRECT_LOOP,
    }
)
#: Told findings waiting for their row, at most (a few per open connection's stall).
MAX_TOLD = 100_000
_COLUMNS = ("conn_id", "client_ip", "code", "severity", "topic", "entity")
#: code, topic, entity, and the connection (int) or the client's address (ACROSS)
_Key = tuple[str, str | None, str | None, int | str | None]


def _key(code: str, topic: str | None, entity: str | None, conn: int, client: str | None) -> _Key:
    return (code, topic, entity, client if code in ACROSS else conn)


class FindingsCount:
    """findings_total and findings_open of a read (module rules)."""

    def __init__(self, store: MetricStore, connections: Mapping[int, object]) -> None:
        self.store = store
        self._conns = connections  # the connections open now (the feed's)
        #: key -> (conn_id, (code, severity)) of a finding told, its row not come yet
        self._told: OrderedDict[_Key, tuple[int, tuple[str, ...]]] = OrderedDict()
        self._open: dict[int, Counter[tuple[str, ...]]] = {}  # conn -> open (code, severity)

    def told(self, found: Finding) -> None:
        """The Diagnoser's listener: a finding established now."""
        client = None if found.key is None else found.key.client_ip
        key = _key(found.code, found.topic, found.entity, found.conn_id, client)
        if key in self._told:
            return  # the same finding, told again (module rules)
        labels = (found.code, str(found.severity))
        self.store.inc(TOTAL, labels)
        self._told[key] = (found.conn_id, labels)
        if len(self._told) > MAX_TOLD:
            conn, old = self._told.popitem(last=False)[1]
            self._close(conn, old)  # forgotten: no longer shown open either
        self._opens(found.conn_id, labels)

    def rows(self, batch: pa.RecordBatch) -> None:
        """Rows of the findings table."""
        counted: Counter[tuple[str, ...]] = Counter()
        columns = (batch.column(name).to_pylist() for name in _COLUMNS)
        for conn, client, code, severity, topic, entity in zip(*columns, strict=True):
            labels: tuple[str, ...] = (code, severity)
            told = self._take(_key(code, topic, entity, conn, client))
            if told is None:
                counted[labels] += 1
            else:  # counted when told; open now as its row says
                self._close(*told)
            self._opens(conn, labels)
        for labels, n in counted.items():
            self.store.inc(TOTAL, labels, n)

    def _take(self, key: _Key) -> tuple[int, tuple[str, ...]] | None:
        """The finding told of `key` (a row's), no longer waiting (None: none told)."""
        told = self._told.pop(key, None)
        if told is None and key[0] in ACROSS and key[3] is None:  # any client's (rules)
            for waiting in self._told:
                if waiting[:3] == key[:3]:
                    return self._told.pop(waiting)
        return told

    def ended(self, conn: int) -> None:
        """A connection ended (not with the capture): its findings are no longer open."""
        for labels, n in self._open.pop(conn, Counter()).items():
            self.store.add_gauge(OPEN, labels, -n)

    def finish(self) -> None:
        """Every row is made: findings told that made none are no longer open."""
        for conn, labels in self._told.values():
            self._close(conn, labels)
        self._told.clear()

    def _opens(self, conn: int, labels: tuple[str, ...]) -> None:
        if conn in self._conns:
            self._open.setdefault(conn, Counter())[labels] += 1
            self.store.add_gauge(OPEN, labels, 1)

    def _close(self, conn: int, labels: tuple[str, ...]) -> None:
        """One finding of `conn` shown open no longer (if it was)."""
        counts = self._open.get(conn)
        if counts is not None and counts[labels] > 0:
            counts[labels] -= 1
            self.store.add_gauge(OPEN, labels, -1)
