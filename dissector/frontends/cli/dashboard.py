"""EDGE: `pulsar-dissect dashboard`: the Grafana dashboard of `live --metrics`, as JSON.

Input: nothing.
Output: the dashboard's JSON model on stdout (`pulsar-dissect dashboard > board.json`, then
Grafana's Dashboards > New > Import, or a provisioned file): the same bytes as the file
shipped in the package, dissector/metrics/grafana/pulsar-dissector.json.
Rule: docs/grafana.md lists every panel's queries.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from dissector.frontends.cli.options import Subcommands


def cmd_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    """The dashboard's JSON on `out`."""
    from dissector.metrics.board import render

    out.write(render())
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `dashboard` command's arguments (none)."""
    dashboard = sub.add_parser(
        "dashboard",
        help="print the Grafana dashboard of `live --metrics` (JSON, Prometheus data source)",
    )
    dashboard.set_defaults(run=cmd_dashboard)
