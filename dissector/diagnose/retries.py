"""reconnect.retry_loop: the same PRODUCER or SUBSCRIBE refused with the same retriable error
again and again, with no LOOKUP between.

Input: through dissector.diagnose.refusals, the producers' and consumers' lifecycle facts
(a PRODUCER or SUBSCRIBE created, or failed with the ERROR's code; a broker's CLOSE_PRODUCER /
CLOSE_CONSUMER naming an assigned broker, a TOPIC_MIGRATED) and the LOOKUPs answered (their
Pair facts); at the end, `finish`.
Output: findings reconnect.retry_loop, one row per run of refusals (of a client address, a
broker, a PRODUCER of one topic and producer name, or a SUBSCRIBE of one topic and
subscription) of at least `retry_refusals` in a row: the ERRORs as evidence; the summary
names the broker, the error, the count, the time span, the connections, and the
CLOSE_*/TOPIC_MIGRATED that sent the client there when the capture shows one.
Rules:
- Retriable errors are those the Java client retries (PulsarClientException.isRetriableError,
  ClientCnx's ServerError mapping, ProducerImpl/ConsumerImpl): ServiceNotReady,
  TooManyRequests, MetadataError, PersistenceError, UnknownError, AuthenticationError,
  ProducerBlockedQuotaExceededError (the backlog quota's producer_request_hold). Not ConsumerBusy,
  ProducerBusy, ProducerFenced (consumer.busy, producer.busy), nor what it gives up on
  (TopicNotFound, IncompatibleSchema, AuthorizationError, NotAllowedError, TopicTerminated,
  ProducerBlockedQuotaExceededException, ...).
- A run is one key's refusals in a row, across the client's connections to that broker, with
  the same error. It ends with another answer to the same request (success, another error),
  or a LOOKUP of the topic from the client answered (on any connection, to any broker): a
  client that looks up again is not pinned. The unnamed PRODUCER (the broker names it) is
  keyed by its topic.
- A refusal on a connection with bytes missing ends the run (a LOOKUP may be in the gap).
  When the capture shows no LOOKUP from the client at all, the summary says so: a client
  looking up over HTTP (an http:// service URL) shows none on the binary port.
Memory: runs, LOOKUP counts and moves of at most MAX_KEYS keys (the oldest forgotten).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissector.diagnose.state import MAX_KEYS, ConnState, Context, Evidence, bounded, finding
from dissector.events import EntityKind, Finding, Frame, Lifecycle, LifeStep
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

#: ServerError names the Java client retries a PRODUCER or SUBSCRIBE after (module docstring).
RETRIABLE = frozenset(
    {
        "ServiceNotReady",
        "TooManyRequests",
        "MetadataError",
        "PersistenceError",
        "UnknownError",
        "AuthenticationError",
        "ProducerBlockedQuotaExceededError",
    }
)
_PRODUCER = COMMAND_TYPES["PRODUCER"]
#: (client ip, broker ip, broker port, request, topic, producer name or subscription)
_Key = tuple[str, str, int, str, str, str | None]


@dataclass(slots=True)
class _Move:
    what: str  # "CLOSE_PRODUCER", "TOPIC_MIGRATED", ...
    url: str
    ts: int
    packet: int
    conn_id: int


@dataclass(slots=True)
class _Run:
    error: str
    lookups: int  # the (client, topic) LOOKUPs answered when it began
    move: _Move | None
    conn: ConnState
    evidence: Evidence = field(default_factory=Evidence)
    conns: int = 0  # connections refused on (a change of connection counts one)
    last_conn: int = -1


def _client(conn: ConnState) -> str:
    return conn.key.client_ip if conn.key is not None else ""


class Retries:
    """Runs of refusals across the connections of one capture; see the module docstring."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.runs: dict[_Key, _Run] = {}
        self.lookups: dict[tuple[str, str], int] = {}  # (client, topic) -> LOOKUPs answered
        self.moves: dict[tuple[str, str], _Move] = {}  # (client, topic) -> the latest
        self.lookers: dict[str, None] = {}  # clients seen sending a LOOKUP answered
        self.done: list[Finding] = []

    @staticmethod
    def _key(conn: ConnState, request: Frame) -> _Key | None:
        key, body = conn.key, request.body
        if key is None or body is None:
            return None
        if request.command_type == _PRODUCER:
            name = body.producer_name or None
            what = "PRODUCER"
        else:
            name, what = body.subscription, "SUBSCRIBE"
        return (key.client_ip, key.broker_ip, key.broker_port, what, body.topic, name)

    # ------------------------------------------------------------------ facts

    def answered(self, conn: ConnState, fact: Lifecycle, error: str | None) -> None:
        """A PRODUCER or SUBSCRIBE answered: created (error None) or refused with `error`."""
        request = fact.request
        if request is None:
            return
        key = self._key(conn, request)
        if key is None:
            return
        run = self.runs.get(key)
        if error is None:  # created: the client got there; a move before it is followed
            self.moves.pop((key[0], key[4]), None)
        if error not in RETRIABLE or not conn.intact:
            if run is not None:
                self._end(key)
            return
        seen = self.lookups.get((key[0], key[4]), 0)
        if run is not None and (run.error != error or run.lookups != seen):
            self._end(key)
            run = None
        if run is None:
            move = self.moves.get((key[0], key[4]))
            run = bounded(self.runs, key, lambda: _Run(error, seen, move, conn))
        run.evidence.add(fact.frame)
        run.conn = conn
        if run.last_conn != conn.conn_id:
            run.conns += 1
            run.last_conn = conn.conn_id
        if run.evidence.count == self.ctx.th.retry_refusals:
            self.ctx.established(self._row(key, run))

    def looked_up(self, conn: ConnState, topic: str | None) -> None:
        """A LOOKUP of `topic` from the connection's client was answered."""
        if topic is not None:
            where = (_client(conn), topic)
            if where[0] not in self.lookers:
                self.lookers[where[0]] = None
                if len(self.lookers) > MAX_KEYS:
                    del self.lookers[next(iter(self.lookers))]
            self.lookups[where] = self.lookups.get(where, 0) + 1
            if len(self.lookups) > MAX_KEYS:
                del self.lookups[next(iter(self.lookups))]

    def moved(self, conn: ConnState, fact: Lifecycle, topic: str | None) -> None:
        """A broker's CLOSE_* naming an assigned broker, or TOPIC_MIGRATED."""
        if topic is None or fact.broker_url is None:
            return
        kind = "PRODUCER" if fact.kind is EntityKind.PRODUCER else "CONSUMER"
        what = "TOPIC_MIGRATED" if fact.step is LifeStep.MIGRATED else f"CLOSE_{kind}"
        frame = fact.frame
        move = _Move(what, fact.broker_url, frame.last_ts, frame.last_packet, conn.conn_id)
        where = (_client(conn), topic)
        self.moves.pop(where, None)
        self.moves[where] = move
        if len(self.moves) > MAX_KEYS:
            del self.moves[next(iter(self.moves))]

    # ------------------------------------------------------------------ rows

    def _end(self, key: _Key) -> None:
        run = self.runs.pop(key)
        if run.evidence.count >= self.ctx.th.retry_refusals and len(self.done) < MAX_KEYS:
            self.done.append(self._row(key, run))

    def _row(self, key: _Key, run: _Run) -> Finding:
        client, broker_ip, broker_port, what, topic, name = key
        ev = run.evidence
        span = (ev.last_ts - ev.first_ts) / 1e6
        label = (
            ("producer " + name if name else "an unnamed producer")
            if what == "PRODUCER"
            else f"subscription {name}"
        )
        conns = run.conns
        summary = (
            f"{what} of {topic} ({label}) refused {ev.count} times in a row by broker "
            f"{broker_ip}:{broker_port} with {run.error} over {span:.1f} s, on "
            f"{conns} connection{'s' if conns > 1 else ''}, with no LOOKUP of the topic "
            f"from {client} between"
        )
        if client not in self.lookers:
            summary += (
                " (the capture shows no LOOKUP from this client at all: lookups over HTTP "
                "would not be seen)"
            )
        move = run.move
        if move is not None:
            summary += (
                f"; before them, {move.what} on conn {move.conn_id} (packet {move.packet}) "
                f"sent the client to {move.url}"
            )
        entity = label if name else None
        return finding(
            FindingCode.RECONNECT_RETRY_LOOP,
            ev,
            conn=run.conn,
            topic=topic,
            entity=entity,
            summary=summary,
            value=ev.count,
            unit="refusals",
        )

    def finish(self) -> None:
        for key in list(self.runs):
            self._end(key)
        for row in self.done:
            self.ctx.emit(row)
        self.done.clear()
