"""EDGE: a local read's events into the tables' record batches.

Input: capture paths, the read's settings, the tables wanted and a sink for record batches.
Output: the batches, handed to the sink as they are made; `ReadCounts` (rows per table, and
TCP conversations not Pulsar per server port); `read_tables` -> Arrow tables; `make_builder`
-> the TableBuilder of a read's plan (dissector.read.plan), for every front end.
Rule: memory holds one batch per table (BATCH_ROWS rows) and the state of open connections,
whatever the size of the captures; batches of one table come in the order of its rows. Each
group of captures has a TableBuilder of its own (connection state does not span groups).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from dissector.capture.merge import Progress
from dissector.events import Finding, PipelineEvent
from dissector.read.driver import fewer_collections
from dissector.read.numbering import Opened
from dissector.read.options import PathLike, ReaderOptions, diagnoser
from dissector.read.plan import TABLES as TABLES_FRONT
from dissector.read.plan import ReadPlan, plan_read
from dissector.read.row_order import RowKeys
from dissector.read.runs import local_batches
from dissector.tables.builders import Sink, TableBuilder
from dissector.tables.columns import path_text
from dissector.tables.schema import TABLES

if TYPE_CHECKING:  # the journeys' modules are imported when that table is made
    from dissector.journeys.state import EndToEnd


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


def make_builder(
    plan: ReadPlan,
    options: ReaderOptions,
    capture: str = "",
    sink: Sink | None = None,
    tables: Iterable[str] | None = None,
    end_to_end: EndToEnd | None = None,
    listener: Callable[[Finding], None] | None = None,
) -> TableBuilder:
    """The TableBuilder of a read: the plan's tables (or `tables`, those of them a caller
    makes here: the fleet records its journeys for a second stage), its findings made with
    the read's thresholds and ports, `listener` told of each as it is established;
    `end_to_end`: told each end-to-end latency as the journeys' join knows it (the
    metrics' feed)."""
    return TableBuilder(
        capture=capture,
        tables=plan.tables if tables is None else tables,
        sink=sink,
        fields=plan.fields,
        diagnoser=diagnoser(options, listener) if plan.findings else None,
        values=plan.values,
        end_to_end=end_to_end,
    )


def stream_tables(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions,
    tables: Iterable[str],
    sink: Sink,
    progress: Progress | None = None,
    opened: Opened | None = None,
    front: str = TABLES_FRONT,
    keys: RowKeys | None = None,
    watch: Callable[[PipelineEvent], None] | None = None,
    end_to_end: EndToEnd | None = None,
    listener: Callable[[Finding], None] | None = None,
) -> ReadCounts:
    """Dissect the captures, handing each table's record batches to `sink` as they are made
    (see the module rule); return what was counted. Only the stages these tables need run
    (dissector.read.plan; `front`: who reads the batches, see there).

    opened: sharded reads get, per group index, (packet, conn_id) of every connection
    opened (see dissector.read.driver.drive).
    keys: keys every row made, for the sink to take (-j workers: dissector.read.row_order).
    watch: sees every event after the builder (the metrics' feed: dissector.metrics.feed).
    end_to_end: told each end-to-end latency as the journeys' join first knows it (the
    metrics' feed; dissector.journeys.joiner).
    listener: told of each finding as it is established, before its row (the metrics' feed).
    """
    plan = plan_read(options, tables, front)
    counts = ReadCounts()
    builder: TableBuilder | None = None
    add: Callable[[PipelineEvent], None] = _nothing
    group = -1
    named = ""  # the capture whose name the builder holds (as text: path_text)
    with fewer_collections():  # every batch is consumed here: no caller runs meanwhile
        order = None if keys is None else keys.position
        batches = local_batches(paths, options, plan, progress, counts.other_ports, opened, order)
        for g, capture, evs in batches:
            if g != group:
                if builder is not None:
                    _finish(builder, group, keys)
                    counts.rows.update(builder.counts())
                group = g
                builder = make_builder(
                    plan, options, capture, sink, end_to_end=end_to_end, listener=listener
                )
                add = builder.feeder()  # once per builder: no work per batch
                if keys is not None:
                    keys.use(builder)
            assert builder is not None
            if capture is not named:
                named, builder.capture = capture, path_text(capture)
            if keys is not None:
                keys.feed(evs, add)
                continue
            if watch is not None:
                for ev in evs:
                    add(ev)
                    watch(ev)
                continue
            for ev in evs:
                add(ev)
    if builder is not None:
        _finish(builder, group, keys)
        counts.rows.update(builder.counts())
    return counts


def _finish(builder: TableBuilder, group: int, keys: RowKeys | None) -> None:
    """The builder of `group` finishes (its last rows keyed as such, if keyed)."""
    if keys is None:
        builder.finish()
    else:
        keys.finish(group, builder.finish)


def read_tables(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions | None = None,
    tables: Iterable[str] | None = None,
) -> dict[str, pa.Table]:
    """The tables (default: every table) of the captures, as Arrow tables; only the stages
    they need run (dissector.read.plan: frames alone decode no payload)."""
    options = options or ReaderOptions()
    names = list(TABLES) if tables is None else [n for n in TABLES if n in set(tables)]
    made: dict[str, list[pa.RecordBatch]] = {n: [] for n in names}
    stream_tables(paths, options, names, lambda name, batch: made[name].append(batch))
    return {n: pa.Table.from_batches(made[n], schema=TABLES[n].schema) for n in names}
