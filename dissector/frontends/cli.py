"""EDGE: the `pulsar-dissect` command line.

Input: command-line arguments and the files they name.
Output: text or JSON lines on stdout; errors as one line on stderr with a non-zero exit.
Rule: bad input never shows a traceback: DissectorError and OSError become one clear line
(exit 2). Exit 0 when the input was read, even if it held anomalies.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import pyarrow as pa

from dissector.capture.listing import expand_captures
from dissector.errors import (
    DissectorError,
    OutputError,
    UsageError,
    describe_os_error,
    os_reason,
)
from dissector.events import Anomaly, Direction, Event, Frame
from dissector.frontends.expressions import RowFilter
from dissector.frontends.overwrite_guard import refuse_overwrite
from dissector.frontends.progress import ReadProgress
from dissector.frontends.summary import TABLES as SUMMARY_TABLES
from dissector.frontends.summary import TOP, Summary, render
from dissector.frontends.terminal import printable
from dissector.frontends.text import TIME_FORMATS, FrameLines, frame_text
from dissector.keylog_files import check_keylogs
from dissector.parallel_reader import default_jobs, stream_tables_parallel, workers
from dissector.pulsar.field_values import message_dict
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from dissector.pulsar.payload import DEFAULT_MAX_UNCOMPRESSED
from dissector.pulsar.text_fields import repair_metadata
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.reader import (
    OTHER_PORT,
    ReaderOptions,
    capture_bytes,
    check_captures,
    first_packet_time,
    iter_events,
    no_pulsar_hint,
)
from dissector.tables.builders import BATCH_ROWS, Sink, TableBuilder
from dissector.tables.filters import Filter, parse_time
from dissector.tables.output import EXTENSIONS, FORMATS, TableWriter, hidden_file
from dissector.tables.schema import TABLES, needs_pairs, needs_payloads

_DIST = "pulsar-dissector"
#: Seconds without a packet after which live capture ends a connection (Zeek's default).
LIVE_IDLE_TIMEOUT = 300.0
_READ_SIZE = 1 << 20  # bytes read from a stream file at a time: memory stays bounded


def _stream_events(path: Path, args: argparse.Namespace) -> Iterator[Event]:
    decoder = FrameDecoder(
        direction=Direction(args.direction),
        max_frame_size=args.max_frame_size,
        synced=not args.mid_stream,
    )
    with path.open("rb") as fh:
        while chunk := fh.read(_READ_SIZE):
            yield from _with_metadata_text(decoder.feed(chunk))
    yield from _with_metadata_text(decoder.close())


def _with_metadata_text(events: list[Event]) -> Iterator[Event]:
    """Events, each payload frame followed by the anomaly of its metadata's invalid UTF-8
    (as the message extractor reports it when captures are read)."""
    for ev in events:
        not_utf8 = repair_metadata(ev) if isinstance(ev, Frame) else None  # before rendering
        yield ev
        if not_utf8 is not None:
            yield not_utf8


def _event_json(name: str, event: Event, show_secrets: bool) -> dict[str, Any]:
    if isinstance(event, Anomaly):
        return {
            "file": name,
            "anomaly": event.code,
            "severity": str(event.severity),
            "stream_offset": event.stream_offset,
            "length": event.length,
            "detail": event.detail,
        }
    row: dict[str, Any] = {
        "file": name,
        "stream_offset": event.stream_offset,
        "frame_size": event.wire_size,
        "command": event.command_name,
        "fields": {} if event.body is None else message_dict(event.body, show_secrets=show_secrets),
    }
    if event.checksum is not None:
        row["checksum"] = str(event.checksum)
    if event.metadata is not None:
        row["metadata"] = message_dict(event.metadata, show_secrets=show_secrets)
    if event.payload is not None:
        row["payload_size"] = len(event.payload)
    if not event.complete:
        row["complete"] = False
    return row


def cmd_stream(args: argparse.Namespace, out: TextIO) -> int:
    """Decode files that each hold the raw bytes of one direction of a connection."""
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            raise DissectorError(f"{name}: no such file")
        for event in _stream_events(path, args):
            if args.format == "jsonl":
                out.write(json.dumps(_event_json(name, event, args.show_secrets)) + "\n")
            elif isinstance(event, Frame):
                text = frame_text(event, show_secrets=args.show_secrets)
                out.write(printable(f"{name}:{event.stream_offset:<8} {text}") + "\n")
            else:
                line = f"{name}:{event.stream_offset:<8} ! {event.code}: {event.detail}"
                out.write(printable(line) + "\n")
    return 0


def _options(
    args: argparse.Namespace, *, messages: bool = True, pairs: bool = True
) -> ReaderOptions:
    """The reader's settings from the command line (frame bytes are kept for -x only)."""
    return ReaderOptions.make(
        args.port,
        tls_ports=frozenset(args.tls_port),
        max_frame_size=args.max_frame_size,
        messages=messages,
        pairs=pairs,
        max_uncompressed=args.max_uncompressed,
        payload_preview=args.payload_preview,
        series=getattr(args, "series", "auto"),  # live reads no files: no series
        idle_timeout=args.idle_timeout or None,  # 0: never
        frame_bytes=getattr(args, "hexdump", False),
        fields=_wants_fields(args),
        s3_endpoint=getattr(args, "s3_endpoint", None),  # live reads no files
        merge=not getattr(args, "no_merge", False),
        tls_keylog=tuple(args.tls_keylog),
    )


