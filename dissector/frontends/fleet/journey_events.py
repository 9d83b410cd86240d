"""EDGE: the joiner's input, recorded by a task and replayed elsewhere: the fleet's journeys.

Input: (task side) one capture series' pipeline events and the packets they came from;
(join side) the recorded events of a group of series, in their order keys' order.
Output: `Recorder` -> Arrow batches of `STAGE` rows: one `event` row per event the joiner
reads (the frames it handles, without payload or frame bytes; the producers' and consumers'
lifecycle facts it reads, their frames as those; the protocol facts' answer to each SEND, as
the SEND's stream offset; the facts of what each MESSAGE and ACK says of its consumer's
messages, as they are; the messages extractor's entries, without preview; a connection's
broker, once per topic it carries; its end), a `span` row per series (first and latest
packet time, whether any event's topic is unknown); `groups` -> each series' merge group, as
a local read merges series; `Replay` -> the journeys of recorded events, made by the one
Joiner (dissector.journeys).
Rules:
- An event's order key (series, `ts`, `seq`) gives the order of a local read that merges
  the series by time (dissector.capture.merge): `ts` is the latest packet time of its
  series when the event was made (a series whose clock goes back keeps its own order, as
  the merge does), `seq` counts the series' events; events of a series' end (connections
  still open) sort after every packet of the group (`END`), as a merged read ends them.
- An event's `topic` is that of its frame (named by it, or of its producer or consumer), a
  lifecycle fact's that of its producer or consumer, an entry's, a SEND's answer's or a
  MESSAGE's or ACK's fact's that of its frame (a SEND never answered: the fact's topic, its
  producer's); a connection's broker and end go to every topic it carried. Frames of one
  topic never join another topic's messages, unless a topic is unknown (docs/journeys.md
  rule 2): a merge group holding an event of unknown topic is joined as one (`groups`).
- Bounded: per open connection the topics it carried (at most MAX_TOPICS); rows leave in
  batches of BATCH_EVENTS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dissector.capture.merge import Item
from dissector.events import (
    AckedIds,
    AppMessage,
    Conversation,
    ConversationOpened,
    Delivering,
    FlowKey,
    Frame,
    Journey,
    Lifecycle,
    Pair,
    RawPacket,
    Segment,
)
from dissector.frontends.fleet.event_codec import decode, encode, encode_frame, encode_life
from dissector.journeys import Joiner
from dissector.journeys.joiner import COMMANDS, LIFE_STEPS
from dissector.journeys.produce import send_answer
from dissector.read.options import ReaderOptions
from dissector.read.plan import plan_read
from dissector.read.runs import iter_series
from dissector.tables.builders import BATCH_ROWS
from dissector.tables.schema import TABLES

#: Rows of recorded events per Arrow batch a task hands on.
BATCH_EVENTS = 2048
#: The order time of the events of a series' end: after every packet of its group.
END = (1 << 63) - 1
#: Topics remembered per open connection (to send its end to each): a client multiplexes
#: its producers and consumers over one connection, but not millions; past the bound the
#: connection's later topics are recorded as unknown (joined as one group: still exact).
MAX_TOPICS = 10_000

STAGE = pa.schema(
    [
        ("kind", pa.string()),  # "event", "span", or a table's row count ("rows")
        ("series", pa.int64()),
        ("topic", pa.string()),  # event: its topic (null: unknown); rows: the table's name
        ("ts", pa.int64()),  # event: order time; span: first packet's time; rows: the count
        ("seq", pa.int64()),  # event: order in its series; span: the latest packet's time
        ("unknown", pa.bool_()),  # span: an event of unknown topic was recorded
        ("event", pa.binary()),
    ]
)


class _Conn:
    __slots__ = ("key", "topics")

    def __init__(self, key: FlowKey | None) -> None:
        self.key = key
        self.topics: dict[str | None, None] = {}  # topics its events were recorded under


class Recorder:
    """Task side: what one series gives the fleet's journeys; see the module docstring."""

    def __init__(self, series: int, files: list[str]) -> None:
        self.series, self.first_file = series, files[0]
        self.first: int | None = None  # the first packet's time (of the first file)
        self.latest: int | None = None  # the latest packet time so far
        self.ts = -1  # order time of the events being made
        self.seq = 0
        self.unknown = False
        self.conns: dict[int, _Conn] = {}
        self._topic: str | None = None  # of the latest frame recorded (its entries follow)
        self._rows: list[tuple[str | None, int, int, bytes]] = []

    def watch(self, items: Iterator[Item]) -> Iterator[Item]:
        """The series' items, passed on; their packet times noted (`iter_series(watch=)`)."""
        for item in items:
            packet = item[3]
            if type(packet) is Segment or type(packet) is RawPacket:
                ts: int = packet.ts
                if self.first is None and item[2] == self.first_file:
                    self.first = ts
                if self.latest is None or ts > self.latest:
                    self.latest = self.ts = ts
            yield item
        self.ts = END

    def feed(self, ev: object) -> None:
        kind = type(ev)
        if kind is Frame:
            assert isinstance(ev, Frame)
            if ev.command_type in COMMANDS:
                self._frame(ev)
        elif kind is Pair:
            assert isinstance(ev, Pair)
            self._pair(ev)
        elif kind is Lifecycle:
            assert isinstance(ev, Lifecycle)
            if ev.step in LIFE_STEPS:
                self._life(ev)
        elif kind is Delivering or kind is AckedIds:
            assert isinstance(ev, (Delivering, AckedIds))
            if ev.conn_id in self.conns:  # its frame recorded
                self._add(self._topic, encode("C", ev))
        elif kind is AppMessage:
            assert isinstance(ev, AppMessage)
            if ev.conn_id in self.conns:
                entry = ev._replace(preview=None)
                self._add(self._topic, encode("M", entry))
        elif kind is ConversationOpened:
            assert isinstance(ev, ConversationOpened)
            self.conns[ev.conn_id] = _Conn(ev.key)
        elif kind is Conversation:
            assert isinstance(ev, Conversation)
            conn = self.conns.pop(ev.conn_id, None)
            if conn is not None:
                end = encode("E", ev.conn_id)
                for topic in conn.topics:
                    self._add(topic, end)

    def _frame(self, frame: Frame) -> None:
        topic = self._topic = self._under(frame.conn_id, frame.topic)
        self._add(topic, encode_frame(frame))

    def _life(self, fact: Lifecycle) -> None:
        """A step the joiner reads, under its entity's topic (the one its PRODUCER or
        SUBSCRIBE named)."""
        entity = fact.entity
        topic = self._under(fact.conn_id, None if entity is None else entity.topic)
        self._add(topic, encode_life(fact))

    def _under(self, conn_id: int, topic: str | None) -> str | None:
        """The topic an event of connection `conn_id` is recorded under (None beyond
        MAX_TOPICS); its broker recorded under it first."""
        conn = self.conns.get(conn_id)
        if conn is None:  # its opening was not seen: no broker known
            conn = self.conns[conn_id] = _Conn(None)
        if topic is not None and topic not in conn.topics and len(conn.topics) >= MAX_TOPICS:
            topic = None
        if topic is None:
            self.unknown = True
        if topic not in conn.topics:
            conn.topics[topic] = None
            self._add(topic, encode("O", (conn_id, conn.key)))
        return topic

    def _pair(self, pair: Pair) -> None:
        """The facts' answer to a SEND (the joiner reads no other fact): after its answer's
        frame, under its topic; a SEND never answered under its producer's topic."""
        conn = self.conns.get(pair.conn_id)
        told = None if conn is None else send_answer(pair)
        if told is None:
            return
        assert conn is not None
        send, came = told
        if came:
            self._add(self._topic, encode("A", (pair.conn_id, send, True)))
        elif pair.topic in conn.topics:
            self._add(pair.topic, encode("A", (pair.conn_id, send, False)))

    def _add(self, topic: str | None, blob: bytes) -> None:
        self._rows.append((topic, self.ts, self.seq, blob))
        self.seq += 1

    def take(self, final: bool = False) -> Iterator[pa.RecordBatch]:
        """The rows recorded so far, once BATCH_EVENTS are (`final`: all, and the span)."""
        if len(self._rows) >= BATCH_EVENTS or (final and self._rows):
            rows, self._rows = self._rows, []
            n = len(rows)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(["event"] * n),
                    pa.array([self.series] * n, pa.int64()),
                    pa.array([r[0] for r in rows], pa.string()),
                    pa.array([r[1] for r in rows], pa.int64()),
                    pa.array([r[2] for r in rows], pa.int64()),
                    pa.nulls(n, pa.bool_()),
                    pa.array([r[3] for r in rows], pa.binary()),
                ],
                schema=STAGE,
            )
        if final:
            yield span_batch(self.series, self.first, self.latest, self.unknown)


