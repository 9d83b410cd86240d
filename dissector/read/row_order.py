"""EDGE: the order of a -j read's rows: each worker keys its rows, the parent merges them.

Input: in a worker, where the driver's batches of events come from (`Position`, set by
dissector.read.driver.drive) and the rows its TableBuilder made of them; in the parent, the
workers' keyed record batches of one table.
Output: `RowKeys.keyed(name, batch)`: a worker's batch with its rows' keys as two more
columns (KEY_COLUMNS); `merge(parts)`: the batches of every worker in the order one process
makes the rows, the keys dropped.
Rules:
- One process makes a table's rows in the order of the events that make them, and events
  come from a packet or from the end of a group. A row's key is where its event came from:
  (group, packet, phase) and, where several connections end at one point, which of them.
- The phases at a packet: TICK, the connections the idle clock ends before it (oldest
  first: by their last packet, which the `Conversation` event of each tells); PACKET, its
  own events, all of one connection, so of one worker; ISSUE, the damage that ended a file
  after it. A group ends with END, the connections still open closed in order of their last
  packet, then FINISH, the rows the builder makes at the end.
- Each worker's keys rise with its rows; the parent merges the workers' rows by key, ties
  in worker order. So `-j N` rows come in the order of `-j 1`'s, in batches cut as one
  process cuts them: BATCH_ROWS rows, a group's last batch shorter (a one-process read also
  cuts a batch early at BATCH_BYTES of large cells: values, previews; that cut is not
  made here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from typing import Protocol

import numpy as np
import pyarrow as pa

from dissector.events import Conversation, PipelineEvent
from dissector.read.numbering import int64_values
from dissector.tables.builders import BATCH_ROWS, TableBuilder

TICK, PACKET, ISSUE, END = 0, 1, 2, 3
#: The packet of the END and FINISH phases: after every packet of the group.
LAST_PACKET = (1 << 40) - 1
#: The connection key of the FINISH phase's rows: after every connection's.
FINISH = 1 << 62
#: The key columns a worker adds to its batches: k1 = group, packet, phase; k2 = connection.
KEY_COLUMNS = ("_order_k1", "_order_k2")


class TableRows(Protocol):
    """A table's rows in a TableBuilder: made into batches, and gathered for the next."""

    count: int

    @property
    def pending(self) -> int: ...


class Position:
    """Where the driver's current batch of events comes from (see the module rules)."""

    __slots__ = ("group", "packet", "phase")

    def __init__(self) -> None:
        self.group = self.packet = self.phase = 0

    def at(self, group: int, packet: int, phase: int) -> None:
        self.group, self.packet, self.phase = group, packet, phase


def keyed_schema(schema: pa.Schema) -> pa.Schema:
    """A table's schema with the key columns."""
    for name in KEY_COLUMNS:
        schema = schema.append(pa.field(name, pa.int64(), nullable=False))
    return schema