def _wants_fields(args: argparse.Namespace) -> bool:
    """The frames' `fields` column is made when --fields asks, or when --columns, -Y or an
    SQL query name it."""
    named = " ".join(str(getattr(args, k, None) or "") for k in ("columns", "filter", "query"))
    return bool(getattr(args, "fields", False)) or re.search(r"\bfields\b", named) is not None


def _filter(args: argparse.Namespace) -> Filter:
    commands = frozenset(c.upper() for c in args.command)
    unknown = sorted(commands - set(COMMAND_TYPES))
    if unknown:
        raise UsageError(
            f"--command {', '.join(unknown)}: not a Pulsar command "
            "(e.g. SEND, MESSAGE, ACK, PRODUCER, SUBSCRIBE, LOOKUP, CONNECT)"
        )
    return Filter(
        topics=frozenset(args.topic),
        commands=commands,
        conns=frozenset(args.conn),
        since=None if getattr(args, "since", None) is None else parse_time(args.since),
        until=None if getattr(args, "until", None) is None else parse_time(args.until),
    )


#: Output file name suffix -> format, when --format is not given.
_FORMAT_OF_SUFFIX = {ext: fmt for fmt, ext in EXTENSIONS.items()}


def _outputs(args: argparse.Namespace) -> tuple[list[str], str, dict[str, str | None]] | None:
    """The tables to write, their format and each one's path (None: stdout); None for the
    text view. `-o` names a folder (every table, or those given, as FOLDER/TABLE.EXT) when it
    is one, ends with a slash, has no suffix and no --table was given, or several were."""
    tables = list(dict.fromkeys(args.table))
    out = None if args.output in (None, "-") else str(args.output)
    if out is not None and (
        os.path.isdir(out)
        or out.endswith(("/", os.sep))
        or len(tables) > 1
        or (not tables and not Path(out).suffix)
    ):
        fmt = "parquet" if args.format == "text" else args.format
        names = tables or list(TABLES)
        return names, fmt, {n: os.path.join(out, n + EXTENSIONS[fmt]) for n in names}
    if len(tables) > 1:
        raise UsageError("several tables need a folder: -o FOLDER")
    if not tables and args.format == "text" and out is None:
        return None
    fmt = args.format
    if fmt == "text":
        suffix = Path(out).suffix.lower() if out is not None else ".jsonl"
        if suffix not in _FORMAT_OF_SUFFIX:
            raise UsageError(
                f"{out}: cannot tell the format from the name: give --format "
                f"({', '.join(FORMATS)}) or a folder"
            )
        fmt = _FORMAT_OF_SUFFIX[suffix]
    return tables or ["frames"], fmt, {(tables or ["frames"])[0]: out}


def _stream(
    args: argparse.Namespace, options: ReaderOptions, names: list[str], sink: Sink
) -> Counter[str]:
    """Dissect the captures into the tables' record batches, in -j processes; a progress bar
    on stderr when it is a terminal."""
    jobs = workers(args.captures, args.jobs or default_jobs())
    total = capture_bytes(args.captures, options.s3_endpoint) * jobs
    with ReadProgress(total, threaded=jobs == 1) as progress:  # no thread when forking
        return stream_tables_parallel(
            args.captures, options, names, sink, jobs, progress.counter, progress.draw
        )


class _Enough(Exception):
    """-c N: every table written has its N rows; the read stops early."""


def _inputs(args: argparse.Namespace) -> list[str]:
    """The files a run reads: its captures and TLS key logs (no output may be one of them)."""
    return [
        str(p)
        for p in [
            *(getattr(args, "captures", None) or []),
            *(getattr(args, "tls_keylog", None) or []),
        ]
    ]


