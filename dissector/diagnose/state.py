"""What the rules remember: per connection, per producer and consumer, and evidence.

Input: nothing (records filled in by the rule modules).
Output: `Evidence` (a bounded list of packet numbers, a count and first/last times),
`Context` (thresholds in microseconds, where findings go, the clock), `ConnState`,
`ProducerState`, `ConsumerState`, `Busy`, and `finding()`, which makes a Finding row from
evidence.
Rules: ids (producer_id, consumer_id, request_id) are only unique per connection, so their
state lives in its ConnState; what spans connections lives in dissector.diagnose.spanning.
A connection is `whole` once its CONNECT was seen and stays `intact` until bytes go missing
(a TCP gap): rules that need the whole history ask for both and otherwise say nothing
(unknown, not wrong). Every collection here is bounded (MAX_TRACKED, MAX_EVIDENCE, and the
facts' MAX_ENTITIES and MAX_PENDING).
Timers: a rule that may have something to tell the listener later (a PING, a SEND, a
consumer waiting for FLOW) puts its due time in `Context.timers` (`schedule`), a heap the
engine's sweep takes only what is due from; a connection, producer or consumer has at most one
entry there (`scheduled`), no later than its true due time (the sweep computes that again and
puts the entry back when it moved later). `order` mirrors the insertion order of the dicts
holding them (the order the sweep used to visit them in, and tells them in).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from dissector.events import Delivered, Direction, Finding, FlowKey, Frame
from dissector.facts.bounds import MAX_ENTITIES
from dissector.findings import REGISTRY, Thresholds

#: Packet numbers kept as evidence per finding: the first ones and the last.
MAX_EVIDENCE = 10
#: Items only a rule keeps, per connection: topics whose producers were refused
#: (producer.busy), PINGs waiting for their PONG (keepalive.unanswered), chunked messages
#: being reassembled (chunk rules); the oldest are forgotten beyond (they no longer prove
#: anything a newer one does not). The facts' bounds (dissector.facts.bounds) apply to the
#: rest: the rules' producers and consumers are kept up to MAX_ENTITIES, as the facts keep
#: theirs; what waits for an answer (requests, SENDs, deliveries not acknowledged) is the
#: facts' (MAX_PENDING), and what they report never answered is kept up to that bound too.
MAX_TRACKED = 50_000
#: Keys (producer names, subscriptions, lookup chains) remembered across connections.
MAX_KEYS = 100_000
K = TypeVar("K")
V = TypeVar("V")


def bounded(table: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """table[key], made when missing; beyond MAX_KEYS entries the oldest is forgotten."""
    value = table.get(key)
    if value is None:
        value = table[key] = make()
        if len(table) > MAX_KEYS:
            del table[next(iter(table))]
    return value


class Evidence:
    """Frames that prove a finding: their count, first and last times, a few packets."""

    __slots__ = ("count", "first_ts", "last_ts", "packets")

    def __init__(self) -> None:
        self.count = 0
        self.first_ts = self.last_ts = 0
        self.packets: list[int] = []

    def add(self, frame: Frame) -> None:
        self.add_at(frame.last_packet, frame.last_ts)

    def add_at(self, packet: int, ts: int, count: int = 1) -> None:
        """A frame of the evidence (count 0: a packet that shows it, not one more case)."""
        if not self.packets:
            self.first_ts = ts
        self.count += count
        self.last_ts = max(self.last_ts, ts)
        if self.packets and self.packets[-1] == packet:
            return  # one packet carrying several frames is named once
        if len(self.packets) < MAX_EVIDENCE:
            self.packets.append(packet)
        else:
            self.packets[-1] = packet  # the first ones, then always the latest

    def __bool__(self) -> bool:
        return self.count > 0

    def merge(self, other: Evidence) -> None:
        """Take in another's frames (its packets as far as the bound allows)."""
        if not other:
            return
        if not self.packets:
            self.first_ts = other.first_ts
        self.count += other.count
        self.first_ts = min(self.first_ts, other.first_ts)
        self.last_ts = max(self.last_ts, other.last_ts)
        room = MAX_EVIDENCE - len(self.packets)
        self.packets.extend(other.packets[:room])
        if room < len(other.packets):
            self.packets[-1] = other.packets[-1]

    @classmethod
    def of(cls, *frames: Frame) -> Evidence:
        ev = cls()
        for frame in frames:
            ev.add(frame)
        return ev


