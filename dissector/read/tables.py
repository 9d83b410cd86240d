"""EDGE: a local read's events into the tables' record batches.

Input: capture paths, the read's settings, the tables wanted and a sink for record batches.
Output: the batches, handed to the sink as they are made; `ReadCounts` (rows per table, and
TCP conversations not Pulsar per server port); `read_tables` -> Arrow tables.
Rule: memory holds one batch per table (BATCH_ROWS rows) and the state of open connections,
whatever the size of the captures; batches of one table come in the order of its rows. Each
group of captures has a TableBuilder of its own (connection state does not span groups).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import pyarrow as pa

from dissector.capture.merge import Progress
from dissector.events import PipelineEvent
from dissector.read.driver import fewer_collections
from dissector.read.numbering import Opened
from dissector.read.options import PathLike, ReaderOptions, diagnoser
from dissector.read.runs import local_batches
from dissector.tables.builders import Sink, TableBuilder
from dissector.tables.columns import path_text
from dissector.tables.schema import TABLES, takes_frame_runs


@dataclass(slots=True)
class ReadCounts:
    """What a read counted, besides its rows' batches."""

    #: rows per table made, and of frames and messages (made or not)
    rows: Counter[str] = field(default_factory=Counter)
    #: server port -> TCP conversations found there that were not Pulsar
    other_ports: Counter[int] = field(default_factory=Counter)

    def __add__(self, other: ReadCounts) -> ReadCounts:
        return ReadCounts(self.rows + other.rows, self.other_ports + other.other_ports)


def _nothing(ev: PipelineEvent) -> None:
    """Where events would go before the first builder is made (never called)."""


def stream_tables(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions,
    tables: Iterable[str],
    sink: Sink,
    progress: Progress | None = None,
    opened: Opened | None = None,
) -> ReadCounts:
    """Dissect the captures, handing each table's record batches to `sink` as they are made
    (see the module rule); return what was counted.

    opened: sharded reads get, per group index, (packet, conn_id) of every connection
    opened (see dissector.read.driver.drive).
    """
    wanted = list(tables)
    options = replace(options, frame_runs=takes_frame_runs(wanted))  # the builder's rows
    counts = ReadCounts()
    builder: TableBuilder | None = None
    add: Callable[[PipelineEvent], None] = _nothing
    group = -1
    named = ""  # the capture whose name the builder holds (as text: path_text)
    with fewer_collections():  # every batch is consumed here: no caller runs meanwhile
        for g, capture, evs in local_batches(paths, options, progress, counts.other_ports, opened):
            if g != group:
                if builder is not None:
                    builder.finish()
                    counts.rows.update(builder.counts())
                group = g
                builder = TableBuilder(
                    capture=capture,
                    tables=wanted,
                    sink=sink,
                    fields=options.fields,
                    diagnoser=diagnoser(options) if "findings" in wanted else None,
                    values=options.values,
                )
                add = builder.feeder()  # once per builder: no work per batch
            assert builder is not None
            if capture is not named:
                named, builder.capture = capture, path_text(capture)
            for ev in evs:
                add(ev)
    if builder is not None:
        builder.finish()
        counts.rows.update(builder.counts())
    return counts


def read_tables(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions | None = None,
    tables: Iterable[str] | None = None,
) -> dict[str, pa.Table]:
    """The tables (default: every table) of the captures, as Arrow tables."""
    options = options or ReaderOptions()
    names = list(TABLES) if tables is None else [n for n in TABLES if n in set(tables)]
    made: dict[str, list[pa.RecordBatch]] = {n: [] for n in names}
    stream_tables(paths, options, names, lambda name, batch: made[name].append(batch))
    return {n: pa.Table.from_batches(made[n], schema=TABLES[n].schema) for n in names}
