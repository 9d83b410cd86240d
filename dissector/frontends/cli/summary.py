"""EDGE: `pulsar-dissect summary`: the captures' overview.

Input: the parsed arguments of `summary` and the captures they name.
Output: the busiest connections, latency percentiles per command, errors, as text or JSON.
Rule: frames and messages are counted, not kept: memory does not grow with the capture.
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
    summary = Summary(None if args.all else args.top)
    # frames and messages are counted, not made (the messages still are extracted: their
    # anomalies are the summary's too).
    options = reader_options(args)
    counts = stream_tables(args, options, list(SUMMARY_TABLES), summary.add)
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
    jobs_argument(summary)
    summary.set_defaults(run=cmd_summary)