def span_batch(series: int, first: int | None, latest: int | None, unknown: bool) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"kind": "span", "series": series, "ts": first, "seq": latest, "unknown": unknown}],
        schema=STAGE,
    )


def counts_batch(counts: Iterable[tuple[str, int]]) -> pa.RecordBatch:
    """Rows written per table, as STAGE rows (kind "rows")."""
    return pa.RecordBatch.from_pylist(
        [{"kind": "rows", "topic": name, "ts": n} for name, n in counts], schema=STAGE
    )


def groups(
    spans: Iterable[tuple[int, int | None, int | None, bool]],
) -> dict[int, tuple[int, bool]]:
    """series -> (merge group, joined as one) from each series' (index, first packet time,
    latest packet time, unknown topic seen): series whose times overlap (a chain of
    overlaps included) are one group, as dissector.capture.merge merges them; a group with
    an event of unknown topic is joined as one, any other topic by topic."""
    found = sorted(spans, key=lambda s: (-1 if s[1] is None else s[1], s[0]))
    out: dict[int, tuple[int, bool]] = {}
    members: list[list[int]] = []
    unknown: list[bool] = []
    reach = 0
    ended = True  # the group so far can take no other series
    for index, first, latest, seen in found:
        start = -1 if first is None else first
        if ended or start > reach:
            members.append([])
            unknown.append(False)
            reach = start
        members[-1].append(index)
        unknown[-1] = unknown[-1] or seen
        ended = latest is None and len(members[-1]) == 1  # no packet: nothing to merge with
        if latest is not None:
            reach = max(reach, latest)
    for group, series in enumerate(members):
        for index in series:
            out[index] = (group, unknown[group])
    return out


