"""EDGE: `pulsar-dissect summary`: the captures' overview.

Input: the parsed arguments of `summary` and the captures they name.
Output: the busiest connections, latency percentiles per command and per subscription
(journeys), errors, as text or JSON; or the captures' metrics (docs/metrics.md) as one
scrape's worth of exposition text: `--format openmetrics` (OpenMetrics 1.0, `# EOF` last) or
`--format prometheus` (the Prometheus text format 0.0.4, what node_exporter's textfile
collector reads: it types a counter by its `# TYPE` name, which OpenMetrics writes without
`_total`).
Rule: frames and messages are counted, not kept: memory does not grow with the capture.
The metrics are read by one process (their facts are events that -j workers do not hand
back; the journeys and findings they need are read by one process with -j anyway).
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
from dissector.frontends.progress import ReadProgress
from dissector.frontends.summary import SUMMARY_TABLES, TOP, Summary, render
from dissector.read.inputs import capture_bytes

#: The metrics' formats: name -> OpenMetrics (else the Prometheus text format 0.0.4).
METRIC_FORMATS = {"openmetrics": True, "prometheus": False}


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    """Overview, the busiest connections, latency percentiles per command, errors."""
    if args.format in METRIC_FORMATS:
        return _metrics(args, out)
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


def _metrics(args: argparse.Namespace, out: TextIO) -> int:
    """The captures' metrics as exposition text (one process: see the module rule)."""
    from dissector.metrics.openmetrics import render as exposition
    from dissector.read.metrics import read_metrics

    options = reader_options(args)
    total = capture_bytes(args.captures, options.s3_endpoint)
    with ReadProgress(total, threaded=True) as progress:
        snapshot, counts = read_metrics(
            args.captures, options, progress=progress.counter, journeys=not args.no_journeys
        )
    print_hint(counts, options)
    text = exposition(snapshot, openmetrics=METRIC_FORMATS[args.format], live=False)
    out.write(text.decode())
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `summary` command's arguments."""
    summary = sub.add_parser(
        "summary", help="per-connection overview, latency percentiles, errors, unanswered"
    )
    reader_arguments(summary)
    summary.add_argument(
        "--format",
        choices=["text", "json", *METRIC_FORMATS],
        default="text",
        help="text, json, or the metrics (docs/metrics.md): openmetrics (OpenMetrics 1.0) or "
        "prometheus (text format 0.0.4, for node_exporter's textfile collector); the metrics "
        "are read by one process whatever -j says",
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
    summary.set_defaults(run=cmd_summary)
