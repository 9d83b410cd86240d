"""EDGE: `pulsar-dissect read`: captures dissected into tables (or the text view).

Input: the parsed arguments of `read` and the captures they name.
Output: tables in a file format on stdout, in a file or in a folder; packets with -w.
Rule: every output is complete before it gets its name; on any failure none is left
(a folder this run made goes too). -c N stops the read once every table has N rows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from dissector.errors import DissectorError, OutputError, UsageError, os_reason
from dissector.frontends.cli.options import (
    Subcommands,
    inputs,
    jobs_argument,
    positive,
    print_hint,
    reader_arguments,
    reader_options,
    row_filter,
    secrets_argument,
    stream_tables,
    threshold_arguments,
    whole,
)
from dissector.frontends.cli.read_text import text_view
from dissector.frontends.expressions import RowFilter
from dissector.frontends.overwrite_guard import refuse_overwrite
from dissector.frontends.terminal import printable
from dissector.frontends.text import TIME_FORMATS
from dissector.read.tables import ReadCounts
from dissector.tables.filters import Filter
from dissector.tables.output import EXTENSIONS, FORMATS, OTLP, OTLP_EXTENSION, TableWriter
from dissector.tables.schema import TABLES

#: Output file name suffix -> format, when --format is not given.
_FORMAT_OF_SUFFIX = {ext: fmt for fmt, ext in EXTENSIONS.items()}
#: Each format's file name ending (a folder of tables holds NAME.EXT files).
_ENDING = {**EXTENSIONS, OTLP: OTLP_EXTENSION}


def _outputs(args: argparse.Namespace) -> tuple[list[str], str, dict[str, str | None]] | None:
    """The tables to write, their format and each one's path (None: stdout); None for the
    text view. `-o` names a folder (every table, or those given, as FOLDER/TABLE.EXT) when it
    is one, ends with a slash, has no suffix and no --table was given, or several were.
    OTLP spans are made of the journeys table only."""
    plan = _planned(args)
    if plan is not None and plan[1] == OTLP:
        others = [n for n in plan[0] if n != "journeys"]
        if others:
            raise UsageError(
                f"--format otlp: spans are made of the journeys table only, not of "
                f"{', '.join(others)}: give --table journeys"
            )
        if args.columns:
            raise UsageError("--format otlp: the spans need every column: drop --columns")
    return plan


def _planned(args: argparse.Namespace) -> tuple[list[str], str, dict[str, str | None]] | None:
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
        return names, fmt, {n: os.path.join(out, n + _ENDING[fmt]) for n in names}
    if len(tables) > 1:
        raise UsageError("several tables need a folder: -o FOLDER")
    if not tables and args.format == "text" and out is None:
        return None
    fmt = args.format
    if fmt == "text" and out is not None and out.lower().endswith(OTLP_EXTENSION):
        fmt = OTLP
    elif fmt == "text":
        suffix = Path(out).suffix.lower() if out is not None else ".jsonl"
        if suffix not in _FORMAT_OF_SUFFIX:
            raise UsageError(
                f"{out}: cannot tell the format from the name: give --format "
                f"({', '.join((*FORMATS, OTLP))}) or a folder"
            )
        fmt = _FORMAT_OF_SUFFIX[suffix]
    return tables or ["frames"], fmt, {(tables or ["frames"])[0]: out}


class _Enough(Exception):
    """-c N: every table written has its N rows; the read stops early."""


def cmd_read(args: argparse.Namespace, out: TextIO) -> int:
    """Dissect captures: one line per frame, or tables in a file format."""
    rows = row_filter(args)
    plan = _outputs(args)
    if plan is not None:  # the tables of -o FOLDER too, before -w writes anything
        refuse_overwrite(inputs(args), plan[2].values())
    if args.write is not None:
        _export(args, rows)
        if plan is None:  # as tshark -w: the packets are the output
            return 0
    if plan is None:
        return text_view(args, out, rows)
    names, fmt, paths = plan
    if fmt == "parquet" and None in paths.values() and out.isatty():
        raise DissectorError("parquet is binary: give -o PATH or redirect standard output")
    if args.time_format != "r":
        raise UsageError("-t sets the text view's time: tables hold UTC timestamps")
    columns = _columns(args, names)
    where = {n: RowFilter(args.filter, n, TABLES[n].schema) for n in names if args.filter}
    schemas = {n: _selected(TABLES[n].schema, columns) for n in names}
    out.flush()
    options = reader_options(args)
    counts = ReadCounts()
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
            counts = stream_tables(args, options, names, sink)
        except _Enough:
            counts = ReadCounts(Counter({"frames": 1}))  # rows were found: no "no Pulsar" hint
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
    print_hint(counts, reader_options(args))
    return 0


def _export(args: argparse.Namespace, rows: Filter) -> None:
    """-w OUT.pcap: the packets of the connections with a frame the filters keep."""
    from dissector.frontends.export import chosen_connections, write_packets

    where = RowFilter(args.filter, "frames", TABLES["frames"].schema) if args.filter else None

    def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = rows.table(batch)
        return batch if where is None else where.apply(batch)

    options = reader_options(args)
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


def _folder_made(path: str) -> str | None:
    """Make the -o folder (and its parents); its path when this run made it, else None."""
    existed = os.path.isdir(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{path}: cannot make this folder: {os_reason(exc)}") from None
    return None if existed else path


def add_parser(sub: Subcommands) -> None:
    """The `read` command's arguments."""
    read = sub.add_parser("read", help="dissect pcap / pcapng captures (gzip too)")
    reader_arguments(read)
    read.add_argument(
        "--table",
        choices=sorted(TABLES),
        action="append",
        default=[],
        help="write this table (repeatable; several need -o FOLDER)",
    )
    read.add_argument(
        "--format",
        choices=["text", *FORMATS, OTLP],
        default="text",
        help="text view, or a table format (default: told by -o's suffix; parquet for a "
        f"folder); {OTLP}: the journeys table as OpenTelemetry spans, OTLP JSON lines (as the "
        f"OpenTelemetry Collector's file exporter writes them; -o NAME{OTLP_EXTENSION} says it "
        "too): see docs/journeys.md",
    )
    read.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="a table's file (default: stdout), or a folder: every table (or each --table) as "
        "FOLDER/TABLE.EXT",
    )
    jobs_argument(read)
    read.add_argument("--topic", action="append", default=[], help="only rows of this topic")
    read.add_argument(
        "--command", action="append", default=[], help="only frames (or pairs) of this command"
    )
    read.add_argument("--conn", type=whole, action="append", default=[], help="only this conn_id")
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
        type=positive,
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
        "connection without them) to a pcap file Wireshark opens (pcapng when they have "
        "several link types, or when OUT ends in .pcapng)",
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
    secrets_argument(read)
    threshold_arguments(read)
    read.set_defaults(run=cmd_read)
