"""EDGE: `pulsar-dissect summary`: the captures' overview.

Input: the parsed arguments of `summary` and the captures they name.
Output: the busiest connections, latency percentiles per command and per subscription
(journeys), errors, as text or JSON.
Rule: frames and messages are counted, not kept: memory does not grow with the capture.
The journeys table costs a joiner over every frame (docs/journeys.md; with -j, one more
worker reading every connection): --no-journeys reads without it. --hdr-out DIR also writes
an HdrHistogram percentile distribution per latency kind (dissector.frontends.hdr), its
folder made (or refused) before the read starts.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from dissector.frontends.cli.options import (
    Subcommands,
    jobs_argument,
    print_hint,
    reader_arguments,
    reader_options,
    stream_tables,
    whole,
)
from dissector.frontends.summary import SUMMARY_TABLES, TOP, Summary, render

if TYPE_CHECKING:
    import pyarrow as pa


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    """Overview, the busiest connections, latency percentiles per command, errors."""
    summary = Summary(None if args.all else args.top, journeys=not args.no_journeys)
    # frames and messages are counted, not made (the messages still are extracted: their
    # anomalies are the summary's too).
    options = reader_options(args)
    tables = [t for t in SUMMARY_TABLES if t != "journeys" or not args.no_journeys]
    sink = summary.add
    if args.hdr_out is not None:
        from dissector.frontends import hdr

        folder = hdr.prepare(args.hdr_out)  # a bad folder fails before the read
        recorder = hdr.HdrRecorder()

        def sink(table: str, batch: pa.RecordBatch) -> None:
            summary.add(table, batch)
            recorder.add(table, batch)

    counts = stream_tables(args, options, tables, sink)
    summary.frames, summary.messages = counts.rows["frames"], counts.rows["messages"]
    print_hint(counts, options)
    if args.hdr_out is not None:
        recorder.write(folder)
        for line in recorder.warnings():
            print(f"pulsar-dissect: {line}", file=sys.stderr)
    result = summary.result()
    if args.format == "json":
        out.write(json.dumps(result, indent=1) + "\n")
    else:
        out.write(render(result))
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `summary` command's arguments."""
    summary = sub.add_parser(
        "summary", help="per-connection overview, latency percentiles, errors, unanswered"
    )
    reader_arguments(summary)
    summary.add_argument("--format", choices=["text", "json"], default="text")
    summary.add_argument(
        "--top", type=whole, default=TOP, metavar="N", help=f"connections listed (default {TOP})"
    )
    summary.add_argument(
        "--all", action="store_true", help="list every connection (not only the --top busiest)"
    )
    summary.add_argument(
        "--no-journeys",
        action="store_true",
        help="skip the per-subscription section (the journeys table: its joiner reads every "
        "frame, 1.5 to 2 times the summary's CPU time on busy captures)",
    )
    summary.add_argument(
        "--hdr-out",
        metavar="DIR",
        help="also write HdrHistogram percentile distributions (KIND.hgrm, in ms, as pulsar-perf "
        "writes them) to DIR: request-COMMAND, publish, dispatch, end_to_end",
    )
    jobs_argument(summary)
    summary.set_defaults(run=cmd_summary)
