"""Rows of the tables, built from pipeline events into Arrow record batches.

Input: pipeline events (ConversationOpened, Frame, FrameRun, AppMessage, Anomaly, Pair,
Conversation); `finish` at the end of a capture (or group of captures).
Output: one pyarrow.Table per table asked for, or its record batches handed to a sink as
they are made (streaming: memory holds one batch per table, not the tables).
Rule: the row functions are the tables' own (declared once, in dissector.tables.per_frame and
.per_connection): one tuple per row in the hot path, transposed into Arrow columns every
BATCH_ROWS rows (through one Arrow struct array); a `FrameRun`'s frame rows are made as
columns (dissector.tables.frame_run_rows) and take their places among the others. Rows of
tables nobody asked for are never
made. A connection's Community ID is computed once, when its conversation opens; its rows
share that one string. The findings table is made by a dissector.diagnose.Diagnoser, made
only when that table is asked for, which sees every event before `add` does: feed events
through `feeder()` (`add` itself never tests for it, so the other tables cost what they did);
it reads frames one by one, so a read that makes findings takes no frame runs; the checks
table (what its rules checked and found in order) is made by the same Diagnoser, at
`finish`, one row per check. The journeys
table is made the same way, by a dissector.journeys.Joiner (docs/journeys.md), made only
when that table is asked for; its rows come at `finish` (or when its bound pushes a message
out); `end_to_end` (the metrics' feed) hears each end-to-end latency as the joiner first
knows it, before its row is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dissector.events import (
    Anomaly,
    AppMessage,
    Conversation,
    ConversationOpened,
    Finding,
    FlowKey,
    Frame,
    FrameRun,
    Journey,
    Pair,
    PipelineEvent,
)
from dissector.flow.community_id import community_id
from dissector.tables import frame_run_rows
from dissector.tables.columns import path_text
from dissector.tables.frame_run_rows import ConnInfo  # a connection as frame rows show it
from dissector.tables.schema import TABLES

if TYPE_CHECKING:  # imported when findings are made: the rules cost no start-up time
    from dissector.diagnose import Diagnoser
    from dissector.journeys import Joiner
    from dissector.journeys.state import EndToEnd

#: Rows gathered before they become an Arrow record batch: Python tuples cost about ten times
#: the memory of the Arrow columns they become, so batches are kept small (writers group
#: them into larger Parquet row groups; 4,096 rows: measured on 60,000 deliveries never
#: acked, 16,384 made the frames read 20% slower and 28 MB larger, the journeys' 50 MB larger).
BATCH_ROWS = 4096
#: Bytes of large cells (a value's JSON, a payload preview: up to 1 MiB each) gathered before
#: a batch is made, whatever its rows: BATCH_ROWS of them would otherwise be held at once.
BATCH_BYTES = 8 << 20

_NO_CONN: ConnInfo = (None, None, None, None, None)

frame_row = TABLES["frames"].row  # (Frame, ConnInfo)
message_row = TABLES["messages"].row  # (AppMessage, community_id)
anomaly_row = TABLES["anomalies"].row  # (Anomaly, community_id)
conversation_row = TABLES["conversations"].row  # (Conversation, capture, community_id)
pair_row = TABLES["timeline"].row  # (Pair, community_id)
entity_row = TABLES["entities"].row  # (conn_id, Entity, community_id)
finding_row = TABLES["findings"].row  # (Finding, community_id)
check_row = TABLES["checks"].row  # (Check)
journey_row = TABLES["journeys"].row  # (Journey)


def conn_info(key: FlowKey) -> ConnInfo:
    """A connection's FlowKey fields and its Community ID (TCP, seed 0), computed here once."""
    client_ip, client_port, broker_ip, broker_port = key
    cid = community_id(client_ip, client_port, broker_ip, broker_port)
    return (client_ip, client_port, broker_ip, broker_port, cid)


#: Where finished record batches go when streaming: (table name, batch).
Sink = Callable[[str, pa.RecordBatch], None]