class Replay:
    """Join side: recorded events of one group of series (or of one topic in it), in their
    order, fed to a Joiner; each connection's broker goes to `connection` (the rows'
    partitions)."""

    def __init__(
        self,
        made: Callable[[Iterable[Journey]], None],
        connection: Callable[[int, FlowKey], None] | None = None,
    ) -> None:
        self.joiner = Joiner()
        self.made = made
        self.connection = connection

    def feed(self, blob: bytes) -> None:
        kind, value = decode(blob)
        if kind == "F" or kind == "M" or kind == "C" or kind == "L":
            rows = self.joiner.feed(value)
            if rows:
                self.made(rows)
        elif kind == "A":
            conn_id, send, answered = value
            rows = self.joiner.answer(conn_id, send, self.joiner.latest if answered else None)
            if rows:
                self.made(rows)
        elif kind == "O":
            conn_id, key = value
            if key is not None and self.connection is not None:
                self.connection(conn_id, key)
        else:
            self.joiner.ended(value)

    def finish(self) -> None:
        self.made(self.joiner.finish())


#: The columns the join side reads, in the order they sort by.
ORDER = ("grp", "jkey", "ts", "series", "seq")
_journey_row = TABLES["journeys"].row
_JOURNEYS = TABLES["journeys"].schema