class RowKeys:
    """A worker's row keys per table, run-length, until their batch is written."""

    def __init__(self) -> None:
        self.position = Position()
        self._sub = 0  # the connection key of the rows made now (TICK, END, FINISH)
        self._batches: dict[str, TableRows] = {}
        self._noted: dict[str, int] = {}  # rows of each table keyed so far
        self._runs: dict[str, list[list[int]]] = {}  # [k1, k2, rows], oldest first

    def use(self, builder: TableBuilder) -> None:
        """A new group's builder: its rows are counted from 0."""
        self._batches = dict(builder.batches)
        self._noted = dict.fromkeys(self._batches, 0)
        for name in self._batches:
            self._runs.setdefault(name, [])

    def feed(self, evs: list[PipelineEvent], add: Callable[[PipelineEvent], None]) -> None:
        """Hand a batch of events to the builder (`add`), keying the rows they make."""
        if self.position.phase not in (TICK, END):
            self._sub = 0
            for ev in evs:
                add(ev)
            self.note()
            return
        last = {ev.conn_id: ev.last_packet for ev in evs if type(ev) is Conversation}
        if self.position.phase == TICK:
            self._sub = 0
        for ev in evs:
            self._sub = last.get(getattr(ev, "conn_id", 0), self._sub)
            add(ev)
            self.note()

    def finish(self, group: int, finish: Callable[[], None]) -> None:
        """Call `finish`, the builder of `group` finishing: its rows come after all others
        of the group (the driver may be at the next group's first batch meanwhile)."""
        p = self.position
        was, sub = (p.group, p.packet, p.phase), self._sub
        p.at(group, LAST_PACKET, END)
        self._sub = FINISH
        finish()
        p.at(*was)
        self._sub = sub

    def note(self) -> None:
        """Key the rows made since the last note with the current key."""
        for name in self._batches:
            self._note(name)

    def _note(self, name: str) -> None:
        b = self._batches[name]
        total = b.count + b.pending
        new = total - self._noted[name]
        if not new:
            return
        self._noted[name] = total
        p = self.position
        k1 = p.group << 42 | p.packet << 2 | p.phase
        runs = self._runs[name]
        if runs and runs[-1][0] == k1 and runs[-1][1] == self._sub:
            runs[-1][2] += new
        else:
            runs.append([k1, self._sub, new])

    def keyed(self, name: str, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch the builder just made, its rows' keys added (the oldest rows keyed)."""
        if name in self._batches:
            self._note(name)
        runs = self._runs[name]
        k1s, k2s, counts = [], [], []
        rows = batch.num_rows
        while rows:
            run = runs[0]
            take = min(rows, run[2])
            k1s.append(run[0])
            k2s.append(run[1])
            counts.append(take)
            rows -= take
            run[2] -= take
            if not run[2]:
                runs.pop(0)
        k1 = np.repeat(np.array(k1s, dtype=np.int64), counts)
        k2 = np.repeat(np.array(k2s, dtype=np.int64), counts)
        columns = [*batch.columns, pa.array(k1), pa.array(k2)]
        return pa.RecordBatch.from_arrays(columns, schema=keyed_schema(batch.schema))


def merge(parts: Sequence[Iterator[pa.RecordBatch]]) -> Iterator[pa.RecordBatch]:
    """The keyed batches of every worker (each in its own order) merged by key, ties in
    worker order, cut as one process cuts them (see the module rules); the key columns
    dropped. Each batch is one `take` from the workers' rows: its buffers are as long as
    its rows need, as a one-process read's are."""
    out = _Cutter()
    for pieces, order, k1 in _merged(parts):
        out.add(pieces)
        groups = k1 >> 42
        cuts = [0, *(np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist(), len(k1)]
        for start, stop in pairwise(cuts):
            yield from out.pick(order[start:stop], int(groups[start]))
    yield from out.flush()


class _Cutter:
    """Rows picked from source pieces, made into batches of BATCH_ROWS rows of one group."""

    def __init__(self) -> None:
        self.pieces: list[pa.RecordBatch] = []  # the sources (keys dropped), in turn
        self.rows = 0  # rows of the pieces before those of the next `add`
        self.base = 0  # of the pieces added last: where their rows start
        self.picks: list[np.ndarray] = []  # rows of the next batch (indexes into the pieces)
        self.picked = 0
        self.group = -1

    def add(self, pieces: list[pa.RecordBatch]) -> None:
        """The pieces of the next chunk: every row of those before is picked by now, so the
        pieces no row still waiting for a batch comes from are let go."""
        first = min((int(p.min()) for p in self.picks), default=self.rows)
        start = 0
        while self.pieces and start + self.pieces[0].num_rows <= first:
            start += self.pieces.pop(0).num_rows
        if start:
            self.rows -= start
            self.picks = [p - start for p in self.picks]
        self.base = self.rows
        self.pieces.extend(pieces)
        self.rows += sum(p.num_rows for p in pieces)

    def pick(self, rows: np.ndarray, group: int) -> Iterator[pa.RecordBatch]:
        """Rows (indexes into the pieces last added) of `group`, in order."""
        if group != self.group:
            yield from self.flush()
            self.group = group
        rows = rows + self.base
        while self.picked + len(rows) >= BATCH_ROWS:
            take = BATCH_ROWS - self.picked
            self.picks.append(rows[:take])
            self.picked += take
            rows = rows[take:]
            yield from self.flush()
        if len(rows):
            self.picks.append(rows)
            self.picked += len(rows)

    def flush(self) -> Iterator[pa.RecordBatch]:
        if not self.picked:
            return
        rows = np.concatenate(self.picks)
        table = pa.Table.from_batches(self.pieces).take(pa.array(rows))
        self.picks, self.picked = [], 0
        yield table.combine_chunks().to_batches()[0]


def _merged(
    parts: Sequence[Iterator[pa.RecordBatch]],
) -> Iterator[tuple[list[pa.RecordBatch], np.ndarray, np.ndarray]]:
    """The rows of every part merged by key, a chunk at a time: (the pieces, keys dropped;
    the order of their rows, as indexes into them; the rows' k1 in that order)."""
    heads: list[tuple[pa.RecordBatch, np.ndarray, np.ndarray] | None] = []
    for part in parts:
        heads.append(_next(part))
    while True:
        live = [k for k, head in enumerate(heads) if head is not None]
        if not live:
            return
        # the rows every worker has up to the least of their current batches' last keys
        limit = min((heads[k][1][-1], heads[k][2][-1]) for k in live)  # type: ignore[index]
        pieces, k1s, k2s, owners = [], [], [], []
        for k in live:
            batch, k1, k2 = heads[k]  # type: ignore[misc]
            upto = int(np.count_nonzero((k1 < limit[0]) | ((k1 == limit[0]) & (k2 <= limit[1]))))
            if not upto:
                continue
            width = batch.num_columns - len(KEY_COLUMNS)
            pieces.append(batch.slice(0, upto).select(range(width)))
            k1s.append(k1[:upto])
            k2s.append(k2[:upto])
            owners.append(np.full(upto, k, dtype=np.int64))
            if upto == batch.num_rows:
                heads[k] = _next(parts[k])
            else:
                heads[k] = (batch.slice(upto), k1[upto:], k2[upto:])
        keys = np.concatenate(k1s)
        order = np.lexsort((np.concatenate(owners), np.concatenate(k2s), keys))
        yield pieces, order, keys[order]


def _next(part: Iterator[pa.RecordBatch]) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray] | None:
    """A part's next non-empty batch with its keys, or None at its end."""
    for batch in part:
        if batch.num_rows:
            k1 = int64_values(batch.column(KEY_COLUMNS[0]))
            k2 = int64_values(batch.column(KEY_COLUMNS[1]))
            return batch, k1, k2
    return None
