"""EDGE: read capture files through the pipeline into events or pandas tables.

Input: one or more capture paths and reader settings (broker ports, TLS ports, frame limit).
Output: `iter_events` streams pipeline events (memory stays flat for captures of any size);
`read_capture` returns a `Capture` whose attributes are pandas DataFrames.
Rule: the rotated files of one capture point are read as one series (dissector.capture.series)
so connections spanning files stay whole; series taken at the same time (several hosts)
merge by timestamp as mergecap would, other series follow in time order, each group on its
own pipeline (dissector.capture.merge). Connection ids are small and unique across one read
(1, 2, ...); Spark and the fleet job read each series on its own and number it from
series index * CONN_ID_STRIDE + 1. Damage that ends a file's reading becomes an anomaly row,
never an exception; a file that is not a capture raises InputError.
"""

from __future__ import annotations

import gc
import numbers
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dissector.capture import CaptureIssue, open_capture, series
from dissector.capture.listing import expand_captures
from dissector.capture.locations import rereadable, size_of
from dissector.capture.merge import Progress, first_time, merged, series_items
from dissector.errors import DissectorError, UsageError
from dissector.events import Anomaly, PipelineEvent, RawPacket
from dissector.tls.keylog import KeyLog
from dissector.keylog_files import KeylogFiles
from dissector.pipeline import DEFAULT_BROKER_PORTS, DEFAULT_TLS_PORTS, Pipeline
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.payload import DEFAULT_MAX_UNCOMPRESSED
from dissector.tables.builders import Sink, TableBuilder
from dissector.tables.columns import path_text
from dissector.tables.schema import TABLES, needs_pairs, needs_payloads

if TYPE_CHECKING:
    import pandas as pd

PathLike = str | os.PathLike[str]
#: A key log's path as the API takes it: text, bytes (as the file system names it) or a Path.
KeylogPath = str | bytes | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    broker_ports: frozenset[int] = DEFAULT_BROKER_PORTS
    tls_ports: frozenset[int] = DEFAULT_TLS_PORTS
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    messages: bool = True  # extract application messages (the messages table)
    pairs: bool = True  # make request/response pairs (the timeline table)
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
    payload_preview: int = 0  # bytes of each payload kept in the messages table (opt-in)
    series: str = "auto"  # how rotated files are grouped: auto, digits or none (see series.py)
    shard: tuple[int, int] | None = None  # (k, n): only connections of shard k of n
    idle_timeout: float | None = None  # seconds without a packet that end a connection
    frame_bytes: bool = False  # frames carry their bytes (Frame.raw), for the hex view
    fields: bool = False  # the frames table's on-request `fields` column (JSON) is made
    s3_endpoint: str | None = None  # S3 endpoint URL other than AWS (default: environment)
    merge: bool = True  # series taken at the same time merge by timestamp (capture.merge)
    #: Number connections as Spark and the fleet job do: series index * CONN_ID_STRIDE + n,
    #: each series read on its own (no merge), so local and Spark tables compare row for row.
    per_series_ids: bool = False
    tls_keylog: tuple[str, ...] = ()  # NSS key log files: TLS sessions decrypted with them

    def __post_init__(self) -> None:
        idle = self.idle_timeout
        if idle is not None and (not isinstance(idle, numbers.Real) or not idle >= 0):
            raise UsageError(f"idle_timeout: {idle!r} is not a number of seconds >= 0")
        for path in self.tls_keylog:
            if not isinstance(path, str):
                raise UsageError(f"tls_keylog: {path!r} is not a path (give str paths)")

    @classmethod
    def make(cls, ports: Iterable[int] = (), **kw: Any) -> ReaderOptions:
        """Options with `ports` added to the default broker ports."""
        return cls(broker_ports=DEFAULT_BROKER_PORTS | frozenset(ports), **kw)


def _path(path: object, what: str) -> str:
    if isinstance(path, str | bytes | os.PathLike):
        return os.fsdecode(path)  # bytes: as the file system names it (surrogateescape)
    raise UsageError(f"{what}: {path!r} is not a path")


def as_paths(paths: KeylogPath | Iterable[KeylogPath], what: str = "paths") -> list[str]:
    """One path or several (str, bytes or path-like) as str paths; UsageError for anything
    else."""
    if isinstance(paths, str | bytes | os.PathLike):
        return [_path(paths, what)]
    try:
        items = list(paths)
    except TypeError:
        raise UsageError(f"{what}: {paths!r} is neither a path nor a list of paths") from None
    return [_path(p, what) for p in items]


