"""EDGE: `pulsar-dissect live`: an interface sniffed and its Pulsar traffic dissected.

Input: the parsed arguments of `live`.
Output: frame lines or table rows on stdout as they happen; optional pcap and Parquet files;
with --metrics, an OpenMetrics / Prometheus endpoint while it runs; with --otlp-out or
--otlp-endpoint, OpenTelemetry metrics (an OTLP JSON line per flush interval, to a file or a
collector).
Rule: scapy is imported only when capturing, prometheus_client only with --metrics; a
connection idle for LIVE_IDLE_TIMEOUT ends.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from dissector.frontends.cli.options import (
    Subcommands,
    above_zero,
    decode_arguments,
    positive,
    reader_options,
    row_filter,
    secrets_argument,
    threshold_arguments,
    whole,
)
from dissector.frontends.cli.otlp import otlp_arguments
from dissector.tables.schema import TABLES

#: Seconds without a packet after which live capture ends a connection (Zeek's default).
LIVE_IDLE_TIMEOUT = 300.0


def cmd_live(args: argparse.Namespace, out: TextIO) -> int:
    """Sniff an interface and dissect its Pulsar traffic as it happens."""
    from dissector.frontends.live import fanout, loop  # scapy: only when capturing
    from dissector.frontends.live.options import LiveOptions

    metrics = None
    if args.metrics is not None:
        from dissector.metrics.serve import parse_address

        metrics = parse_address(args.metrics)
    options = LiveOptions(
        interface=args.interface,
        bpf=args.filter,
        reader=reader_options(args),
        fmt=args.format,
        tables=tuple(args.table) or None,
        rows=row_filter(args),
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
        findings=args.findings,
        jobs=args.jobs,
        hdr_out=args.hdr_out,
        metrics=metrics,
        otlp_out=args.otlp_out,
        otlp_endpoint=args.otlp_endpoint,
        otlp_timeout=args.otlp_timeout,
        otlp_headers=tuple(args.otlp_header),
        otlp_gzip=args.otlp_compression == "gzip",
    )
    if options.jobs > 1:
        return fanout.run(options, out, sys.stderr)
    return loop.run(options, out, sys.stderr)


def add_parser(sub: Subcommands) -> None:
    """The `live` command's arguments."""
    live = sub.add_parser(
        "live",
        help="sniff an interface and dissect its Pulsar traffic as it happens "
        "(root or CAP_NET_RAW); Ctrl-C or SIGTERM stops it with a summary",
    )
    _live_arguments(live)


def _live_arguments(live: argparse.ArgumentParser) -> None:
    live.add_argument("-i", "--interface", help="interface to sniff (default: the default route's)")
    decode_arguments(live)
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
        "--conn", type=whole, action="append", default=[], help="print only this conn"
    )
    secrets_argument(live)
    live.add_argument("-w", "--write", metavar="PATH", help="also write the packets as pcap")
    live.add_argument(
        "-C",
        dest="rotate_size",
        type=above_zero,
        metavar="MB",
        help="-w: start a new file (PATH1, PATH2, ...) once one exceeds MB million bytes",
    )
    live.add_argument(
        "-G",
        dest="rotate_seconds",
        type=above_zero,
        metavar="S",
        help="-w: start a new file every S seconds (strftime codes in PATH are expanded)",
    )
    live.add_argument(
        "-W",
        dest="max_files",
        type=positive,
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
        "--hdr-out",
        metavar="DIR",
        help="at stop, write HdrHistogram percentile distributions (KIND.hgrm, in ms, as "
        "pulsar-perf writes them) to DIR: request-COMMAND, publish, dispatch, end_to_end",
    )
    live.add_argument(
        "--flush-interval",
        type=above_zero,
        default=5.0,
        metavar="S",
        help="-o: seconds between Parquet parts (what a crash can lose; default 5)",
    )
    live.add_argument(
        "-j",
        "--jobs",
        type=positive,
        default=1,
        metavar="N",
        help="dissect in N processes, each capturing its share of the connections (the "
        "kernel's packet fan-out by flow: both directions of a connection go to one); lines "
        "of the processes are merged as they come, connection ids are numbered per process "
        "(process K from K*1e9+1), the summary adds them up; not with -w or -c (default 1)",
    )
    live.add_argument("-c", "--count", type=positive, metavar="N", help="stop after N packets")
    live.add_argument("--duration", type=above_zero, metavar="S", help="stop after S seconds")
    live.add_argument(
        "-B",
        "--buffer-size",
        type=positive,
        default=65536,
        metavar="KIB",
        help="kernel capture buffer in KiB (default 65536)",
    )
    live.add_argument(
        "--queue-size",
        type=positive,
        default=1024,
        metavar="MIB",
        help="packets captured but not yet dissected are held in memory up to MIB (default "
        "1024); beyond it they are still written by -w but skipped by dissection (reported)",
    )
    live.add_argument(
        "--findings",
        action="store_true",
        help="print a line for each finding (dissector.findings) as soon as it is established "
        "(a SEND unanswered past --send-timeout, a consumer without permits, ...), and again "
        "when its row is complete",
    )
    live.add_argument(
        "--metrics",
        metavar="[HOST:]PORT",
        help="serve Prometheus / OpenMetrics metrics of the traffic while capturing: "
        "http://HOST:PORT/metrics (the format the scraper's Accept header asks for) and "
        "/health; HOST defaults to 127.0.0.1 (loopback only): give 0.0.0.0:PORT or "
        "[::]:PORT to be scraped from elsewhere; PORT 0 takes a free one (the listening "
        "line says which); families: docs/metrics.md",
    )
    otlp_arguments(live, live=True)
    threshold_arguments(live)
    live.set_defaults(run=cmd_live)