def cmd_read(args: argparse.Namespace, out: TextIO) -> int:
    """Dissect captures: one line per frame, or tables in a file format."""
    rows = _filter(args)
    plan = _outputs(args)
    if plan is not None:  # the tables of -o FOLDER too, before -w writes anything
        refuse_overwrite(_inputs(args), plan[2].values())
    if args.write is not None:
        _export(args, rows)
        if plan is None:  # as tshark -w: the packets are the output
            return 0
    if plan is None:
        return _text_view(args, out, rows)
    names, fmt, paths = plan
    if fmt == "parquet" and None in paths.values() and out.isatty():
        raise DissectorError("parquet is binary: give -o PATH or redirect standard output")
    if args.time_format != "r":
        raise UsageError("-t sets the text view's time: tables hold UTC timestamps")
    columns = _columns(args, names)
    where = {n: RowFilter(args.filter, n, TABLES[n].schema) for n in names if args.filter}
    schemas = {n: _selected(TABLES[n].schema, columns) for n in names}
    out.flush()
    options = _options(args, messages=needs_payloads(names), pairs=needs_pairs(names))
    counts: Counter[str] = Counter()
    folder = _folder_made(args.output) if len(paths) > 1 or args.output != paths[names[0]] else None
    writers: list[TableWriter] = []
    left = dict.fromkeys(names, args.count)  # -c: rows still to write per table

    def sink(name: str, batch: pa.RecordBatch) -> None:
        batch = rows.table(batch)
        if name in where:
            batch = where[name].apply(batch)
        if columns:
            batch = batch.select(columns)
        wanted = left[name]
        if wanted is not None:
            batch = batch.slice(0, wanted)
            left[name] = wanted - batch.num_rows
        by_name[name].write(batch)
        if all(n == 0 for n in left.values()):
            raise _Enough

    try:
        writers += [TableWriter(fmt, paths[n], schemas[n]) for n in names]
        by_name = dict(zip(names, writers, strict=True))
        try:
            counts = _stream(args, options, names, sink)
        except _Enough:
            counts = Counter({"frames": 1})  # rows were found: no "no Pulsar" hint
        for writer in writers:  # every file complete before any gets its name
            writer.finish()
        for writer in writers:
            writer.publish()
    except BaseException:
        for writer in writers:
            writer.abort()
        if folder is not None:  # a folder made for this run and left empty goes too
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    _hint(counts, _options(args))
    return 0


def _export(args: argparse.Namespace, rows: Filter) -> None:
    """-w OUT.pcap: the packets of the connections with a frame the filters keep."""
    from dissector.frontends.export import chosen_connections, write_packets

    where = RowFilter(args.filter, "frames", TABLES["frames"].schema) if args.filter else None

    def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = rows.table(batch)
        return batch if where is None else where.apply(batch)

    options = _options(args)
    chosen = chosen_connections(
        args.captures, options, None if rows.empty and where is None else keep
    )
    written = write_packets(args.write, args.captures, options, chosen)
    connections = sum(len(spans) for t in chosen.values() for spans in t.values()) // 2
    done = f"{written} packets of {connections} connections written to {args.write}"
    print(f"pulsar-dissect: {printable(done)}", file=sys.stderr)


def _columns(args: argparse.Namespace, names: list[str]) -> list[str] | None:
    """--columns a,b,c: those columns of the one table written, in that order."""
    if not args.columns:
        return None
    if len(names) != 1:
        raise UsageError("--columns chooses the columns of one table: give one --table")
    schema = TABLES[names[0]].schema
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    unknown = [c for c in columns if c not in schema.names]
    if unknown or not columns:
        raise UsageError(
            f"--columns: {', '.join(unknown) or 'none given'}: not a column of {names[0]} "
            f"(columns: {', '.join(schema.names)})"
        )
    return columns


def _selected(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    if columns is None:
        return schema
    return pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)


