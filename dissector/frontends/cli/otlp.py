"""EDGE: the OpenTelemetry metrics arguments of `summary` and `live`.

Input: a parser to add them to; then the parsed arguments.
Output: `--otlp-endpoint URL`, `--otlp-header NAME=VALUE`, `--otlp-compression` and
`--otlp-timeout S` (both commands), `--otlp-out FILE`
(`live`: a line per flush interval); an `OtlpMetricsOut` made from them, or None when
none was asked for.
Rule: a bad URL is argparse's one-line usage error (exit 2), before any packet is read.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from dissector.errors import UsageError
from dissector.frontends.cli.options import above_zero
from dissector.metrics.push import TIMEOUT, endpoint_url, header

if TYPE_CHECKING:
    from dissector.frontends.otlp_metrics import OtlpMetricsOut


def _endpoint(text: str) -> str:
    try:
        endpoint_url(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--otlp-endpoint ")) from None
    return text


def _header(text: str) -> tuple[str, str]:
    try:
        return header(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def otlp_arguments(parser: argparse.ArgumentParser, *, live: bool) -> None:
    """The OTLP metrics arguments; `live`: with --otlp-out (a line per flush interval)."""
    group = parser.add_argument_group("OpenTelemetry metrics (docs/otlp-metrics.md)")
    group.add_argument(
        "--otlp-endpoint",
        type=_endpoint,
        metavar="URL",
        help="push the metrics to an OpenTelemetry collector by OTLP/HTTP (JSON), e.g. "
        "http://127.0.0.1:4318 (/v1/metrics is appended unless given), "
        + ("every --flush-interval and at the end" if live else "once, after the read")
        + "; a collector that fails or does not answer costs one warning line, not the run",
    )
    group.add_argument(
        "--otlp-header",
        type=_header,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header of each push (repeatable), e.g. 'Authorization=Bearer TOKEN' (values "
        "are never printed)",
    )
    group.add_argument(
        "--otlp-compression",
        choices=["none", "gzip"],
        default="none",
        help="compress each push (Content-Encoding; default none, as OpenTelemetry's exporters)",
    )
    group.add_argument(
        "--otlp-timeout",
        type=above_zero,
        default=TIMEOUT,
        metavar="S",
        help=f"seconds a push may take, and the end waits for one (default {TIMEOUT:g})",
    )
    if live:
        group.add_argument(
            "--otlp-out",
            metavar="FILE",
            help="append the metrics to FILE as OTLP JSON lines (one ExportMetricsServiceRequest "
            "per --flush-interval and one at the end, each line flushed)",
        )


def otlp_out(
    args: argparse.Namespace, resource: Mapping[str, object], err: TextIO
) -> OtlpMetricsOut | None:
    """Where the metrics go, as the arguments say; None when nowhere."""
    path = getattr(args, "otlp_out", None)
    if path is None and args.otlp_endpoint is None:
        return None
    from dissector.frontends.otlp_metrics import OtlpMetricsOut

    return OtlpMetricsOut(
        resource,
        err,
        path=path,
        endpoint=args.otlp_endpoint,
        timeout=args.otlp_timeout,
        headers=dict(args.otlp_header),
        gzip=args.otlp_compression == "gzip",
    )