class _Rows:
    """Journey rows made into record batches of the journeys table."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self._struct = pa.struct(list(_JOURNEYS))

    def add(self, made: Iterable[Journey]) -> None:
        self.rows.extend(_journey_row(j) for j in made)

    def take(self, final: bool = False) -> Iterator[pa.RecordBatch]:
        if len(self.rows) >= BATCH_ROWS or (final and self.rows):
            rows, self.rows = self.rows, []
            array = pa.array(rows, type=self._struct)
            yield pa.RecordBatch.from_arrays(array.flatten(), schema=_JOURNEYS)


def joined(
    batches: Iterable[pa.RecordBatch], connection: Callable[[int, FlowKey], None] | None = None
) -> Iterator[pa.RecordBatch]:
    """The journeys table's batches from recorded events sorted by ORDER (columns `grp`,
    `jkey` and `event` read): one Joiner per (grp, jkey), fed in that order."""
    rows = _Rows()
    current: tuple[Any, Any] | None = None
    replay: Replay | None = None
    for batch in batches:
        keys = zip(batch.column("grp").to_pylist(), batch.column("jkey").to_pylist(), strict=True)
        for key, blob in zip(keys, batch.column("event").to_pylist(), strict=True):
            if key != current:
                if replay is not None:
                    replay.finish()
                current, replay = key, Replay(rows.add, connection)
            assert replay is not None
            replay.feed(blob)
            yield from rows.take()
    if replay is not None:
        replay.finish()
    yield from rows.take(final=True)


def keyed(staged: pa.Table, assigned: dict[int, tuple[int, bool]]) -> pa.Table:
    """The event rows of `staged` with their group (`grp`) and join key (`jkey`: the topic,
    or "" for a group joined as one), sorted by ORDER (what Spark does in the fleet job)."""
    events = staged.filter(pc.equal(staged.column("kind"), "event"))
    series = events.column("series").to_pylist()
    grp = [assigned[s][0] for s in series]
    one = [assigned[s][1] for s in series]
    topics = events.column("topic").to_pylist()
    jkey = ["" if o else t for o, t in zip(one, topics, strict=True)]
    events = events.append_column("grp", pa.array(grp, pa.int64()))
    events = events.append_column("jkey", pa.array(jkey, pa.string()))
    return events.sort_by([(name, "ascending") for name in ORDER])


def spans_of(staged: pa.Table) -> list[tuple[int, int | None, int | None, bool]]:
    """Each series' (index, first packet time, latest packet time, unknown topic seen)."""
    rows = staged.filter(pc.equal(staged.column("kind"), "span")).to_pylist()
    return [(r["series"], r["ts"], r["seq"], bool(r["unknown"])) for r in rows]


def record(files: list[str], options: ReaderOptions, index: int) -> Iterator[pa.RecordBatch]:
    """The STAGE batches of one series read on its own (what a fleet task records)."""
    recorder = Recorder(index, files)
    plan = plan_read(options, ["journeys"])  # the journeys' stages: payloads, frame by frame
    for ev in iter_series(files, options, index, recorder.watch, plan):
        recorder.feed(ev)
        yield from recorder.take()
    yield from recorder.take(final=True)


def journeys(series: list[list[str]], options: ReaderOptions) -> pa.Table:
    """The fleet's journeys table of these series, in this process: each series recorded
    on its own, keyed and ordered, joined (the fleet job's steps without Spark)."""
    staged = pa.Table.from_batches(
        [b for index, files in enumerate(series) for b in record(files, options, index)], STAGE
    )
    events = keyed(staged, groups(spans_of(staged)))
    return pa.Table.from_batches(list(joined(events.to_batches())), _JOURNEYS)
