"""EDGE: what the commands share: argument types, argument groups, and the reader's settings
and run made from parsed arguments.

Input: an argparse parser to add arguments to, or the parsed arguments.
Output: the arguments added; ReaderOptions, the row Filter, the tables streamed into a sink.
Rule: a bad value is one line naming what was expected (argparse's usage error, exit 2);
every command that dissects packets takes the same decoding arguments, defined once here.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, TypeAlias

from dissector.errors import UsageError
from dissector.findings import THRESHOLDS, Thresholds
from dissector.frontends.progress import ReadProgress
from dissector.frontends.terminal import printable
from dissector.pulsar.decompression import DEFAULT_MAX_UNCOMPRESSED
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.read.inputs import capture_bytes, no_pulsar_hint
from dissector.read.options import ReaderOptions
from dissector.read.parallel import default_jobs, stream_tables_parallel, workers
from dissector.read.tables import ReadCounts
from dissector.tables.builders import Sink
from dissector.tables.filters import Filter, parse_time

#: What `add_subparsers` returns: each command's module adds its parser to it.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def number(
    kind: Callable[[str], float], low: float, high: float, what: str
) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within [low, high], else one line naming `what`."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # NaN fails too
            raise argparse.ArgumentTypeError(f"{what}: {text!r}")
        return value

    return parse


seconds = number(float, 0, sys.float_info.max, "not a number of seconds")
above_zero = number(float, sys.float_info.min, sys.float_info.max, "not a positive number")
tcp_port = number(int, 1, 65535, "not a TCP port (1-65535)")
whole = number(int, 0, sys.maxsize, "not a whole number >= 0")
positive = number(int, 1, sys.maxsize, "not a positive whole number")


def jobs_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-j",
        "--jobs",
        type=positive,
        default=None,
        metavar="N",
        help="worker processes, each dissecting a share of the connections (default: one per "
        "core); rows are those of -j 1, in another order (sort by conn_id to compare)",
    )


def secrets_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--show-secrets", action="store_true", help="print authentication data unredacted"
    )


def max_frame_size_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-frame-size",
        type=positive,
        default=DEFAULT_MAX_FRAME_SIZE,
        help=f"largest totalSize accepted (default {DEFAULT_MAX_FRAME_SIZE})",
    )


def decode_arguments(p: argparse.ArgumentParser) -> None:
    """Broker ports and decoding bounds: shared by every command that dissects packets."""
    p.add_argument(
        "--port",
        type=tcp_port,
        action="append",
        default=[],
        help="extra broker port (repeatable; 6650 and 6651 always are)",
    )
    p.add_argument(
        "--tls-port", type=tcp_port, action="append", default=[6651], help="broker port with TLS"
    )
    p.add_argument(
        "--tls-keylog",
        action="append",
        default=[],
        metavar="FILE",
        help="NSS key log (SSLKEYLOGFILE) to decrypt TLS conversations with (repeatable; "
        "live re-reads it as it grows); its contents are never shown",
    )
    max_frame_size_argument(p)
    p.add_argument(
        "--max-uncompressed",
        type=whole,
        default=DEFAULT_MAX_UNCOMPRESSED,
        help="decompression bound: larger payloads are reported as bombs, not expanded "
        f"(default {DEFAULT_MAX_UNCOMPRESSED})",
    )
    p.add_argument(
        "--idle-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="end a connection after this long without a packet (ended=timeout; a later "
        "packet starts a new one); capture time when reading, the clock when live "
        "(default: never when reading, 300 live; 0: never)",
    )
    p.add_argument(
        "--payload-preview",
        type=whole,
        default=0,
        metavar="N",
        help="messages table: keep the first N bytes of each payload (escaped); off by default",
    )
    p.add_argument(
        "--values",
        action="store_true",
        help="decode message payloads by the schemas the capture carries: the value, "
        "value_schema and value_error columns of messages and journeys (JSON; -Y value.a > 1, "
        "SQL json_extract); off by default: payloads are the user's data",
    )
    p.add_argument(
        "--redact-fields",
        default="",
        metavar="A.B,C",
        help="with --values: mask these fields of every value (dotted paths from the value's "
        "root; arrays walked through; a name holding a dot or comma backquoted: "
        "'`card.number`'), as authentication data is masked; -x then masks every payload "
        "byte, and --payload-preview is refused",
    )


def reader_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", metavar="CAPTURE")
    decode_arguments(p)
    p.add_argument(
        "--series",
        choices=["auto", "digits", "none"],
        default="auto",
        help="how rotated files of one capture point are joined: auto (tcpdump -C names), "
        "digits (names differing only in digits, e.g. -G), none",
    )
    p.add_argument(
        "--no-merge",
        action="store_true",
        help="read captures one after another (as mergecap -a) even when they overlap in "
        "time; by default captures of the same time (several hosts) merge by timestamp",
    )
    p.add_argument(
        "--s3-endpoint",
        metavar="URL",
        help="S3 endpoint other than AWS for s3:// captures, e.g. http://127.0.0.1:9000 "
        "(default: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL)",
    )


def threshold_arguments(p: argparse.ArgumentParser) -> None:
    """The findings' thresholds (dissector.findings), defaulting to the clients' settings."""
    group = p.add_argument_group("thresholds of the findings (defaults: the clients')")
    defaults = Thresholds()
    for name, text in THRESHOLDS.items():
        default = getattr(defaults, name)
        group.add_argument(
            f"--{name.replace('_', '-')}",
            type=whole if isinstance(default, int) else seconds,
            default=default,
            metavar="N" if isinstance(default, int) else "SECONDS",
            help=f"{text} (default {default:g})",
        )


def thresholds_of(args: argparse.Namespace) -> Thresholds:
    """The thresholds given on the command line (defaults for those a command lacks)."""
    defaults = Thresholds()
    return Thresholds(**{n: getattr(args, n, getattr(defaults, n)) for n in THRESHOLDS})


def reader_options(args: argparse.Namespace) -> ReaderOptions:
    """The reader's settings from the command line (frame bytes are kept for -x only); the
    stages a read runs are its plan's (dissector.read.plan), decided from the tables made."""
    return ReaderOptions.make(
        args.port,
        tls_ports=frozenset(args.tls_port),
        max_frame_size=args.max_frame_size,
        max_uncompressed=args.max_uncompressed,
        payload_preview=args.payload_preview,
        values=args.values,
        redact_fields=args.redact_fields,
        series=getattr(args, "series", "auto"),  # live reads no files: no series
        idle_timeout=args.idle_timeout or None,  # 0: never
        frame_bytes=getattr(args, "hexdump", False),
        fields=wants_fields(args),
        s3_endpoint=getattr(args, "s3_endpoint", None),  # live reads no files
        merge=not getattr(args, "no_merge", False),
        tls_keylog=tuple(args.tls_keylog),
        thresholds=thresholds_of(args),
    )