#: Idle timeouts longer than this (µs, about 146,000 years) never end a connection: no
#: capture spans them, and a float as large as 1e303 s has no integer microsecond value.
MAX_IDLE_US = 1 << 62


def idle_us(seconds: float | None) -> int | None:
    """An idle timeout in seconds as the pipeline's whole microseconds (None: never)."""
    if seconds is None or seconds * 1e6 >= MAX_IDLE_US:
        return None
    return round(seconds * 1e6)


#: Allocations between collections of the youngest GC generation while reading (default 700).
GC_THRESHOLD = 100_000

#: conn_id = series index * CONN_ID_STRIDE + n: unique across every capture of one read,
#: and the same whichever process (pandas here, a Spark executor) dissects the series.
CONN_ID_STRIDE = 1 << 32


def make_pipeline(
    options: ReaderOptions,
    series_index: int = 0,
    first_conn_id: int | None = None,
    keylog: KeyLog | None = None,
) -> Pipeline:
    """A pipeline with the reader's settings, numbering connections from `first_conn_id`
    (default: its series' range, series_index * CONN_ID_STRIDE + 1).

    keylog: the TLS secrets to use (live passes one it keeps feeding); by default those of
    the files in `options.tls_keylog`, read now (None without files).
    """
    if keylog is None and options.tls_keylog:
        keylog = KeylogFiles(options.tls_keylog).keylog
    return Pipeline(
        broker_ports=options.broker_ports,
        tls_ports=options.tls_ports,
        max_frame_size=options.max_frame_size,
        first_conn_id=series_index * CONN_ID_STRIDE + 1 if first_conn_id is None else first_conn_id,
        messages=MessageExtractor(
            max_uncompressed=options.max_uncompressed, preview=options.payload_preview
        )
        if options.messages
        else None,
        shard=options.shard,
        pairs=options.pairs,
        idle_timeout=idle_us(options.idle_timeout),
        frame_bytes=options.frame_bytes,
        keylog=keylog,
    )


def capture_bytes(paths: PathLike | Iterable[PathLike], s3_endpoint: str | None = None) -> int:
    """The size of the capture files (what a read's Progress counts up to)."""
    return sum(size_of(p, s3_endpoint) for p in as_paths(paths))


def iter_series(
    files: list[str],
    options: ReaderOptions,
    series_index: int = 0,
    opened: list[tuple[int, int]] | None = None,
    progress: Progress | None = None,
    other_ports: Counter[int] | None = None,
) -> Iterator[PipelineEvent]:
    """Events of a series of capture files read as one capture (rotated files in order).

    Packet numbers continue from file to file. Damage that ends a file's reading is an
    anomaly (of shard 0 only, when sharded); the next file of the series is still read.
    opened: sharded reads append (packet, conn_id) of every connection opened.
    progress: counts the bytes of the files read.
    other_ports: gets, per server port, the TCP conversations found not to be Pulsar.
    """
    pipe = make_pipeline(options, series_index)
    if opened is not None:
        pipe.opened = opened
    issues = options.shard is None or options.shard[0] == 0
    last_ts = 0
    with _fewer_collections():
        for _, _, path, item in series_items(files, progress, options.s3_endpoint):
            if type(item) is RawPacket:
                last_ts = item.ts
                yield from pipe.feed(item)
            elif issues:
                assert isinstance(item, CaptureIssue)
                yield _issue_anomaly(path, item, last_ts)
    yield from pipe.close()
    if other_ports is not None:
        other_ports.update(pipe.other_ports)