Listener = Callable[[Finding], None]
#: What a rule module does with one frame of a command type it reads (its HANDLERS table).
RuleStep = Callable[["Context", "ConnState", Frame, Any], None]


class Span(Protocol):
    """What the per-connection rules tell the rules across connections (spanning.py)."""

    def sent(self, conn: ConnState, p: ProducerState, seq: int, frame: Frame) -> None: ...
    def receipted(self, conn: ConnState, p: ProducerState, seq: int) -> None: ...
    def closed(self, conn: ConnState, p: ProducerState) -> None: ...
    def delivered(self, conn: ConnState, c: ConsumerState, key: Any, f: Frame) -> None: ...
    def acked(self, c: ConsumerState, key: Any, *, cumulative: bool, ack: Frame) -> None: ...
    def finish(self, horizon: int) -> None: ...


class Pending:
    """One chunked message being reassembled (chunks.py)."""

    __slots__ = ("expected", "first_packet", "first_ts", "ids", "last_packet", "last_ts", "topic")

    def __init__(self, frame: Frame, expected: int) -> None:
        self.first_ts = self.last_ts = frame.last_ts
        self.first_packet = self.last_packet = frame.last_packet
        self.ids: set[int] = set()
        self.expected = expected
        self.topic = frame.topic


class Context:
    """The engine's side every rule sees: thresholds (µs), the clock, the findings made."""

    __slots__ = (
        "dispatch",
        "listener",
        "now",
        "out",
        "span",
        "th",
        "timer_serial",
        "timers",
        "us",
    )

    def __init__(self, thresholds: Thresholds, listener: Listener | None = None) -> None:
        self.th = thresholds
        self.us = {name: thresholds.us(name) for name in thresholds.__dataclass_fields__}
        self.now = 0  # the latest event time seen (µs)
        self.out: list[Finding] = []
        self.listener = listener  # told of a finding as soon as it is established
        self.span: Span | None = None  # state across connections (set by the engine)
        #: the dispatch rule's topics and subscriptions across connections (dispatch.py)
        self.dispatch: Any = None
        #: (due µs, serial, rule kind, conn_id, producer or consumer id): a heap
        self.timers: list[tuple[int, int, int, int, int]] = []
        self.timer_serial = 0

    def emit(self, found: Finding) -> None:
        self.out.append(found)

    def schedule(
        self, due: int | None, kind: int, conn: ConnState, timed: ConnState | Timed, ident: int
    ) -> None:
        """Have the sweep look at `timed` (rule `kind`'s, of id `ident` in `conn`) once the
        capture's time passes `due` (None: nothing to tell); an earlier entry stands."""
        if due is None or (timed.scheduled is not None and timed.scheduled <= due):
            return
        timed.scheduled = due
        self.timer_serial += 1
        heapq.heappush(self.timers, (due, self.timer_serial, kind, conn.conn_id, ident))

    def established(self, found: Finding) -> None:
        """A finding known now, whose row waits for its episode to end (live prints it)."""
        if self.listener is not None:
            self.listener(found)


def finding(
    code: str,
    ev: Evidence,
    *,
    conn: ConnState | None,
    summary: str,
    ts: int | None = None,
    topic: str | None = None,
    entity: str | None = None,
    value: float | None = None,
    unit: str | None = None,
    count: int | None = None,
) -> Finding:
    """A finding row of `code` proven by `ev` (severity and hint from the registry)."""
    kind = REGISTRY[code]
    return Finding(
        code=code,
        severity=kind.severity,
        ts=ev.last_ts if ts is None else ts,
        first_ts=ev.first_ts,
        last_ts=ev.last_ts,
        conn_id=0 if conn is None else conn.conn_id,
        key=None if conn is None else conn.key,
        topic=topic,
        entity=entity,
        summary=summary,
        hint=kind.hint,
        count=ev.count if count is None else count,
        value=value,
        unit=unit,
        evidence=tuple(ev.packets),
    )


class Timed(Protocol):
    """A producer or consumer with a timer: its entry's due time, its place in its dict."""

    scheduled: int | None
    order: int


@dataclass(slots=True)
class Busy:
    """PRODUCER refusals and re-sends for one topic of a connection (producer.busy)."""

    evidence: Evidence = field(default_factory=Evidence)
    detail: str = ""  # the latest one, in words
    producers: list[str] = field(default_factory=list)  # their labels, the first ones