def _text_view(args: argparse.Namespace, out: TextIO, rows: Filter) -> int:
    """One line per frame (anomalies inline), as tshark prints packets; -Y keeps the frames
    whose frames-table row matches (their lines only), -c N stops after N frame lines."""
    options = _options(args)
    if args.columns:
        raise UsageError("--columns chooses table columns: give --table (or -o)")
    lines = FrameLines(
        rows,
        show_secrets=args.show_secrets,
        time_format=args.time_format,
        verbose=args.verbose,
        hexdump=args.hexdump,
    )
    first = first_packet_time(args.captures, options)
    if first is not None:
        lines.start(first)
    where = RowFilter(args.filter, "frames", TABLES["frames"].schema) if args.filter else None
    other: Counter[int] = Counter()
    frames = printed = 0
    builder = TableBuilder(tables=["frames"], fields=options.fields) if where is not None else None
    held: list[str | None] = []  # -Y: frame lines waiting for their rows to be judged

    def judge() -> int:
        """Print the held lines whose frames match -Y; how many were printed."""
        assert builder is not None and where is not None and builder.frames is not None
        builder.frames.flush()
        batches = builder.frames.take()
        keep: list[bool] = []
        for batch in batches:
            keep += where.mask(batch).to_pylist()
        shown = 0
        for line, ok in zip(held, keep, strict=True):
            if ok and line is not None and (args.count is None or printed + shown < args.count):
                out.write(line)
                shown += 1
        held.clear()
        return shown

    for _, ev in iter_events(args.captures, options, other):  # `!` lines need payloads
        is_frame = type(ev) is Frame
        frames += is_frame
        text = lines.line(ev)
        if builder is not None:
            builder.add(ev)
            if is_frame:
                held.append(text)
                if len(held) >= BATCH_ROWS:
                    printed += judge()
        elif text is not None:
            out.write(text)
            printed += is_frame
        if args.count is not None and printed >= args.count:
            break
    if builder is not None and held:
        printed += judge()
    seen = Counter({"frames": frames, **{f"{OTHER_PORT}{p}": n for p, n in other.items()}})
    _hint(seen, options)
    return 0


def _hint(counts: Counter[str], options: ReaderOptions) -> None:
    """A read that found no Pulsar frame says so on stderr (still exit 0), with a --port to
    try when TCP conversations were seen on other ports."""
    hint = no_pulsar_hint(counts, options.broker_ports)
    if hint is not None:
        print(f"pulsar-dissect: {printable(hint)}", file=sys.stderr)


