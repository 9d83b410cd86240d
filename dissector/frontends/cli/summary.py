"""EDGE: `pulsar-dissect summary`: the captures' overview.

Input: the parsed arguments of `summary` and the captures they name.
Output: the busiest connections, latency percentiles per command and per subscription
(journeys), errors, as text or JSON; or the read's metrics as one OTLP JSON line
(--format otlp), and pushed to an OpenTelemetry collector (--otlp-endpoint).
Rule: frames and messages are counted, not kept: memory does not grow with the capture.
The journeys table costs a joiner over every frame (docs/journeys.md; with -j, one more
worker reading every connection): --no-journeys reads without it.
"""

from __future__ import annotations

import argparse
import json
import sys
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
from dissector.frontends.cli.otlp import otlp_arguments, otlp_out
from dissector.frontends.summary import SUMMARY_TABLES, TOP, Summary, render
from dissector.read.options import ReaderOptions


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    """Overview, the busiest connections, latency percentiles per command, errors."""
    if args.format == "otlp" or args.otlp_endpoint is not None:
        return _otlp(args, reader_options(args), out)
    return _summary(args, out)


def _summary(args: argparse.Namespace, out: TextIO) -> int:
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


def _otlp(args: argparse.Namespace, options: ReaderOptions, out: TextIO) -> int:
    """The read's metrics as one OTLP JSON line (--format otlp) and pushed to a collector
    (--otlp-endpoint); with another --format, the summary is printed as well."""
    from dissector.metrics.feed import metrics_of
    from dissector.metrics.otlp import export_line, resource_attributes

    resource = resource_attributes(captures=args.captures)
    sink = otlp_out(args, resource, sys.stderr)  # before the read: a bad file fails now
    try:
        snapshot = metrics_of(args.captures, options)
        if sink is not None:
            line = sink.export(snapshot)  # pushed while the summary (if any) reads
        else:
            from dissector.frontends.otlp_metrics import version

            line = export_line(snapshot, resource, version())
        if args.format == "otlp":
            out.write(line.decode())
            return 0
        return _summary(args, out)
    finally:
        if sink is not None:
            sink.close()


def add_parser(sub: Subcommands) -> None:
    """The `summary` command's arguments."""
    summary = sub.add_parser(
        "summary", help="per-connection overview, latency percentiles, errors, unanswered"
    )
    reader_arguments(summary)
    summary.add_argument(
        "--format",
        choices=["text", "json", "otlp"],
        default="text",
        help="otlp: the metrics of the read as one OTLP JSON line (docs/otlp-metrics.md)",
    )
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
    otlp_arguments(summary, live=False)
    summary.set_defaults(run=cmd_summary)
