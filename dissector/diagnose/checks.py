"""What the rules checked and found in order: the clean bill that goes with the findings.

Input: the protocol facts the engine already routes (`on_pair`: a SEND receipted or failed,
a request answered or failed, a PING answered, each with its latency, or never answered;
`on_permits`: a consumer's permits followed, or unknown) and each connection as it ends
(`on_close`: whether the capture holds its CONNECT and every byte of it).
Output: `rows(ts)`, one `CheckRow` per kind of check (CHECKS) with what was checked, what failed,
what the capture could not tell, and for answers the worst latency and a latency sketch
(the `checks` table: dissector.tables.diagnoses); `describe`, the words for a check's numbers
(the table's `detail`, and `diagnose`'s "checked" line once several rows are added up).
Rules:
- Counted from the facts, never from frames or another table: bounded state only
  (counters, maxima, a fixed-size latency sketch; the producers and consumers of the open
  connections, at most MAX_ENTITIES a connection, as the facts keep them).
- A latency is the response's time minus the request's (the timeline's latency_us). The
  sketch's buckets (`bucket`) are exact below 16 µs, then 16 a doubling (at most 6.25%
  wide): rows of several groups, captures or machines add up bucket by bucket (`merge`),
  so a p99 over all of them is that of one sketch; maxima take the largest.
- "Could not know": a SEND, request or PING with no answer in the capture (waiting at its
  end, or on a connection that ended), an answer whose request the capture missed, a
  consumer whose permits started before the capture, a connection whose CONNECT was not
  captured (mid-stream) or that lost bytes (TCP gap).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from dissector.diagnose.state import ConnState
from dissector.events import Frame, Outcome, Pair, Permits
from dissector.facts import is_request_pair, is_send_pair
from dissector.facts.bounds import MAX_ENTITIES
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
_PING, _PONG = T["PING"], T["PONG"]

SENDS, REQUESTS, PINGS, PERMITS, CONNECTIONS, BYTES = (
    "sends",
    "requests",
    "pings",
    "permits",
    "connections",
    "bytes",
)
#: The checks, in the order their rows come and `diagnose` tells them.
CHECKS = (SENDS, REQUESTS, PINGS, PERMITS, CONNECTIONS, BYTES)
#: Sketch buckets: exact below 16 µs, 16 per doubling up to 2**36 µs (19 hours), the last
#: bucket holding anything longer.
SUB = 16
MAX_BUCKET = 36 * SUB - 1


class CheckRow(NamedTuple):
    """One `checks` table row: what one kind of check saw in a capture (or group)."""

    ts: int  # the capture's end (its latest time)
    check: str  # one of CHECKS
    counted: int  # checked (answered, followed, whole): the table's `count`
    entities: int  # producers (sends), consumers (permits), connections (the others)
    failed: int  # answered with an error (SEND_ERROR, ERROR); 0 for the others
    unknown: int  # what the capture could not tell (module rules)
    worst_us: int | None  # the longest answer (sends, requests, pings)
    p99_us: int | None  # the 99th percentile answer, as the sketch bounds it
    sketch: tuple[int, ...]  # answers per latency bucket (`bucket`), trailing zeros cut
    detail: str  # `describe`'s words


def bucket(us: int) -> int:
    """The sketch bucket of a latency (µs): exact below 16, then 16 buckets a doubling."""
    if us < SUB:
        return max(us, 0)
    bits = us.bit_length()
    return min((bits - 4) * SUB + ((us >> (bits - 5)) & (SUB - 1)), MAX_BUCKET)


def upper(index: int) -> int:
    """The largest latency (µs) bucket `index` holds."""
    if index < SUB:
        return index
    octave, sub = divmod(index, SUB)
    return ((SUB + 1 + sub) << (octave - 1)) - 1


def merge(sketches: Iterable[Sequence[int]]) -> list[int]:
    """Sketches added bucket by bucket."""
    out: list[int] = []
    for sketch in sketches:
        if len(sketch) > len(out):
            out.extend([0] * (len(sketch) - len(out)))
        for i, n in enumerate(sketch):
            out[i] += n
    return out


def quantile(sketch: Sequence[int], q: float, worst: int | None) -> int | None:
    """The q-th quantile's bound: the largest latency its bucket holds, at most `worst`."""
    total = sum(sketch)
    if not total:
        return None
    rank = max(1, -(-int(q * total * 1000) // 1000))  # ceil(q * total), exactly for q .99
    seen = 0
    for i, n in enumerate(sketch):
        seen += n
        if seen >= rank:
            bound = upper(i)
            return bound if worst is None else min(bound, worst)
    return worst


class _Answers:
    """Answers of one kind: counts, the worst latency, the sketch."""

    __slots__ = ("buckets", "count", "failed", "unknown", "worst")

    def __init__(self) -> None:
        self.count = self.failed = self.unknown = 0
        self.worst: int | None = None
        self.buckets = [0] * (MAX_BUCKET + 1)

    def answered(self, request: Frame, response: Frame, failed: bool) -> None:
        wait = max(response.last_ts - request.last_ts, 0)
        self.count += 1
        self.failed += failed
        if self.worst is None or wait > self.worst:
            self.worst = wait
        self.buckets[bucket(wait)] += 1

    def sketch(self) -> tuple[int, ...]:
        last = max((i for i, n in enumerate(self.buckets) if n), default=-1)
        return tuple(self.buckets[: last + 1])


class Checks:
    """The counts of one Diagnoser (one capture or group); see the module docstring."""

    def __init__(self) -> None:
        self.sends, self.requests, self.pings = _Answers(), _Answers(), _Answers()
        #: conn_id -> its producers that got an answer / consumers whose permits were
        #: followed / consumers whose permits are unknown, while it is open
        self._producers: dict[int, set[int]] = {}
        self._followed: dict[int, set[int]] = {}
        self._unfollowed: dict[int, set[int]] = {}
        self.producers = self.consumers = self.unfollowed = 0
        self.request_conns = self.ping_conns = 0
        self._asked: set[int] = set()  # open connections with an answered request
        self._pinged: set[int] = set()  # open connections with an answered PING
        self.connections = self.midstream = self.intact = self.gaps = 0

    def on_pair(self, pair: Pair) -> None:
        """A completion fact: a SEND's, a request's or a PING's (others are not checks)."""
        request, response = pair.request, pair.response
        if is_send_pair(pair):
            assert request is not None
            if response is None:
                self.sends.unknown += 1
                return
            self.sends.answered(request, response, pair.outcome is Outcome.ERROR)
            if pair.producer_id is not None:
                _note(self._producers, pair.conn_id, pair.producer_id)
        elif is_request_pair(pair):
            if request is None or response is None:
                self.requests.unknown += 1
                return
            self.requests.answered(request, response, pair.outcome is Outcome.ERROR)
            self._asked.add(pair.conn_id)
        elif response is not None and response.command_type == _PONG:
            if request is not None:
                self.pings.answered(request, response, False)
                self._pinged.add(pair.conn_id)
        elif request is not None and request.command_type == _PING and response is None:
            self.pings.unknown += 1

    def on_permits(self, fact: Permits) -> None:
        """A consumer's permits: followed from its first FLOW (flows > 0), or unknown."""
        known = self._followed if fact.flows else self._unfollowed
        _note(known, fact.conn_id, fact.consumer_id)

    def on_close(self, conn: ConnState) -> None:
        """A connection ended (or the capture did): what it adds."""
        cid = conn.conn_id
        self.producers += len(self._producers.pop(cid, ()))
        followed = self._followed.pop(cid, set())
        self.consumers += len(followed)
        self.unfollowed += len(self._unfollowed.pop(cid, set()) - followed)
        if cid in self._asked:
            self._asked.discard(cid)
            self.request_conns += 1
        if cid in self._pinged:
            self._pinged.discard(cid)
            self.ping_conns += 1
        self.connections += 1
        self.midstream += not conn.whole
        self.intact += conn.intact
        self.gaps += not conn.intact

    def rows(self, ts: int) -> list[CheckRow]:
        """One row per check (call after every connection's `on_close`); none when there
        was no connection."""
        out: list[CheckRow] = []
        if not self.connections:
            return out
        for check, a, entities in (
            (SENDS, self.sends, self.producers),
            (REQUESTS, self.requests, self.request_conns),
            (PINGS, self.pings, self.ping_conns),
        ):
            sketch = a.sketch()
            p99 = quantile(sketch, 0.99, a.worst)
            out.append(
                _row(ts, check, a.count, entities, a.failed, a.unknown, a.worst, p99, sketch)
            )
        whole = self.connections - self.midstream
        out.append(_row(ts, PERMITS, self.consumers, self.consumers, 0, self.unfollowed))
        out.append(_row(ts, CONNECTIONS, whole, self.connections, 0, self.midstream))
        out.append(_row(ts, BYTES, self.intact, self.connections, 0, self.gaps))
        return out


def _note(table: dict[int, set[int]], conn_id: int, ident: int) -> None:
    ids = table.get(conn_id)
    if ids is None:
        ids = table[conn_id] = set()
    if len(ids) < MAX_ENTITIES:
        ids.add(ident)


def _row(
    ts: int,
    check: str,
    count: int,
    entities: int,
    failed: int,
    unknown: int,
    worst: int | None = None,
    p99: int | None = None,
    sketch: tuple[int, ...] = (),
) -> CheckRow:
    detail = describe(check, count, entities, failed, unknown, worst, p99)
    return CheckRow(ts, check, count, entities, failed, unknown, worst, p99, sketch, detail)


# ------------------------------------------------------------------------------ words


def duration(us: int) -> str:
    """A latency in words, two significant figures: 850 µs, 4.1 ms, 12 ms, 2.5 s."""
    for unit, scale in (("s", 1_000_000), ("ms", 1_000)):
        if us >= scale:
            return f"{_figures(us / scale)} {unit}"
    return f"{us} µs"


def _figures(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else many or one + 's'}"


_ANSWERED = {SENDS: ("SEND", "SENDs"), REQUESTS: ("request", "requests"), PINGS: ("PING", "PINGs")}
_ERRORS = {SENDS: "SEND_ERROR", REQUESTS: "ERROR"}


def words(
    check: str,
    count: int,
    entities: int,
    failed: int,
    unknown: int,
    worst: int | None,
    p99: int | None,
) -> tuple[str, str]:
    """A check's numbers in words: (what was checked, what could not be known), each ""
    when there is nothing to say."""
    checked = unknown_text = ""
    if check in _ANSWERED:
        one, many = _ANSWERED[check]
        if count:
            on = f" on {_n(entities, 'producer')}" if check == SENDS and entities else ""
            every = ", every one answered" if check == SENDS and not unknown and count > 1 else ""
            checked = f"{_n(count, one, many)}{on}{every or ' answered'}"
            if worst is not None:
                checked += f" within {duration(worst)}"
                if p99 is not None and count >= 100 and p99 < worst:
                    checked += f" (p99 {duration(p99)})"
            if failed:
                checked += f", {failed:,} of them with {_ERRORS[check]}"
        if unknown:
            unknown_text = f"{_n(unknown, one, many)} with no answer in the capture"
            if check == REQUESTS:
                unknown_text = (
                    f"{_n(unknown, 'request or answer', 'requests or answers')} whose other "
                    "half is not in the capture"
                )
    elif check == PERMITS:
        if count:
            checked = f"{_possessive(count, 'consumer')} permits followed"
        if unknown:
            unknown_text = (
                f"{_possessive(unknown, 'consumer')} permits (granted before the capture)"
            )
    elif check == CONNECTIONS:
        if entities:
            whole = "from its CONNECT" if entities == 1 else "from their CONNECT"
            checked = f"{_n(entities, 'connection')} " + (
                whole if count == entities else f"({count:,} {whole})"
            )
        if unknown:
            verb = "starts" if unknown == 1 else "start"
            unknown_text = (
                f"{_n(unknown, 'connection')} {verb} before the capture (no CONNECT seen: "
                "permits and pending requests unknown)"
            )
    elif check == BYTES:
        if count:
            checked = f"no byte missing on {_n(count, 'connection')}"
        if unknown:
            unknown_text = f"{_n(unknown, 'connection')} lost bytes (TCP gap)"
    return checked, unknown_text


def _possessive(count: int, one: str) -> str:
    return f"{count:,} {one}'s" if count == 1 else f"{count:,} {one}s'"


def describe(
    check: str,
    count: int,
    entities: int,
    failed: int,
    unknown: int,
    worst: int | None,
    p99: int | None,
) -> str:
    """`words`, in one sentence: "checked; could not know: unknown"."""
    checked, unknown_text = words(check, count, entities, failed, unknown, worst, p99)
    if not unknown_text:
        return checked
    if not checked:
        return f"could not know: {unknown_text}"
    return f"{checked}; could not know: {unknown_text}"