def _folder_made(path: str) -> str | None:
    """Make the -o folder (and its parents); its path when this run made it, else None."""
    existed = os.path.isdir(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{path}: cannot make this folder: {os_reason(exc)}") from None
    return None if existed else path


def cmd_fields(args: argparse.Namespace, out: TextIO) -> int:
    """Every table's columns with their types and descriptions (as tshark -G fields)."""
    names = args.tables or list(TABLES)
    unknown = [n for n in names if n not in TABLES]
    if unknown:
        raise UsageError(f"fields: no table {', '.join(unknown)} (tables: {', '.join(TABLES)})")
    if args.format == "json":
        listing = {
            name: [
                {
                    "column": f.name,
                    "type": str(f.type),
                    "description": TABLES[name].describe()[f.name],
                }
                for f in TABLES[name].schema
            ]
            for name in names
        }
        out.write(json.dumps(listing, indent=1) + "\n")
        return 0
    for name in names:
        described = TABLES[name].describe()
        for f in TABLES[name].schema:
            out.write(f"{name}\t{f.name}\t{f.type}\t{described[f.name]}\n")
    return 0


#: A table named in a query: `frames`, `messages` ... as whole words.
_TABLE_WORD = re.compile(r"\b(" + "|".join(TABLES) + r")\b", re.IGNORECASE)


def cmd_sql(args: argparse.Namespace, out: TextIO) -> int:
    """A SQL query over the tables of the captures (DuckDB): joins, aggregates, anything."""
    from dissector.frontends.expressions import run_sql

    names = [n for n in TABLES if n in {m.lower() for m in _TABLE_WORD.findall(args.query)}]
    if not names:
        raise UsageError(f"sql: the query names no table (tables: {', '.join(TABLES)})")
    options = _options(args, messages=needs_payloads(names), pairs=needs_pairs(names))
    with tempfile.TemporaryDirectory(prefix="pulsar-dissect-sql-") as folder:
        paths = {n: os.path.join(folder, f"{n}.parquet") for n in names}
        writers = {n: TableWriter("parquet", paths[n], TABLES[n].schema) for n in names}
        try:
            _stream(args, options, names, lambda name, batch: writers[name].write(batch))
            for writer in writers.values():
                writer.close()
        except BaseException:
            for writer in writers.values():
                writer.abort()
            raise
        result = run_sql(args.query, paths)
    if args.format == "text":
        out.write(_text_table(result))
        return 0
    with TableWriter(args.format, args.output, result.schema) as writer:
        for batch in result.to_batches():
            writer.write(batch)
    return 0


def _text_table(table: pa.Table) -> str:
    """A query's result as aligned columns (header, then rows), as a SQL shell prints it."""
    if table.num_columns == 0:
        return ""
    # column by column: a result may name two columns alike (SELECT a, a)
    columns = [[printable(_cell(v)) for v in column.to_pylist()] for column in table.columns]
    rows = [list(row) for row in zip(*columns, strict=True)]
    header = [printable(name) for name in table.column_names]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    """One self-contained HTML page of the captures: overview, ladders, latency, throughput,
    producers and consumers, anomalies."""
    from dissector.frontends.report import TABLES as REPORT_TABLES
    from dissector.frontends.report import Report

    if not args.output.endswith((".html", ".htm")):
        raise UsageError(f"{args.output}: the report is an HTML page: name it NAME.html")
    report = Report([str(c) for c in args.captures])
    options = _options(args)
    counts = _stream(args, options, list(REPORT_TABLES), report.add)
    page = report.html()
    with hidden_file(args.output) as f:
        f.write(page.encode("utf-8"))
    _hint(counts, options)
    out.write(printable(f"report written to {args.output} ({len(page) // 1024} KiB)") + "\n")
    return 0


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    """Overview, the busiest connections, latency percentiles per command, errors."""
    summary = Summary(None if args.all else args.top)
    # frames and messages are counted, not made (the messages still are extracted: their
    # anomalies are the summary's too).
    options = _options(args)
    counts = _stream(args, options, list(SUMMARY_TABLES), summary.add)
    summary.frames, summary.messages = counts["frames"], counts["messages"]
    _hint(counts, options)
    result = summary.result()
    if args.format == "json":
        out.write(json.dumps(result, indent=1) + "\n")
    else:
        out.write(render(result))
    return 0


def _spark_conf(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf takes KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


def cmd_spark(args: argparse.Namespace, out: TextIO) -> int:
    """The fleet job: dissect every capture on Spark into Parquet, then summarize."""
    try:
        from dissector.frontends import fleet, spark
    except ImportError as exc:  # pyspark is an extra
        raise DissectorError(f"the spark command needs pyspark ({exc})") from None
    session = spark.session(args.master, **_spark_conf(args.conf))
    try:
        summary = fleet.run(session, args.captures, args.output, _options(args))
    finally:
        session.stop()
    out.write(fleet.render(summary))
    out.write(f"tables and summary written to {args.output}\n")
    return 0


def cmd_live(args: argparse.Namespace, out: TextIO) -> int:
    """Sniff an interface and dissect its Pulsar traffic as it happens."""
    from dissector.frontends.live import LiveOptions, run  # imports scapy: only when capturing

    options = LiveOptions(
        interface=args.interface,
        bpf=args.filter,
        reader=_options(args),
        fmt=args.format,
        tables=tuple(args.table) or None,
        rows=_filter(args),
        show_secrets=args.show_secrets,
        pcap=args.write,
        rotate_bytes=None if args.rotate_size is None else round(args.rotate_size * 1_000_000),
        rotate_seconds=args.rotate_seconds,
        max_files=args.max_files,
        parquet=args.output,
        flush_interval=args.flush_interval,
        count=args.count,
        duration=args.duration,
        buffer_bytes=args.buffer_size << 10,
        queue_bytes=args.queue_size << 20,
    )
    return run(options, out, sys.stderr)


def _number(
    kind: Callable[[str], float], low: float, high: float, what: str
) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within [low, high], else one line naming `what`."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # NaN fails too
            raise argparse.ArgumentTypeError(f"{what}: {text!r}")
        return value

    return parse


_seconds = _number(float, 0, sys.float_info.max, "not a number of seconds")
_above_zero = _number(float, sys.float_info.min, sys.float_info.max, "not a positive number")
_port = _number(int, 1, 65535, "not a TCP port (1-65535)")
_count = _number(int, 0, sys.maxsize, "not a whole number >= 0")
_positive = _number(int, 1, sys.maxsize, "not a positive whole number")


def _jobs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        default=None,
        metavar="N",
        help="worker processes, each dissecting a share of the connections (default: one per "
        "core); rows are those of -j 1, in another order (sort by conn_id to compare)",
    )


def _secrets_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--show-secrets", action="store_true", help="print authentication data unredacted"
    )