def wants_fields(args: argparse.Namespace) -> bool:
    """The frames' `fields` column is made when --fields asks, or when --columns, -Y or an
    SQL query name it."""
    named = " ".join(str(getattr(args, k, None) or "") for k in ("columns", "filter", "query"))
    return bool(getattr(args, "fields", False)) or re.search(r"\bfields\b", named) is not None


def row_filter(args: argparse.Namespace) -> Filter:
    commands = frozenset(c.upper() for c in args.command)
    unknown = sorted(commands - set(COMMAND_TYPES))
    if unknown:
        raise UsageError(
            f"--command {', '.join(unknown)}: not a Pulsar command "
            "(e.g. SEND, MESSAGE, ACK, PRODUCER, SUBSCRIBE, LOOKUP, CONNECT)"
        )
    return Filter(
        topics=frozenset(args.topic),
        commands=commands,
        conns=frozenset(args.conn),
        since=None if getattr(args, "since", None) is None else parse_time(args.since),
        until=None if getattr(args, "until", None) is None else parse_time(args.until),
    )


def stream_tables(
    args: argparse.Namespace, options: ReaderOptions, names: list[str], sink: Sink
) -> ReadCounts:
    """Dissect the captures into the tables' record batches, in -j processes (one with
    values: dissector.read.parallel); a progress bar on stderr when it is a terminal."""
    jobs = 1 if options.values else workers(args.captures, args.jobs or default_jobs())
    total = capture_bytes(args.captures, options.s3_endpoint) * jobs
    with ReadProgress(total, threaded=jobs == 1) as progress:  # no thread when forking
        return stream_tables_parallel(
            args.captures, options, names, sink, jobs, progress.counter, progress.draw
        )


def inputs(args: argparse.Namespace) -> list[str]:
    """The files a run reads: its captures and TLS key logs (no output may be one of them)."""
    return [
        str(p)
        for p in [
            *(getattr(args, "captures", None) or []),
            *(getattr(args, "tls_keylog", None) or []),
        ]
    ]


def print_hint(counts: ReadCounts, options: ReaderOptions) -> None:
    """A read that found no Pulsar frame says so on stderr (still exit 0), with a --port to
    try when TCP conversations were seen on other ports."""
    hint = no_pulsar_hint(counts, options.broker_ports)
    if hint is not None:
        print(f"pulsar-dissect: {printable(hint)}", file=sys.stderr)