class _Batches:
    def __init__(self, name: str, schema: pa.Schema, sink: Sink | None = None) -> None:
        self.name, self.schema, self.sink = name, schema, sink
        self._struct = pa.struct(list(schema))
        self.rows: list[tuple[Any, ...]] = []
        self.batches: list[pa.RecordBatch] = []  # kept when there is no sink
        self.count = 0
        # Frame runs of this batch (frames table only), and the places of `rows` among
        # the batch's rows once a run has come (before: rows are the first places).
        self.runs = frame_run_rows.RunRows()
        self.places: list[int] = []
        self.size = 0  # bytes of the large cells of `rows` (BATCH_BYTES)

    @property
    def pending(self) -> int:
        """Rows gathered for the next batch."""
        return len(self.rows) + self.runs.count

    def add(self, row: tuple[Any, ...], size: int = 0) -> None:
        """A row; `size`: the bytes of its large cells, if it has any (BATCH_BYTES)."""
        rows = self.rows
        ran = self.runs.count
        if ran:
            self.places.append(len(rows) + ran)
        rows.append(row)
        if size:
            self.size += size
            if self.size >= BATCH_BYTES:
                self.flush()
                return
        if len(rows) + ran >= BATCH_ROWS:
            self.flush()

    def add_run(self, run: FrameRun, conn: ConnInfo) -> None:
        """A frame run's rows, cut where a batch ends so batches hold BATCH_ROWS rows as
        they do when the same frames come one by one."""
        while True:
            if not self.runs.count and not self.places:
                self.places = list(range(len(self.rows)))
            room = BATCH_ROWS - self.pending
            if run.size < room:
                self.runs.add(run, conn, self.pending)
                return
            head, run = frame_run_rows.split(run, room)
            self.runs.add(head, conn, self.pending)
            self.flush()
            if not run.size:
                return

    def flush(self) -> None:
        if not self.pending:
            return
        batch = None
        if self.rows:
            # Rows -> one struct array -> its fields: Arrow transposes the tuples (in C++,
            # three times faster than zip(*rows) and an array per column).
            rows = pa.array(self.rows, type=self._struct)
            batch = pa.RecordBatch.from_arrays(rows.flatten(), schema=self.schema)
        if self.runs.count:
            batch = frame_run_rows.batch(self.schema, batch, self.places, self.runs)
            self.runs.clear()
        self.places = []
        assert batch is not None
        self.count += batch.num_rows
        self.rows = []
        self.size = 0
        if self.sink is not None:
            self.sink(self.name, batch)
        else:
            self.batches.append(batch)

    def take(self) -> list[pa.RecordBatch]:
        """Finished record batches so far (for streaming writers); they are handed over."""
        self.flush()
        out, self.batches = self.batches, []
        return out

    def table(self) -> pa.Table:
        self.flush()
        return pa.Table.from_batches(self.batches, schema=self.schema)


