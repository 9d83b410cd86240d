"""EDGE: the text view of `pulsar-dissect read`: one line per frame, as tshark prints packets.

Input: the parsed arguments of `read` (no --table, no -o) and the row filter.
Output: frame lines (anomalies inline; --values: each message's value under its frame) on
stdout; -V a tree of fields, -x the bytes.
Rule: -Y is judged on the frames table's rows (with --values, a -Y naming `value` on the
messages table's: a frame shows when one of its messages matches), a batch (BATCH_ROWS) of
held lines at a time, so memory stays bounded; -c N stops after N frame lines.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from typing import TextIO

from dissector.errors import UsageError
from dissector.events import AppMessage, Frame
from dissector.frontends.cli.options import print_hint, reader_options
from dissector.frontends.expressions import RowFilter
from dissector.frontends.text import FrameLines
from dissector.read.inputs import first_packet_time
from dissector.read.plan import TEXT, plan_read
from dissector.read.runs import iter_events
from dissector.read.tables import ReadCounts, make_builder
from dissector.tables.builders import BATCH_ROWS
from dissector.tables.filters import Filter
from dissector.tables.schema import TABLES

#: a -Y that names the value column (or a field of it: value.a.b)
_VALUE = re.compile(r"(?<![\w.])value\b(?!_)")


def text_view(args: argparse.Namespace, out: TextIO, rows: Filter) -> int:
    """One line per frame (anomalies inline), as tshark prints packets; -Y keeps the frames
    whose frames-table row matches (their lines only), -c N stops after N frame lines."""
    options = reader_options(args)
    if args.columns:
        raise UsageError("--columns chooses table columns: give --table (or -o)")
    lines = FrameLines(
        rows,
        show_secrets=args.show_secrets,
        time_format=args.time_format,
        verbose=args.verbose,
        hexdump=args.hexdump,
        hide_payloads=bool(options.redact_fields),
    )
    first = first_packet_time(args.captures, options)
    if first is not None:
        lines.start(first)
    # -Y naming the value (--values) is judged on the messages table: a frame shows when one
    # of its messages matches; any other -Y on the frames table
    table = (
        "messages" if options.values and args.filter and _VALUE.search(args.filter) else "frames"
    )
    where = RowFilter(args.filter, table, TABLES[table].schema) if args.filter else None
    other: Counter[int] = Counter()
    frames = printed = 0
    plan = plan_read(options, [table] if where is not None else None, TEXT)
    builder = make_builder(plan, options) if where is not None else None
    held: list[str | None] = []  # -Y: frame lines waiting for their rows to be judged
    rows_of: list[int] = []  # -Y on messages: the message rows of each held frame

    def judge() -> int:
        """Print the held lines whose frames match -Y; how many were printed."""
        assert builder is not None and where is not None
        made = builder.frames if table == "frames" else builder.messages
        assert made is not None
        made.flush()
        keep: list[bool] = []
        for batch in made.take():
            keep += where.mask(batch).to_pylist()
        if table == "messages":  # a frame matches when one of its messages does
            at, matched = 0, []
            for n in rows_of:
                matched.append(any(keep[at : at + n]))
                at += n
            keep = matched
            rows_of.clear()
        shown = 0
        for line, ok in zip(held, keep, strict=True):
            if ok and line is not None and (args.count is None or printed + shown < args.count):
                out.write(line)
                shown += 1
        held.clear()
        return shown

    for _, ev in iter_events(args.captures, options, other, plan=plan):  # `!` lines: payloads
        is_frame = type(ev) is Frame
        frames += is_frame
        text = lines.line(ev)
        if builder is not None:
            builder.add(ev)
            if is_frame:
                held.append(text)
                rows_of.append(0)
                if len(held) >= BATCH_ROWS:
                    printed += judge()
            elif type(ev) is AppMessage:
                if not held:  # a message the connection's end made: no line of its own
                    held.append(None)
                    rows_of.append(0)
                rows_of[-1] += 1
                if text is not None and held[-1] is not None:
                    held[-1] += text  # a value line goes with its frame's line
        elif text is not None:
            out.write(text)
            printed += is_frame
        if args.count is not None and printed >= args.count:
            break
    if builder is not None and held:
        printed += judge()
    print_hint(ReadCounts(Counter({"frames": frames}), other), options)
    return 0