@dataclass(slots=True)
class ProducerState:
    producer_id: int
    topic: str | None
    created_ts: int
    since: int  # stream offset of the frame that made it: earlier SENDs are not its
    scheduled: int | None = None  # due time of its timer entry (Context.schedule)
    order: int = 0  # its place in ConnState.producers
    name: str | None = None
    open: bool = True  # no CLOSE_PRODUCER yet
    last_sequence_id: int = -1  # PRODUCER_SUCCESS.last_sequence_id (-1: deduplication off)
    #: of its SENDs waiting for their receipt (in the facts): the oldest, and how many
    oldest: Frame | None = None
    waiting: int = 0
    #: the client's CLOSE_PRODUCER (stream offset, time): SENDs waiting then are timeouts
    closed_at: int | None = None
    closed_ts: int = 0
    #: its SENDs the facts report never answered, judged when the connection ends
    unanswered: list[Frame] = field(default_factory=list)
    highest_sent: int = -1  # the highest sequence id sent on this connection
    timeout: Evidence = field(default_factory=Evidence)  # SENDs past the send timeout
    timeout_told: bool = False
    longest_wait: int = 0  # µs, of the SENDs in `timeout`
    out_of_order: Evidence = field(default_factory=Evidence)
    regression: Evidence = field(default_factory=Evidence)
    regression_detail: str = ""

    def label(self) -> str:
        return f"producer {self.producer_id}" + (f" ({self.name})" if self.name else "")


@dataclass(slots=True)
class ConsumerState:
    consumer_id: int
    topic: str | None
    subscription: str | None
    created_ts: int
    scheduled: int | None = None  # due time of its timer entry (Context.schedule)
    order: int = 0  # its place in ConnState.consumers
    known: bool = True  # SUBSCRIBE seen: its permits are known from the start
    subscribed_ts: int | None = None  # SUCCESS answered the SUBSCRIBE
    subscribed_packet: int = 0
    subscribing: bool = False  # its SUBSCRIBE not answered yet: the broker has no such consumer
    no_flow: int = 0  # µs it waited for a first FLOW, when longer than flow_wait
    no_flow_packet: int = 0  # the late first FLOW's packet
    open: bool = True
    #: of its permits, as the facts' latest (events.Permits) said: FLOWs sent, the largest
    #: batch delivered (the overshoot a broker may make)
    flows: int = 0
    max_batch: int = 1
    starved_since: int | None = None  # permits reached 0 then (no FLOW since)
    starved_packet: int = 0
    starved: Evidence = field(default_factory=Evidence)
    starved_longest: int = 0
    starved_told: bool = False
    overshoot: Evidence = field(default_factory=Evidence)
    overshoot_worst: int = 0
    #: its oldest delivery not acknowledged, as the facts' latest ACK left it (events.Acked;
    #: None: none then, and none delivered since can be a hole yet)
    oldest: Delivered | None = None
    acked_after: int = 0  # delivery number of the latest-delivered message acknowledged
    hole: Evidence = field(default_factory=Evidence)
    hole_age: int = 0
    hole_told: bool = False
    #: redelivery requests: bursts of REDELIVER_UNACKNOWLEDGED_MESSAGES (consumers.BURST_US)
    redeliver_requests: Evidence = field(default_factory=Evidence)
    redeliver_burst: int = 0  # when the latest burst began
    redeliver_commands: int = 0  # REDELIVER_UNACKNOWLEDGED_MESSAGES sent
    redelivered: Evidence = field(default_factory=Evidence)  # MESSAGE redelivery_count > 0
    max_redelivery_count: int = 0
    #: its latest dispatch (crossing.py): the FLOW that started it, its first MESSAGE
    flow_ts: int | None = None
    dispatch_first: int | None = None
    #: ACKs with a validation_error, and the MESSAGEs they discarded (discards.py)
    discarded: Evidence = field(default_factory=Evidence)
    discard_kinds: dict[str, int] = field(default_factory=dict)  # validation error -> ids
    leak: Any = None  # its windows after each FLOW (dissector.diagnose.leaks.Ledger)

    def label(self) -> str:
        sub = f" (sub {self.subscription})" if self.subscription else ""
        return f"consumer {self.consumer_id}{sub}"