def _live_arguments(live: argparse.ArgumentParser) -> None:
    live.add_argument("-i", "--interface", help="interface to sniff (default: the default route's)")
    _decode_arguments(live)
    live.set_defaults(idle_timeout=LIVE_IDLE_TIMEOUT)
    live.add_argument(
        "-f",
        "--filter",
        help="capture filter in libpcap's language, compiled by libpcap ('' for none); "
        "default: 'tcp port P or ...' on the broker ports, built in (no libpcap needed)",
    )
    live.add_argument("--format", choices=["text", "jsonl"], default="text")
    live.add_argument(
        "--fields",
        action="store_true",
        help="jsonl: fill the frames' `fields` column (every field of each command as JSON)",
    )
    live.add_argument(
        "--table",
        action="append",
        default=[],
        choices=list(TABLES),
        help="jsonl: print this table's rows (repeatable; default: every table)",
    )
    live.add_argument("--topic", action="append", default=[], help="print only rows of this topic")
    live.add_argument("--command", action="append", default=[], help="print only this command")
    live.add_argument(
        "--conn", type=_count, action="append", default=[], help="print only this conn"
    )
    _secrets_argument(live)
    live.add_argument("-w", "--write", metavar="PATH", help="also write the packets as pcap")
    live.add_argument(
        "-C",
        dest="rotate_size",
        type=_above_zero,
        metavar="MB",
        help="-w: start a new file (PATH1, PATH2, ...) once one exceeds MB million bytes",
    )
    live.add_argument(
        "-G",
        dest="rotate_seconds",
        type=_above_zero,
        metavar="S",
        help="-w: start a new file every S seconds (strftime codes in PATH are expanded)",
    )
    live.add_argument(
        "-W",
        dest="max_files",
        type=_positive,
        metavar="N",
        help="-w with -C/-G: keep the newest N files",
    )
    live.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        help="also write every table as Parquet: DIR/TABLE/part-N.parquet, flushed periodically",
    )
    live.add_argument(
        "--flush-interval",
        type=_above_zero,
        default=5.0,
        metavar="S",
        help="-o: seconds between Parquet parts (what a crash can lose; default 5)",
    )
    live.add_argument("-c", "--count", type=_positive, metavar="N", help="stop after N packets")
    live.add_argument("--duration", type=_above_zero, metavar="S", help="stop after S seconds")
    live.add_argument(
        "-B",
        "--buffer-size",
        type=_positive,
        default=65536,
        metavar="KIB",
        help="kernel capture buffer in KiB (default 65536)",
    )
    live.add_argument(
        "--queue-size",
        type=_positive,
        default=1024,
        metavar="MIB",
        help="packets captured but not yet dissected are held in memory up to MIB (default "
        "1024); beyond it they are still written by -w but skipped by dissection (reported)",
    )
    live.set_defaults(run=cmd_live)


def _decode_arguments(p: argparse.ArgumentParser) -> None:
    """Broker ports and decoding bounds: shared by every command that dissects packets."""
    p.add_argument(
        "--port",
        type=_port,
        action="append",
        default=[],
        help="extra broker port (repeatable; 6650 and 6651 always are)",
    )
    p.add_argument(
        "--tls-port", type=_port, action="append", default=[6651], help="broker port with TLS"
    )
    p.add_argument(
        "--tls-keylog",
        action="append",
        default=[],
        metavar="FILE",
        help="NSS key log (SSLKEYLOGFILE) to decrypt TLS conversations with (repeatable; "
        "live re-reads it as it grows); its contents are never shown",
    )
    p.add_argument(
        "--max-frame-size",
        type=_positive,
        default=DEFAULT_MAX_FRAME_SIZE,
        help=f"largest totalSize accepted (default {DEFAULT_MAX_FRAME_SIZE})",
    )
    p.add_argument(
        "--max-uncompressed",
        type=_count,
        default=DEFAULT_MAX_UNCOMPRESSED,
        help="decompression bound: larger payloads are reported as bombs, not expanded "
        f"(default {DEFAULT_MAX_UNCOMPRESSED})",
    )
    p.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="end a connection after this long without a packet (ended=timeout; a later "
        "packet starts a new one); capture time when reading, the clock when live "
        "(default: never when reading, 300 live; 0: never)",
    )
    p.add_argument(
        "--payload-preview",
        type=_count,
        default=0,
        metavar="N",
        help="messages table: keep the first N bytes of each payload (escaped); off by default",
    )