class TableBuilder:
    """Accumulate tables of the registry from the events of one or more captures.

    tables: the names of the tables to make (default: every table); `batches` holds one
    `_Batches` per table made. sink: when given, each finished record batch is handed to it
    (call `flush` at the end) instead of being kept for `tables()`. fields: make the frames
    table's on-request `fields` column (JSON of every field; about 10 µs a frame).
    diagnoser: what makes the findings and checks tables (default: one with the default
    thresholds and ports), used only if one of them is made. values: values were asked for
    (the journeys rows then say why a message has none). Call `finish` at the end of the capture.
    """

    def __init__(
        self,
        capture: str = "",
        tables: Iterable[str] | None = None,
        sink: Sink | None = None,
        fields: bool = False,
        diagnoser: Diagnoser | None = None,
        values: bool = False,
        end_to_end: EndToEnd | None = None,
    ) -> None:
        self.capture = path_text(capture)
        self._frame_row = TABLES["frames"].row_with() if fields else frame_row
        wanted = TABLES if tables is None else set(tables)
        unknown = set(wanted) - set(TABLES)
        if unknown:
            raise ValueError(f"unknown tables {sorted(unknown)}; choose from {sorted(TABLES)}")
        self.batches = {
            name: _Batches(name, t.schema, sink) for name, t in TABLES.items() if name in wanted
        }
        get = self.batches.get
        self.frames, self.messages = get("frames"), get("messages")
        self.anomalies, self.conversations = get("anomalies"), get("conversations")
        self.timeline, self.entities = get("timeline"), get("entities")
        # Open connections: conn_id -> ConnInfo (frame rows), conn_id -> Community ID (others).
        self._conns: dict[int, ConnInfo] = {}
        self._cids: dict[int, str | None] = {}
        self.frame_count = self.message_count = 0  # rows of frames / messages, made or not
        self.findings, self.checks = get("findings"), get("checks")
        self.diagnoser: Diagnoser | None = None
        if self.findings is not None or self.checks is not None:
            if diagnoser is None:
                from dissector.diagnose import Diagnoser

                diagnoser = Diagnoser()
            self.diagnoser = diagnoser
        self.journeys = get("journeys")
        self.joiner: Joiner | None = None
        if self.journeys is not None:
            from dissector.journeys import Joiner

            self.joiner = Joiner(values=values, end_to_end=end_to_end)

    def add(self, ev: PipelineEvent) -> None:
        if type(ev) is Frame:
            self.frame_count += 1
            if self.frames is not None:
                self.frames.add(self._frame_row(ev, self._conns.get(ev.conn_id, _NO_CONN)))
        elif type(ev) is FrameRun:
            self.frame_count += ev.size
            if self.frames is not None:
                self.frames.add_run(ev, self._conns.get(ev.conn_id, _NO_CONN))
        elif type(ev) is Pair:
            if self.timeline is not None:
                self.timeline.add(pair_row(ev, self._cids.get(ev.conn_id)))
        elif type(ev) is AppMessage:
            self.message_count += 1
            if self.messages is not None:
                self.messages.add(
                    message_row(ev, self._cids.get(ev.conn_id)), _large(ev.value, ev.preview)
                )
        elif type(ev) is Anomaly:
            if self.anomalies is not None:
                self.anomalies.add(anomaly_row(ev, self._cids.get(ev.conn_id)))
        elif type(ev) is ConversationOpened:
            info = conn_info(ev.key)
            self._conns[ev.conn_id] = info
            self._cids[ev.conn_id] = info[4]
        elif type(ev) is Conversation:
            opened = self._conns.pop(ev.conn_id, None)
            self._cids.pop(ev.conn_id, None)
            # A conversation whose opening this builder did not see: its id made here, once.
            cid = (opened if opened is not None else conn_info(ev.key))[4]
            if self.conversations is not None:
                self.conversations.add(conversation_row(ev, self.capture, cid))
            if self.entities is not None:
                for entity in ev.info.entities:
                    self.entities.add(entity_row(ev.conn_id, entity, cid))

    def feeder(self) -> Callable[[PipelineEvent], None]:
        """What to hand every event to: `add`, or when the findings or journeys table is
        made a function that also shows the event to the diagnoser and the joiner."""
        watchers: list[tuple[Callable[[PipelineEvent], list[Any]], Callable[[Any], None]]] = []
        if self.diagnoser is not None:
            watchers.append((self.diagnoser.feed, self._found))
        if self.joiner is not None:
            watchers.append((self.joiner.feed, self._joined))
        add = self.add
        if not watchers:
            return add
        if len(watchers) == 1:
            feed, made_rows = watchers[0]

            def add_watched(ev: PipelineEvent) -> None:
                made = feed(ev)
                add(ev)
                if made:
                    made_rows(made)

            return add_watched

        (feed1, made_rows1), (feed2, made_rows2) = watchers  # one call each, no loop

        def add_watched_both(ev: PipelineEvent) -> None:
            add(ev)
            made = feed1(ev)
            if made:
                made_rows1(made)
            made = feed2(ev)
            if made:
                made_rows2(made)

        return add_watched_both

    def _found(self, found: list[Finding]) -> None:
        if self.findings is None:  # the checks alone were asked for
            return
        for f in found:
            self.findings.add(finding_row(f, None if f.key is None else conn_info(f.key)[4]))

    def _joined(self, joined: Iterable[Journey]) -> None:
        assert self.journeys is not None
        for j in joined:
            self.journeys.add(journey_row(j), _large(j.value, None))

    def tick(self, now: int) -> None:
        """The wall clock (live, µs): the findings' timers are checked as at an event."""
        if self.diagnoser is not None:
            self._found(self.diagnoser.tick(now))

    def finish(self) -> None:
        """The capture (or group) ended: findings and journeys that wait for its end are
        made, and every row is made into record batches (`flush`)."""
        if self.diagnoser is not None:
            self._found(self.diagnoser.finish())
            if self.checks is not None:
                for c in self.diagnoser.checked():
                    self.checks.add(check_row(c))
        if self.joiner is not None:
            self._joined(self.joiner.finish())
        self.flush()

    def counts(self) -> dict[str, int]:
        """Rows per table so far: of the tables made, and of frames and messages always."""
        made = {name: b.count + b.pending for name, b in self.batches.items()}
        return {**made, "frames": self.frame_count, "messages": self.message_count}

    def flush(self) -> None:
        """Make the rows gathered so far into record batches (handed to the sink, if any)."""
        for batches in self.batches.values():
            batches.flush()

    def tables(self) -> dict[str, pa.Table]:
        """The tables made (every batch kept: only without a sink)."""
        return {name: batches.table() for name, batches in self.batches.items()}


def _large(value: str | None, preview: str | None) -> int:
    """Bytes (characters) of a message row's large cells: its value and its preview."""
    return (0 if value is None else len(value)) + (0 if preview is None else len(preview))