@dataclass(slots=True)
class ConnState:
    conn_id: int
    key: FlowKey | None
    order: int = 0  # its place among the engine's open connections
    scheduled: int | None = None  # due time of its PING timer entry (Context.schedule)
    placed: int = 0  # producers and consumers added so far (their `order`)
    whole: bool = False  # its CONNECT was seen: the capture holds its whole history
    intact: bool = True  # no byte of it is missing from the capture (no TCP gap)
    client_version: str | None = None
    max_message_size: int | None = None  # CONNECTED's, when sent
    #: µs from a client's request to the broker's answer, the shortest seen (crossing.py)
    round_trip: int | None = None
    proxy_to: str | None = None  # CONNECT's proxy_to_broker_url: the broker behind a proxy
    producers: dict[int, ProducerState] = field(default_factory=dict)
    consumers: dict[int, ConsumerState] = field(default_factory=dict)
    #: requests the facts report never answered (requests.on_pair), judged at the end
    requests: list[Frame] = field(default_factory=list)
    #: when the client began closing: its first CLOSE_PRODUCER/CLOSE_CONSUMER (requests.py)
    closing_since: int | None = None
    #: who ended the connection first (FIN/RST), set at its end (engine._ended)
    closed_by: Direction | None = None
    unanswered: Evidence = field(default_factory=Evidence)
    unanswered_names: dict[str, int] = field(default_factory=dict)
    unknown: Evidence = field(default_factory=Evidence)
    reused: Evidence = field(default_factory=Evidence)
    #: direction of the PING -> its frames waiting for a PONG, oldest first
    pings: dict[str, deque[Frame]] = field(default_factory=dict)
    pongs: dict[str, int] = field(default_factory=dict)  # direction of the PING -> answered
    ping_late: dict[str, Evidence] = field(default_factory=dict)
    ping_longest: int = 0
    ping_told: bool = False
    midstream: bool = False  # the capture began after the client's first bytes
    oversize: Evidence = field(default_factory=Evidence)
    oversize_largest: int = 0
    oversize_topic: str | None = None
    wrong: Evidence = field(default_factory=Evidence)  # connection.wrong_protocol
    wrong_detail: str = ""
    #: the server's stream opening with HTTP or TLS (connection.wrong_protocol once the
    #: client's CONNECT shows it spoke Pulsar)
    served: Evidence = field(default_factory=Evidence)
    served_detail: str = ""
    #: hop ("SEND", "MESSAGE") -> frames whose checksum failed
    bad_checksums: dict[str, Evidence] = field(default_factory=dict)
    #: topic -> its PRODUCER refusals and re-sends on this connection (producer.busy)
    busy: OrderedDict[str | None, Busy] = field(default_factory=OrderedDict)
    #: (direction, producer or consumer id, uuid) -> the chunked message being reassembled
    chunks: OrderedDict[tuple[str, int, str], Pending] = field(default_factory=OrderedDict)
    chunk_expired: Evidence = field(default_factory=Evidence)
    chunk_gap: int = 0
    chunk_topic: str | None = None
    chunk_detail: str = ""
    #: consumer id -> what the dispatch and broker-stats rules watch of it (dispatch.Watch)
    dispatch: dict[int, Any] = field(default_factory=dict)

    def add_producer(self, p: ProducerState) -> ProducerState:
        """Keep `p`; beyond MAX_ENTITIES producers the oldest is forgotten (the facts'
        bound: ids come from the wire)."""
        self._place(self.producers.get(p.producer_id), p)
        self.producers[p.producer_id] = p
        if len(self.producers) > MAX_ENTITIES:
            del self.producers[next(iter(self.producers))]
        return p

    def add_consumer(self, c: ConsumerState) -> ConsumerState:
        """As add_producer, for consumers."""
        self._place(self.consumers.get(c.consumer_id), c)
        self.consumers[c.consumer_id] = c
        if len(self.consumers) > MAX_ENTITIES:
            del self.consumers[next(iter(self.consumers))]
        return c

    def _place(self, old: Timed | None, new: Timed) -> None:
        """`new` takes `old`'s place in its dict (a dict keeps a replaced key's place), or
        the next one."""
        if old is not None:
            new.order = old.order
        else:
            self.placed += 1
            new.order = self.placed

    @property
    def trusted(self) -> bool:
        """The capture holds everything this connection said: rules needing history apply."""
        return self.whole and self.intact