def _reader_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", metavar="CAPTURE")
    _decode_arguments(p)
    p.add_argument(
        "--series",
        choices=["auto", "digits", "none"],
        default="auto",
        help="how rotated files of one capture point are joined: auto (tcpdump -C names), "
        "digits (names differing only in digits, e.g. -G), none",
    )
    p.add_argument(
        "--no-merge",
        action="store_true",
        help="read captures one after another (as mergecap -a) even when they overlap in "
        "time; by default captures of the same time (several hosts) merge by timestamp",
    )
    p.add_argument(
        "--s3-endpoint",
        metavar="URL",
        help="S3 endpoint other than AWS for s3:// captures, e.g. http://127.0.0.1:9000 "
        "(default: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL)",
    )


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong, and where help is), exit 2,
    and options are never abbreviated (`--top` must not silently mean `--topic`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pulsar-dissect",
        description="Decode Apache Pulsar binary-protocol traffic into frames and tables.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {importlib.metadata.version(_DIST)}"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    stream = sub.add_parser(
        "stream",
        help="decode raw one-direction TCP byte streams (e.g. Wireshark 'Follow TCP stream' raw)",
    )
    stream.add_argument("files", nargs="+", metavar="FILE")
    stream.add_argument("--format", choices=["text", "jsonl"], default="text")
    stream.add_argument(
        "--direction", choices=[d.value for d in Direction], default=Direction.CLIENT_TO_BROKER
    )
    stream.add_argument(
        "--mid-stream",
        action="store_true",
        help="the file does not start at a frame boundary: resynchronise first",
    )
    stream.add_argument(
        "--max-frame-size",
        type=_positive,
        default=DEFAULT_MAX_FRAME_SIZE,
        help=f"largest totalSize accepted (default {DEFAULT_MAX_FRAME_SIZE})",
    )
    _secrets_argument(stream)
    stream.set_defaults(run=cmd_stream)

    read = sub.add_parser("read", help="dissect pcap / pcapng captures (gzip too)")
    _reader_arguments(read)
    read.add_argument(
        "--table",
        choices=sorted(TABLES),
        action="append",
        default=[],
        help="write this table (repeatable; several need -o FOLDER)",
    )
    read.add_argument(
        "--format",
        choices=["text", *FORMATS],
        default="text",
        help="text view, or a table format (default: told by -o's suffix; parquet for a folder)",
    )
    read.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="a table's file (default: stdout), or a folder: every table (or each --table) as "
        "FOLDER/TABLE.EXT",
    )
    _jobs_argument(read)
    read.add_argument("--topic", action="append", default=[], help="only rows of this topic")
    read.add_argument(
        "--command", action="append", default=[], help="only frames (or pairs) of this command"
    )
    read.add_argument("--conn", type=_count, action="append", default=[], help="only this conn_id")
    read.add_argument("--since", help="only rows at or after this time (ISO 8601 or Unix s)")
    read.add_argument("--until", help="only rows before this time (ISO 8601 or Unix s)")
    read.add_argument(
        "-Y",
        "--filter",
        metavar="EXPR",
        help="only rows (text view: frames) for which EXPR is true: a SQL condition on the "
        "table's columns, e.g. \"command = 'SEND' AND topic LIKE '%%orders%%'\"; Wireshark's "
        "&& || ! == contains and durations (10ms, as microseconds) work too. "
        "`pulsar-dissect fields` lists the columns",
    )
    read.add_argument(
        "--columns", metavar="A,B,C", help="only these columns of the table, in this order"
    )
    read.add_argument(
        "-c",
        "--count",
        type=_positive,
        metavar="N",
        help="stop after N frame lines (text view) or N rows of each table",
    )
    read.add_argument(
        "-t",
        dest="time_format",
        choices=TIME_FORMATS,
        default="r",
        help="text view time, as tshark: r relative to the first packet (default), d delta "
        "from the previous line, a / ad local time of day / with date, u / ud the same in UTC, "
        "e epoch seconds",
    )
    read.add_argument(
        "-w",
        dest="write",
        metavar="OUT.pcap",
        help="write the packets (every TCP segment, handshake included) of the connections "
        "with a frame the filters keep (--topic, --command, --conn, --since, -Y; every "
        "connection without them) to a pcap file Wireshark opens",
    )
    read.add_argument(
        "-V",
        dest="verbose",
        action="store_true",
        help="text view: every decoded field of each frame under its line, as a tree",
    )
    read.add_argument(
        "--fields",
        action="store_true",
        help="fill the frames table's `fields` column: every field of each command as JSON "
        "(auth data redacted); it costs about as much as the rest of the row, so it is null "
        "unless asked for (naming it in --columns or -Y asks too)",
    )
    read.add_argument(
        "-x",
        dest="hexdump",
        action="store_true",
        help="text view: the bytes of each frame (size field to payload) in hex under its "
        "line, as tshark -x (authentication data shown as ** unless --show-secrets)",
    )
    _secrets_argument(read)
    read.set_defaults(run=cmd_read)

    summary = sub.add_parser(
        "summary", help="per-connection overview, latency percentiles, errors, unanswered"
    )
    _reader_arguments(summary)
    summary.add_argument("--format", choices=["text", "json"], default="text")
    summary.add_argument(
        "--top", type=_count, default=TOP, metavar="N", help=f"connections listed (default {TOP})"
    )
    summary.add_argument(
        "--all", action="store_true", help="list every connection (not only the --top busiest)"
    )
    _jobs_argument(summary)
    summary.set_defaults(run=cmd_summary)

    fields = sub.add_parser("fields", help="list every table's columns with their descriptions")
    fields.add_argument("tables", nargs="*", metavar="TABLE", help=f"of {', '.join(TABLES)}")
    fields.add_argument("--format", choices=["text", "json"], default="text")
    fields.set_defaults(run=cmd_fields)

    sql = sub.add_parser(
        "sql",
        help="run a SQL query (DuckDB) over the captures' tables, named frames, messages, ...",
    )
    _reader_arguments(sql)
    sql.add_argument("query", help='e.g. "SELECT command, count(*) FROM frames GROUP BY 1"')
    sql.add_argument("--format", choices=["text", *FORMATS], default="text")
    sql.add_argument("-o", "--output", metavar="PATH", help="the result's file (default: stdout)")
    _jobs_argument(sql)
    sql.set_defaults(run=cmd_sql)

    report = sub.add_parser(
        "report", help="one self-contained HTML page per capture: overview, ladders, plots"
    )
    _reader_arguments(report)
    report.add_argument("-o", "--output", required=True, metavar="NAME.html")
    _jobs_argument(report)
    report.set_defaults(run=cmd_report)

    fleet = sub.add_parser("spark", help="fleet job: captures -> Parquet tables + summary")
    _reader_arguments(fleet)
    fleet.add_argument(
        "-o", "--output", required=True, help="output folder: a path or s3://, gs://, hdfs:// URI"
    )
    fleet.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    fleet.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, repeatable (e.g. spark.archives=venv.tar.gz#environment); "
        "executors run this Python unless spark.pyspark.python says otherwise",
    )
    fleet.set_defaults(run=cmd_spark)

    live = sub.add_parser(
        "live",
        help="sniff an interface and dissect its Pulsar traffic as it happens "
        "(root or CAP_NET_RAW); Ctrl-C or SIGTERM stops it with a summary",
    )
    _live_arguments(live)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: the exit status (0, 1 as documented, 2 for an error, 130 for Ctrl-C)."""
    try:
        code = _main(argv)
    except SystemExit as exc:  # argparse's own exit: --help, or a usage error (one line)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    return _flushed(code)


def _flushed(code: int) -> int:
    """Standard output flushed now, while an error can still be told: a write that fails
    (a full disk) is one line and exit 2, never a silent exit at the interpreter's end."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        # the interpreter flushes again on its way out: let that one go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if isinstance(exc, BrokenPipeError):
            return code
        print(f"pulsar-dissect: standard output: cannot write: {os_reason(exc)}", file=sys.stderr)
        return 2
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "captures", None):  # `-` reads standard output of another tool
        args.captures = ["/dev/stdin" if c == "-" else c for c in args.captures]
    try:
        if getattr(args, "tls_keylog", None):
            check_keylogs(args.tls_keylog)
        if getattr(args, "captures", None):
            # globs and directories, local or in object storage, then every input checked
            # before any output
            args.captures = expand_captures(args.captures, args.s3_endpoint)
            check_captures(args.captures, args.s3_endpoint)
        outputs = [None, getattr(args, "output", None), getattr(args, "write", None)]
        refuse_overwrite(_inputs(args), [o for o in outputs if isinstance(o, str) or o is None])
        return int(args.run(args, sys.stdout))
    except BrokenPipeError:
        # Output piped into `head`: not an error. Point stdout at devnull so that the
        # interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except DissectorError as exc:
        print(f"pulsar-dissect: {printable(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pulsar-dissect: {printable(describe_os_error(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: outputs were removed on the way out (TableWriter)
        print("pulsar-dissect: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
