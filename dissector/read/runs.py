"""EDGE: the reads the front ends ask for, each a way of handing items to the one driver.

Input: capture paths (files, series, several captures) or one series of files with its index
in a larger read; the read's settings and plan (dissector.read.plan).
Output: `local_batches` -> the driver's (group, capture, events) batches of a local read;
`iter_events` -> (capture, event) for the public API and the text view; `iter_series` ->
the events of one series, for Spark's and the fleet's executors.
Rules:
- A local read groups rotated files into series (dissector.capture.series); series that
  overlap in time merge by timestamp into one group (dissector.capture.merge), unless
  merging is off or connections are numbered per series; each group has its own pipeline.
- One series read on its own (an executor's partition) is a group whose index is the
  series' index, its connections numbered in that index's range (dissector.read.numbering).
- Packets come parsed by the compiled stage where it is active (dissector._core), the
  others as read: the driver feeds each kind to the pipeline's matching entry. A sharded
  read (-j worker) whose series do not merge has the walk deal them: one compiled dealer
  per series, shared by its walk and its pipeline (dissector.flow.shard).
- The public generators apply the driver's GC setting only while a batch is made
  (dissector.read.driver.collected_between).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import replace

from dissector import _core
from dissector.capture import series as series_mod
from dissector.capture.merge import Dealers, Item, Progress, merged, merges, series_items
from dissector.events import PipelineEvent
from dissector.flow.tcp import MAX_OPEN_FLOWS
from dissector.read.driver import Batch, collected_between, drive
from dissector.read.numbering import Opened
from dissector.read.options import KeylogPath, PathLike, ReaderOptions, as_paths
from dissector.read.plan import EVENTS, ReadPlan, plan_read
from dissector.read.row_order import Position


def local_batches(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions,
    plan: ReadPlan,
    progress: Progress | None = None,
    other_ports: Counter[int] | None = None,
    opened: Opened | None = None,
    order: Position | None = None,
) -> Iterator[Batch]:
    """The batches of a read of `paths` in this process (see the module rules), running the
    stages of `plan`.

    progress: counts the bytes of the files read. other_ports, opened, order: see
    driver.drive.
    """
    groups = series_mod.group(as_paths(paths), options.series)
    merge = options.merge and not options.per_series_ids
    dealers = None
    if options.shard is not None and not merges(groups, merge):
        dealers = _dealers(options.shard, options.idle_timeout is not None)
    items = merged(groups, progress, options.s3_endpoint, merge, parsed=True, dealers=dealers)
    return drive(dict(enumerate(groups)), items, options, plan, other_ports, opened, dealers, order)


def _dealers(shard: tuple[int, int], clock: bool) -> Dealers | None:
    """Series index -> its compiled dealer (remembering as many connections as the Python
    Sharder), made at first ask; None without the compiled stage."""
    if _core.dealer(shard, MAX_OPEN_FLOWS, clock) is None:
        return None
    made: dict[int, _core.Dealer | None] = {}

    def of(index: int) -> _core.Dealer | None:
        if index not in made:
            made[index] = _core.dealer(shard, MAX_OPEN_FLOWS, clock)
        return made[index]

    return of


def iter_series(
    files: list[str],
    options: ReaderOptions,
    series_index: int = 0,
    watch: Callable[[Iterator[Item]], Iterator[Item]] | None = None,
    plan: ReadPlan | None = None,
) -> Generator[PipelineEvent, None, None]:
    """Events of a series of capture files read as one capture (rotated files in order),
    connections numbered from series_index * CONN_ID_STRIDE + 1.

    watch: sees the series' items (packets, issues) as the driver takes them, each before
    the events it makes (the fleet's journeys take each event's packet time from it).
    plan: the stages run (dissector.read.plan; default: the event API's, as `options` say).

    Packet numbers continue from file to file. Damage that ends a file's reading is an
    anomaly (of shard 0 only, when sharded); the next file of the series is still read.
    """
    items = series_items(files, None, options.s3_endpoint, series_index, parsed=True)
    if watch is not None:
        items = watch(items)
    own = replace(options, per_series_ids=True)  # numbered in the series' own range
    if plan is None:
        plan = plan_read(options, front=EVENTS)
    for _, _, evs in collected_between(drive({series_index: files}, items, own, plan)):
        yield from evs


def iter_events(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions | None = None,
    other_ports: Counter[int] | None = None,
    *,
    tls_keylog: KeylogPath | Iterable[KeylogPath] = (),
    plan: ReadPlan | None = None,
) -> Generator[tuple[str, PipelineEvent], None, None]:
    """(capture path, event) for every event of every capture, in order (a generator:
    `close()` it to stop a read early and close its files).

    Rotated files of one capture point are read as one series (see dissector.capture.series);
    series that overlap in time merge by timestamp (dissector.capture.merge). The path given
    with an event is the first file of its connection's series. other_ports: gets, per
    server port, the TCP conversations found not to be Pulsar.
    tls_keylog: NSS key log files (added to the options' own) to decrypt TLS sessions with.
    plan: the stages run (dissector.read.plan; default: the event API's, as `options` say).
    """
    options = options or ReaderOptions()
    if tls_keylog:
        keylogs = tuple(as_paths(tls_keylog, "tls_keylog"))
        options = replace(options, tls_keylog=options.tls_keylog + keylogs)
    if plan is None:
        plan = plan_read(options, front=EVENTS)
    batches = local_batches(paths, options, plan, other_ports=other_ports)
    for _, path, evs in collected_between(batches):
        for ev in evs:
            yield path, ev