def _events(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions,
    progress: Progress | None = None,
    other_ports: Counter[int] | None = None,
    opened: dict[int, list[tuple[int, int]]] | None = None,
) -> Iterator[tuple[int, str, list[PipelineEvent]]]:
    """(group, capture, events) for the events of a read, in batches (those one packet
    made): series that overlap in time merge by timestamp into one group, one pipeline each
    (dissector.capture.merge); `capture` is the first file of the series the events'
    connection came from (in a merged group, a batch of one event).

    Connection ids run on from group to group (1, 2, ... across the whole read); sharded
    reads number group g from g * CONN_ID_STRIDE + 1 and log, in `opened[g]`, what they
    open, for dissector.parallel_reader to renumber as one process would. With
    `per_series_ids`, each series is a group numbered from its index * CONN_ID_STRIDE + 1.
    """
    groups = series.group(as_paths(paths), options.series)
    issues = options.shard is None or options.shard[0] == 0
    strided = options.shard is not None or options.per_series_ids
    merge = options.merge and not options.per_series_ids
    pipe: Pipeline | None = None
    group = current = -1  # the group, and the series of the last item
    next_id = 1
    home = ""  # the capture of the group's first series: events of no connection
    owner: dict[int, str] = {}  # merged groups: conn_id -> capture of its series
    members: set[int] = set()
    merging = False  # the group holds several series: whose is each connection
    logged = 0
    last_ts = 0
    with _fewer_collections():
        for g, index, path, item in merged(groups, progress, options.s3_endpoint, merge):
            if g != group:
                if pipe is not None:
                    yield from _close(pipe, group, home, owner, merging, other_ports)
                    next_id = pipe.next_conn_id
                group, current, home, members, logged = g, index, groups[index][0], {index}, 0
                owner, merging = {}, False
                pipe = make_pipeline(options, g, None if strided else next_id)
                if opened is not None:
                    pipe.opened = opened.setdefault(g, [])
            assert pipe is not None
            if index != current:
                current = index
                if index not in members:
                    members.add(index)
                    merging = pipe.log_opened = True
                    logged = len(pipe.opened)  # those opened so far are the first series'
            if type(item) is RawPacket:
                last_ts = item.ts
                evs = pipe.feed(item)
                if not merging:
                    if evs:
                        yield group, home, evs
                    continue
                log = pipe.opened
                for _, conn_id in log[logged:]:
                    owner[conn_id] = groups[index][0]
                if opened is None:
                    log.clear()
                logged = len(log)
                for ev in evs:
                    yield group, owner.get(getattr(ev, "conn_id", 0), home), [ev]
            elif issues:
                assert isinstance(item, CaptureIssue)
                yield group, groups[index][0], [_issue_anomaly(path, item, last_ts)]
        if pipe is not None:
            yield from _close(pipe, group, home, owner, merging, other_ports)


