"""EDGE: `pulsar-dissect summary`: the captures' overview.

Input: the parsed arguments of `summary` and the captures they name.
Output: the busiest connections, latency percentiles per command and per subscription
(journeys), errors, as text or JSON.
Rule: frames and messages are counted, not kept: memory does not grow with the capture.
The journeys table costs a joiner over every frame (docs/journeys.md; with -j, one more
worker reading every connection): --no-journeys reads without it.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

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


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    """Overview, the busiest connections, latency percentiles per command, errors."""
    summary = Summary(None if args.all else args.top, journeys=not args.no_journeys)
    # frames and messages are counted, not made (the messages still are extracted: their
    # anomalies are the summary's too).
    options = reader_options(args)
    tables = [t for t in SUMMARY_TABLES if t != "journeys" or not args.no_journeys]
    counts = stream_tables(args, options, tables, summary.add)
    summary.frames, summary.messages = counts.rows["frames"], counts.rows["messages"]
    print_hint(counts, options)
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
    jobs_argument(summary)
    summary.set_defaults(run=cmd_summary)
