"""EDGE: the one run driver: capture items in, pipeline events out, in batches.

Input: the series of a read (index -> its files), their items in reading order as
dissector.capture.merge gives them ((group, series index, path, packet or issue)), the read's
settings and its plan (dissector.read.plan: which stages run); optionally a counter of other
ports and, for -j workers, a log of what is opened.
Output: (group, capture, events) batches: the events one packet made (or a group's end made),
`capture` being the first file of the series the events' connection came from.
Rules:
- Every read goes through `drive`: local reads (one series, merged groups, series one after
  another), the -j workers, Spark's and the fleet's executors; they differ only in the items
  they hand it (see dissector.read.runs) and in their settings.
- A group is dissected by a pipeline of its own; its first conn_id is decided by
  dissector.read.numbering. In a group of several series (merged), each connection belongs to
  the series whose packet opened it: its events come one a batch, named by that series.
- Packets the compiled stage parsed (`Segment`s) go to `Pipeline.feed_parsed`, the others
  (`RawPacket`s) to `Pipeline.feed`: the same packet count, clock and shard either way. A
  -j worker's walk deals itself where nothing merges (`dealers`, dissector.flow.shard): its
  `Dealt`/`DealtRaw` packets go to `Pipeline.feed_dealt`, its `Skipped` runs to
  `Pipeline.skipped` (the clock, and the time of the last packet read).
- -j workers (`order`) say where each batch comes from (dissector.read.row_order): the
  connections the idle clock ends before a packet come as a batch of their own.
- Damage that ends a file's reading is an anomaly row of connection 0 (of shard 0 only, when
  sharded), never an exception; the next file is still read.
- The cyclic garbage collector runs less often while the driver works (about a fifth of the
  run time otherwise), never while a caller holds a suspended generator: `fewer_collections`
  for a whole call that consumes every batch itself, `collected_between` for generators.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from dissector._core import Dealer
from dissector.capture import CaptureIssue
from dissector.capture.merge import Dealers, Item
from dissector.events import Anomaly, Dealt, DealtRaw, PipelineEvent, RawPacket, Segment, Skipped
from dissector.keylog_files import KeylogFiles
from dissector.pipeline import Pipeline
from dissector.pulsar.messages import MessageExtractor
from dissector.read.numbering import Numbering, Opened
from dissector.read.options import ReaderOptions, idle_us
from dissector.read.plan import ReadPlan
from dissector.read.row_order import END, ISSUE, LAST_PACKET, PACKET, TICK, Position
from dissector.tables.columns import path_text
from dissector.tls.keylog import KeyLog

if TYPE_CHECKING:
    from dissector.values import Values

#: (group, capture, events): the events of one packet, or of a group's end.
Batch = tuple[int, str, list[PipelineEvent]]
T = TypeVar("T")

#: Allocations between collections of the youngest GC generation while reading (default 700).
GC_THRESHOLD = 100_000


def make_pipeline(
    options: ReaderOptions,
    plan: ReadPlan,
    first_conn_id: int = 1,
    keylog: KeyLog | None = None,
    dealer: Dealer | None = None,
) -> Pipeline:
    """A pipeline with the reader's settings running the stages of `plan` (payload decoding,
    pairing, the journeys' and lifecycle facts, frame runs, frame bytes), numbering
    connections from `first_conn_id`.

    keylog: the TLS secrets to use (live passes one it keeps feeding); by default those of
    the files in `options.tls_keylog`, read now (None without files).
    dealer: the compiled dealer the walk of a sharded read deals with (its state shared).
    """
    if keylog is None and options.tls_keylog:
        keylog = KeylogFiles(options.tls_keylog).keylog
    return Pipeline(
        broker_ports=options.broker_ports,
        tls_ports=options.tls_ports,
        max_frame_size=options.max_frame_size,
        first_conn_id=first_conn_id,
        messages=MessageExtractor(
            max_uncompressed=options.max_uncompressed,
            preview=options.payload_preview,
            values=make_values(options),
        )
        if plan.payloads
        else None,
        shard=options.shard,
        dealer=dealer,
        pairs=plan.pairs,
        idle_timeout=idle_us(options.idle_timeout),
        frame_bytes=plan.frame_bytes,
        keylog=keylog,
        frame_runs=plan.frame_runs,
        consumed=plan.consumed,
        lifecycles=plan.lifecycles,
        schemas=plan.schemas,
    )


def make_values(options: ReaderOptions) -> Values | None:
    """The decoder of message values (docs/values.md) when asked for, else None (nothing of
    dissector.values is even imported)."""
    if not options.values:
        return None
    from dissector.values import Values, parse_redact_fields

    return Values(redact_fields=parse_redact_fields(options.redact_fields))


def drive(
    series: Mapping[int, list[str]],
    items: Iterable[Item],
    options: ReaderOptions,
    plan: ReadPlan,
    other_ports: Counter[int] | None = None,
    opened: Opened | None = None,
    dealers: Dealers | None = None,
    order: Position | None = None,
) -> Iterator[Batch]:
    """The batches of a read (see the module rules), its stages those of `plan`.

    other_ports: gets, per server port, the TCP conversations found not to be Pulsar.
    opened: sharded reads log, in `opened[group]`, (packet, conn_id) of what they open, for
    dissector.read.numbering to renumber as one process would.
    dealers: group -> the compiled dealer its items were dealt with (see the module rules).
    order: set, before each batch is yielded, to where it comes from (-j workers).
    """
    issues = options.shard is None or options.shard[0] == 0
    numbering = Numbering(options)
    pipe: Pipeline | None = None
    group = current = -1  # the group, and the series of the last item
    home = ""  # the capture of the group's first series: events of no connection
    owner: dict[int, str] = {}  # merged groups: conn_id -> capture of its series
    members: set[int] = set()
    merging = False  # the group holds several series: whose is each connection
    logged = 0
    last_ts = 0
    for g, index, path, item in items:
        if g != group:
            if pipe is not None:
                yield from _close(pipe, group, home, owner, merging, other_ports, order)
                numbering.ended(pipe.next_conn_id)
            group, current, home, members, logged = g, index, series[index][0], {index}, 0
            owner, merging = {}, False
            dealer = None if dealers is None else dealers(g)
            pipe = make_pipeline(options, plan, numbering.first(g), dealer=dealer)
            if opened is not None:
                pipe.opened = opened.setdefault(g, [])
        assert pipe is not None
        if index != current:
            current = index
            if index not in members:
                members.add(index)
                merging = pipe.log_opened = True
                logged = len(pipe.opened)  # those opened so far are the first series'
        if isinstance(item, (Segment, RawPacket)):
            if order is not None:
                ticked = pipe.tick(item.ts)  # then feeding finds the clock there
                if ticked:
                    order.at(group, item.number, TICK)
                    yield from _batches(group, home, owner, merging, ticked)
                order.at(group, item.number, PACKET)
            if type(item) is Dealt or type(item) is DealtRaw:
                evs = pipe.feed_dealt(item)
            elif isinstance(item, Segment):
                evs = pipe.feed_parsed(item)
            else:
                evs = pipe.feed(item)
        elif isinstance(item, Skipped):
            if order is not None:
                order.at(group, item.at, TICK)
            evs = pipe.skipped(item)
        else:
            if issues:
                if order is not None:
                    order.at(group, item.packet, ISSUE)
                yield group, series[index][0], [issue_anomaly(path, item, last_ts)]
            continue
        last_ts = item.ts
        if not merging:
            if evs:
                yield group, home, evs
            continue
        log = pipe.opened
        for _, conn_id in log[logged:]:
            owner[conn_id] = series[index][0]
        if opened is None:
            log.clear()
        logged = len(log)
        for ev in evs:
            yield group, owner.get(getattr(ev, "conn_id", 0), home), [ev]
    if pipe is not None:
        yield from _close(pipe, group, home, owner, merging, other_ports, order)


def _batches(
    group: int, home: str, owner: dict[int, str], merging: bool, evs: list[PipelineEvent]
) -> Iterator[Batch]:
    """Events batched as `drive` batches them: all at once, or one by one in merged groups
    (each named by its connection's series)."""
    if not merging:
        yield group, home, evs
    else:
        for ev in evs:
            yield group, owner.get(getattr(ev, "conn_id", 0), home), [ev]


def _close(
    pipe: Pipeline,
    group: int,
    home: str,
    owner: dict[int, str],
    merging: bool,
    other_ports: Counter[int] | None,
    order: Position | None,
) -> Iterator[Batch]:
    """The events of a group's end, batched as `drive` batches them."""
    if order is not None:
        order.at(group, LAST_PACKET, END)
    yield from _batches(group, home, owner, merging, pipe.close())
    if other_ports is not None:
        other_ports.update(pipe.other_ports)


def issue_anomaly(path: str, issue: CaptureIssue, ts: int) -> Anomaly:
    """The anomaly row of damage that ended a file's reading."""
    return Anomaly.of(
        issue.code,
        conn_id=0,
        direction=None,
        stream_offset=None,
        detail=f"{path_text(path)}: {issue.detail} (file offset {issue.offset})",
        packet=issue.packet,
        ts=ts,
    )


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Bulk reading makes millions of short-lived, acyclic records: run the cyclic garbage
    collector less often meanwhile; the threshold found is restored on the way out."""
    before = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def collected_between(batches: Iterator[T]) -> Iterator[T]:
    """The items of `batches`, each made with fewer collections and handed over with the
    caller's GC threshold back in place: while this generator is suspended, the process's
    GC is as its caller set it (read again at every resumption)."""
    try:
        while True:
            caller = gc.get_threshold()
            gc.set_threshold(GC_THRESHOLD, *caller[1:])
            try:
                batch = next(batches)
            except StopIteration:
                return
            finally:
                gc.set_threshold(*caller)
            yield batch
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # a generator: the files it opened close now, not when it is collected
