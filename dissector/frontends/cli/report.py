"""EDGE: `pulsar-dissect report`: one self-contained HTML page of the captures.

Input: the parsed arguments of `report`: captures and NAME.html.
Output: the page, written whole under its name; one line saying where, on stdout.
Rule: the output must be named .html or .htm (it is a page, whatever else it is called).
--no-journeys reads without the journeys table (its joiner's cost; docs/journeys.md).
"""

from __future__ import annotations

import argparse
from typing import TextIO

from dissector.errors import UsageError
from dissector.frontends.cli.options import (
    Subcommands,
    jobs_argument,
    print_hint,
    reader_arguments,
    reader_options,
    stream_tables,
)
from dissector.frontends.terminal import printable
from dissector.tables.output import hidden_file


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    """One self-contained HTML page of the captures: overview, ladders, latency, throughput,
    producers and consumers, anomalies."""
    from dissector.frontends.report import REPORT_TABLES, Report

    if not args.output.endswith((".html", ".htm")):
        raise UsageError(f"{args.output}: the report is an HTML page: name it NAME.html")
    report = Report([str(c) for c in args.captures], journeys=not args.no_journeys)
    options = reader_options(args)
    tables = [t for t in REPORT_TABLES if t != "journeys" or report.journeys]
    counts = stream_tables(args, options, tables, report.add)
    page = report.html()
    with hidden_file(args.output) as f:
        f.write(page.encode("utf-8"))
    print_hint(counts, options)
    out.write(printable(f"report written to {args.output} ({len(page) // 1024} KiB)") + "\n")
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `report` command's arguments."""
    report = sub.add_parser(
        "report", help="one self-contained HTML page per capture: overview, ladders, plots"
    )
    reader_arguments(report)
    report.add_argument("-o", "--output", required=True, metavar="NAME.html")
    report.add_argument(
        "--no-journeys",
        action="store_true",
        help="skip the Subscriptions section (the journeys table: its joiner reads every "
        "frame, about 1.4 times the report's CPU time on busy captures)",
    )
    jobs_argument(report)
    report.set_defaults(run=cmd_report)