def _close(
    pipe: Pipeline,
    group: int,
    home: str,
    owner: dict[int, str],
    merging: bool,
    other_ports: Counter[int] | None,
) -> Iterator[tuple[int, str, list[PipelineEvent]]]:
    """The events of a group's end, batched as `_events` batches them."""
    evs = pipe.close()
    if not merging:
        yield group, home, evs
    else:
        for ev in evs:
            yield group, owner.get(getattr(ev, "conn_id", 0), home), [ev]
    if other_ports is not None:
        other_ports.update(pipe.other_ports)


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Bulk reading makes millions of short-lived, acyclic records: run the cyclic garbage
    collector less often meanwhile (about a fifth of the run time otherwise)."""
    before = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _issue_anomaly(path: str, issue: CaptureIssue, ts: int) -> Anomaly:
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


def iter_events(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions | None = None,
    other_ports: Counter[int] | None = None,
    *,
    tls_keylog: KeylogPath | Iterable[KeylogPath] = (),
) -> Iterator[tuple[str, PipelineEvent]]:
    """(capture path, event) for every event of every capture, in order.

    Rotated files of one capture point are read as one series (see dissector.capture.series);
    series that overlap in time merge by timestamp (dissector.capture.merge). The path given
    with an event is the first file of its connection's series. other_ports: see iter_series.
    tls_keylog: NSS key log files (added to the options' own) to decrypt TLS sessions with.
    """
    options = options or ReaderOptions()
    if tls_keylog:
        keylogs = tuple(as_paths(tls_keylog, "tls_keylog"))
        options = replace(options, tls_keylog=options.tls_keylog + keylogs)
    for _, path, evs in _events(paths, options, other_ports=other_ports):
        for ev in evs:
            yield path, ev


def series_tables(
    files: list[str],
    options: ReaderOptions,
    series_index: int = 0,
    tables: Iterable[str] | None = None,
) -> dict[str, pa.Table]:
    """The tables (default: every table) of one series of capture files."""
    builder = TableBuilder(capture=files[0], tables=tables, fields=options.fields)
    add = builder.add
    for ev in iter_series(files, options, series_index):
        add(ev)
    return builder.tables()


def stream_tables(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions,
    tables: Iterable[str],
    sink: Sink,
    progress: Progress | None = None,
    opened: dict[int, list[tuple[int, int]]] | None = None,
) -> Counter[str]:
    """Dissect the captures, handing each table's record batches to `sink` as they are made;
    return the rows of each table made, and of frames and messages (made or not).

    Memory holds one batch per table (BATCH_ROWS rows) and the state of open connections,
    whatever the size of the captures. Batches of one table come in the order of its rows.
    opened: sharded reads get, per group index, (packet, conn_id) of every connection
    opened (see _events).
    """
    wanted = list(tables)
    counts: Counter[str] = Counter()
    other: Counter[int] = Counter()
    builder: TableBuilder | None = None
    group = -1
    named = ""  # the capture whose name the builder holds (as text: path_text)
    for g, capture, evs in _events(paths, options, progress, other, opened):
        if g != group:
            if builder is not None:
                builder.flush()
                counts.update(builder.counts())
            group = g
            builder = TableBuilder(capture=capture, tables=wanted, sink=sink, fields=options.fields)
        assert builder is not None
        if capture is not named:
            named, builder.capture = capture, path_text(capture)
        add = builder.add
        for ev in evs:
            add(ev)
    if builder is not None:
        builder.flush()
        counts.update(builder.counts())
    counts.update({f"{OTHER_PORT}{port}": n for port, n in other.items()})
    return counts


#: stream_tables counts TCP conversations that are not Pulsar as OTHER_PORT + server port.
OTHER_PORT = "other_port:"


def check_captures(paths: PathLike | Iterable[PathLike], s3_endpoint: str | None = None) -> None:
    """Every input is usable, checked before any is read (its header opened, then closed):
    InputError for the first that is not. Pipes and devices are read once, so they are
    checked when they are read."""
    for path in as_paths(paths):
        if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
            continue
        with open_capture(path, s3_endpoint):
            pass


def first_packet_time(
    paths: PathLike | Iterable[PathLike], options: ReaderOptions | None = None
) -> int | None:
    """The time (µs) of the first packet a read of `paths` meets, or None when the first
    file is not a regular file (a pipe must not be read twice) or holds no packet."""
    options = options or ReaderOptions()
    groups = series.group(as_paths(paths), options.series)
    if not groups or not all(rereadable(files[0]) for files in groups):
        return None
    try:
        times = [first_time(files, options.s3_endpoint) for files in groups]
    except DissectorError:
        return None
    known = [t for t in times if t is not None]
    return min(known) if known else None


def no_pulsar_hint(counts: Counter[str], ports: Iterable[int]) -> str | None:
    """When a read found no Pulsar frame: one line saying so, and which --port to try when
    TCP conversations were seen on other ports; None when frames were found."""
    if counts["frames"]:
        return None
    broker = ", ".join(str(p) for p in sorted(ports))
    other = Counter(
        {int(k[len(OTHER_PORT) :]): n for k, n in counts.items() if k.startswith(OTHER_PORT)}
    )
    if not other:
        return f"no Pulsar frame found on the broker ports ({broker})"
    listed = ", ".join(f"{port} ({n})" for port, n in other.most_common(5))
    best = other.most_common(1)[0][0]
    return (
        f"no Pulsar frame found on the broker ports ({broker}); TCP conversations on "
        f"other ports: {listed}; if Pulsar listens there, try --port {best}"
    )


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """A table as a DataFrame with nullable Int64/Int32/boolean columns (not float/object).

    pandas is imported here, when a DataFrame is asked for: it takes half a second, more
    than the command line needs to start and read a small capture."""
    import pandas as pd

    types = {
        pa.int64(): pd.Int64Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }
    return table.to_pandas(types_mapper=types.get)


#: String columns with few distinct values: categoricals in the DataFrames of `Capture`.
CATEGORICAL = frozenset(
    {
        "direction", "command", "checksum", "kind", "compression", "code", "severity",
        "ended", "request_command", "response_command", "request_direction", "outcome",
        "sub_type", "access_mode", "state", "auth_method",
    }
)  # fmt: skip
#: Integer microsecond durations, each also given as a timedelta64[us] column without the
#: `_us` suffix in the DataFrames of `Capture` (the integer column stays, as in the files).
DURATIONS = ("latency_us", "duration_us")


def to_friendly_pandas(table: pa.Table) -> pd.DataFrame:
    """`to_pandas`, then what a pandas user expects: low-cardinality strings as
    categoricals, durations also as timedelta64[us] (`latency` beside `latency_us`)."""
    import pandas as pd

    frame = to_pandas(table)
    for name in frame.columns:
        if name in CATEGORICAL and pa.types.is_string(table.schema.field(name).type):
            frame[name] = frame[name].astype("category")
    for name in DURATIONS:
        if name in frame.columns:
            at = frame.columns.get_loc(name) + 1
            values = pd.to_timedelta(frame[name].astype("float64"), unit="us")
            frame.insert(at, name.removesuffix("_us"), values.astype("timedelta64[us]"))
    return frame


class Capture:
    """The tables of one or more captures as pandas DataFrames (Arrow tables in `.arrow`).

    Each DataFrame is made once, on first access, and kept: edits to it persist. Low-
    cardinality strings are categoricals; durations are also timedelta64[us] columns.
    Only the tables read are available (`read_capture(..., tables=[...])`).
    """

    def __init__(self, arrow: dict[str, pa.Table], paths: list[str] | None = None) -> None:
        self.arrow = arrow
        self.paths = paths or []
        self._frames: dict[str, pd.DataFrame] = {}

    def table(self, name: str) -> pd.DataFrame:
        """The DataFrame of table `name` (made on first access, then kept)."""
        if name not in self._frames:
            if name not in self.arrow:
                read = ", ".join(self.arrow) or "none"
                raise UsageError(
                    f"table {name!r} was not read (read: {read}); "
                    f"read_capture(..., tables=[..., {name!r}]) reads it"
                )
            self._frames[name] = to_friendly_pandas(self.arrow[name])
        return self._frames[name]

    @property
    def frames(self) -> pd.DataFrame:
        return self.table("frames")

    @property
    def messages(self) -> pd.DataFrame:
        return self.table("messages")

    @property
    def timeline(self) -> pd.DataFrame:
        return self.table("timeline")

    @property
    def entities(self) -> pd.DataFrame:
        return self.table("entities")

    @property
    def anomalies(self) -> pd.DataFrame:
        return self.table("anomalies")

    @property
    def conversations(self) -> pd.DataFrame:
        return self.table("conversations")

    def __repr__(self) -> str:
        files = ", ".join(self.paths[:3]) + (
            f" (+{len(self.paths) - 3})" if len(self.paths) > 3 else ""
        )
        rows = ", ".join(f"{name}={table.num_rows}" for name, table in self.arrow.items())
        return f"Capture({files or 'no files'}: {rows})"


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


def read_capture(
    paths: PathLike | Iterable[PathLike],
    *,
    ports: Iterable[int] = (),
    tls_ports: Iterable[int] = DEFAULT_TLS_PORTS,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
    payload_preview: int = 0,
    series: str = "auto",
    tables: Iterable[str] | None = None,
    fields: bool = False,
    merge: bool = True,
    s3_endpoint: str | None = None,
    tls_keylog: KeylogPath | Iterable[KeylogPath] = (),
) -> Capture:
    """Dissect captures into tables: `.frames`, `.messages`, `.anomalies`, `.conversations`,
    `.timeline` (request/response pairs with latency) and `.entities` (producers, consumers).

    ports: extra broker ports, added to the defaults (6650 plain, 6651 TLS).
    payload_preview: keep the first N bytes of every payload (escaped) in the messages table.
    tables: the tables to make (default: every one); fewer is faster (the frames table
    alone needs no payload decoding).
    fields: make the frames table's `fields` column (every field of the command as JSON);
    it costs about as much as the rest of the frames row, so it is null unless asked for.
    merge: captures taken at the same time merge by timestamp (mergecap); False reads
    them one after another (mergecap -a).
    paths: files, globs or directories, local or remote (`s3://`, `gs://`, `hdfs://`, ...).
    s3_endpoint: an S3 endpoint URL other than AWS (default: AWS_ENDPOINT_URL_S3, then
    AWS_ENDPOINT_URL).
    tls_keylog: NSS key log files (SSLKEYLOGFILE) to decrypt TLS sessions with (TLS 1.3 and
    1.2; AES-GCM, ChaCha20-Poly1305, AES-CBC); an unreadable one raises InputError.
    """
    options = ReaderOptions.make(
        ports,
        tls_ports=frozenset(tls_ports),
        max_frame_size=max_frame_size,
        max_uncompressed=max_uncompressed,
        payload_preview=payload_preview,
        series=series,
        fields=fields,
        s3_endpoint=s3_endpoint,
        merge=merge,
        tls_keylog=tuple(as_paths(tls_keylog, "tls_keylog")) if tls_keylog else (),
    )
    names = list(TABLES) if tables is None else list(tables)
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise UsageError(f"no table {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    options = replace(options, messages=needs_payloads(names), pairs=needs_pairs(names))
    files = expand_captures(as_paths(paths), s3_endpoint)
    return Capture(read_tables(files, options, names), files)
