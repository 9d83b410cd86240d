"""EDGE: `pulsar-dissect summary`: the captures' overview.

Input: the parsed arguments of `summary` and the captures they name.
Output: the busiest connections, latency percentiles per command and per subscription
(journeys), errors, as text or JSON; or the captures' metrics (docs/metrics.md) as one
scrape's worth of exposition text: `--format openmetrics` (OpenMetrics 1.0, `# EOF` last) or
`--format prometheus` (the Prometheus text format 0.0.4, what node_exporter's textfile
collector reads: it types a counter by its `# TYPE` name, which OpenMetrics writes without
`_total`); or as one OpenTelemetry request, OTLP JSON (`--format otlp`), and pushed to an
OpenTelemetry collector (`--otlp-endpoint`: docs/otlp-metrics.md).
Rule: frames and messages are counted, not kept: memory does not grow with the capture.
The metrics are read by one process (their facts are events that -j workers do not hand
back; the journeys and findings they need are read by one process with -j anyway).
The journeys table costs a joiner over every frame (docs/journeys.md; with -j, one more
worker reading every connection): --no-journeys reads without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
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
from dissector.frontends.cli.otlp import otlp_arguments, otlp_out
from dissector.frontends.progress import ReadProgress
from dissector.frontends.summary import SUMMARY_TABLES, TOP, Summary, render
from dissector.read.inputs import capture_bytes
from dissector.read.tables import ReadCounts
from dissector.tables.builders import Sink

if TYPE_CHECKING:
    import pyarrow as pa

    from dissector.metrics.store import Snapshot

#: The metrics' formats: name -> OpenMetrics (else the Prometheus text format 0.0.4).
METRIC_FORMATS = {"openmetrics": True, "prometheus": False}


def cmd_summary(args: argparse.Namespace, out: TextIO) -> int:
    """Overview, the busiest connections, latency percentiles per command, errors."""
    if args.format == "otlp" or args.format in METRIC_FORMATS or args.otlp_endpoint:
        return _metrics(args, out)
    summary = Summary(None if args.all else args.top, journeys=not args.no_journeys)
    # frames and messages are counted, not made (the messages still are extracted: their
    # anomalies are the summary's too).
    options = reader_options(args)
    sink, done = _hdr(args, summary.add)
    counts = stream_tables(args, options, _tables(args), sink)
    _print(args, summary, counts, out)
    done()
    return 0


def _hdr(args: argparse.Namespace, sink: Sink) -> tuple[Sink, Callable[[], None]]:
    """With --hdr-out: `sink` also recording the latencies of the timeline and journeys
    batches, and what writes their .hgrm files after the read (the folder is made, or
    refused, before it); without: `sink` and nothing to do."""
    if args.hdr_out is None:
        return sink, lambda: None
    from dissector.frontends import hdr

    folder = hdr.prepare(args.hdr_out)  # a bad folder fails before the read
    recorder = hdr.HdrRecorder()

    def both(table: str, batch: pa.RecordBatch) -> None:
        sink(table, batch)
        recorder.add(table, batch)

    def done() -> None:
        recorder.write(folder)
        for line in recorder.warnings():
            print(f"pulsar-dissect: {line}", file=sys.stderr)

    return both, done


def _tables(args: argparse.Namespace) -> list[str]:
    return [t for t in SUMMARY_TABLES if t != "journeys" or not args.no_journeys]


def _print(args: argparse.Namespace, summary: Summary, counts: ReadCounts, out: TextIO) -> None:
    summary.frames, summary.messages = counts.rows["frames"], counts.rows["messages"]
    print_hint(counts, reader_options(args))
    result = summary.result()
    if args.format == "json":
        out.write(json.dumps(result, indent=1) + "\n")
    else:
        out.write(render(result))


def _read_metrics(
    args: argparse.Namespace, tables: Sequence[str] = (), sink: Sink | None = None
) -> tuple[Snapshot, ReadCounts]:
    """The captures' metrics, and `tables` for `sink` from the same read (one process:
    see the module rule)."""
    from dissector.read.metrics import read_metrics

    options = reader_options(args)
    total = capture_bytes(args.captures, options.s3_endpoint)
    with ReadProgress(total, threaded=True) as progress:
        return read_metrics(
            args.captures,
            options,
            tables,
            sink,
            progress=progress.counter,
            journeys=not args.no_journeys,
        )


def _metrics_text(args: argparse.Namespace, snapshot: Snapshot) -> bytes:
    """The snapshot as --format asks: exposition text or one OTLP JSON line."""
    from dissector.frontends.otlp_metrics import version
    from dissector.metrics.openmetrics import render as exposition
    from dissector.metrics.otlp import export_line, resource_attributes

    if args.format == "otlp":
        return export_line(snapshot, resource_attributes(captures=args.captures), version())
    return exposition(snapshot, openmetrics=METRIC_FORMATS[args.format], live=False)


def _metrics(args: argparse.Namespace, out: TextIO) -> int:
    """The read's metrics pushed to a collector (--otlp-endpoint), and printed as --format
    asks: as metrics (otlp, openmetrics, prometheus), or the summary made of the same read."""
    from dissector.metrics.otlp import resource_attributes

    push = otlp_out(args, resource_attributes(captures=args.captures), sys.stderr)
    try:
        if args.format == "otlp" or args.format in METRIC_FORMATS:
            sink, done = _hdr(args, lambda table, batch: None)
            hdr_tables = [t for t in ("timeline", "journeys") if t in _tables(args)]
            snapshot, counts = _read_metrics(args, hdr_tables if args.hdr_out else (), sink)
            print_hint(counts, reader_options(args))
            done()
            if push is not None:
                push.export(snapshot)
            out.write(_metrics_text(args, snapshot).decode())
            return 0
        summary = Summary(None if args.all else args.top, journeys=not args.no_journeys)
        sink, done = _hdr(args, summary.add)
        snapshot, counts = _read_metrics(args, _tables(args), sink)
        if push is not None:
            push.export(snapshot)  # sent while the summary is printed
        _print(args, summary, counts, out)
        done()
        return 0
    finally:
        if push is not None:
            push.close()  # waits at most --otlp-timeout


def add_parser(sub: Subcommands) -> None:
    """The `summary` command's arguments."""
    summary = sub.add_parser(
        "summary", help="per-connection overview, latency percentiles, errors, unanswered"
    )
    reader_arguments(summary)
    summary.add_argument(
        "--format",
        choices=["text", "json", *METRIC_FORMATS, "otlp"],
        default="text",
        help="text, json, or the metrics (docs/metrics.md): openmetrics (OpenMetrics 1.0) or "
        "prometheus (text format 0.0.4, for node_exporter's textfile collector), or otlp (one "
        "OTLP JSON line: docs/otlp-metrics.md); the metrics are read by one process whatever "
        "-j says",
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
    summary.add_argument(
        "--hdr-out",
        metavar="DIR",
        help="also write HdrHistogram percentile distributions (KIND.hgrm, in ms, as pulsar-perf "
        "writes them) to DIR: request-COMMAND, publish, dispatch, end_to_end",
    )
    jobs_argument(summary)
    otlp_arguments(summary, live=False)
    summary.set_defaults(run=cmd_summary)
