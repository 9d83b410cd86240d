"""EDGE: `pulsar-dissect diagnose`: what went wrong in the captures, ranked, with evidence.

Input: the parsed arguments of `diagnose` (captures, decoding options, the findings'
thresholds) and the captures they name.
Output: the findings table's rows, ranked and grouped by connection and entity
(dissector.frontends.diagnoses), then what the rules checked and what the captures could
not tell them (the checks table's rows added up: the "clean bill" when nothing was found),
as text or JSON (`checked`) on stdout; exit 0 whatever was found.
Rule: the rows are those of `read --table findings --table checks` (the same table
machinery, the same thresholds): only those two tables are made, by one Diagnoser, so the
frames are decoded and nothing else.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

import pyarrow as pa

from dissector.frontends.cli.options import (
    Subcommands,
    jobs_argument,
    print_hint,
    reader_arguments,
    reader_options,
    stream_tables,
    threshold_arguments,
)
from dissector.frontends.diagnoses import as_json, render
from dissector.tables.schema import TABLES

_TABLES = ["findings", "checks"]


def cmd_diagnose(args: argparse.Namespace, out: TextIO) -> int:
    """Findings ranked by severity and impact, grouped by connection and entity."""
    options = reader_options(args)
    batches: dict[str, list[pa.RecordBatch]] = {name: [] for name in _TABLES}
    counts = stream_tables(args, options, _TABLES, lambda name, batch: batches[name].append(batch))
    print_hint(counts, options)
    rows, checks = (
        pa.Table.from_batches(batches[name], schema=TABLES[name].schema).to_pylist()
        for name in _TABLES
    )
    if args.format == "json":
        out.write(json.dumps(as_json(rows, checks), indent=1) + "\n")
    else:
        out.write(render(rows, checks))
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `diagnose` command's arguments."""
    diagnose = sub.add_parser(
        "diagnose",
        help="what went wrong: stalls, starved consumers, redeliveries, loops, with evidence",
        description="Findings (the findings table) ranked by severity and impact, grouped by "
        "connection and entity, each with the packets that prove it; then what the rules "
        "checked (SENDs, requests and PINGs answered and how fast, consumers' permits, "
        "connections: the checks table), and when nothing was found what the captures could "
        "not tell them (connections started before the capture, bytes lost). Exit 0 "
        "whatever is found.",
    )
    reader_arguments(diagnose)
    diagnose.add_argument("--format", choices=["text", "json"], default="text")
    jobs_argument(diagnose)
    threshold_arguments(diagnose)
    diagnose.set_defaults(run=cmd_diagnose)
