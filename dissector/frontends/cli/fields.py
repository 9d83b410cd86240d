"""EDGE: `pulsar-dissect fields`: every table's columns, as tshark -G fields.

Input: table names (none: every table).
Output: one line per column (table, name, type, description), or JSON.
Rule: an unknown table name is an error line listing the tables.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from dissector.errors import UsageError
from dissector.frontends.cli.options import Subcommands
from dissector.tables.schema import TABLES


def cmd_fields(args: argparse.Namespace, out: TextIO) -> int:
    """Every table's columns with their types and descriptions (as tshark -G fields)."""
    names = args.tables or list(TABLES)
    unknown = [n for n in names if n not in TABLES]
    if unknown:
        raise UsageError(f"fields: no table {', '.join(unknown)} (tables: {', '.join(TABLES)})")
    if args.format == "json":
        listing = {
            name: [
                {
                    "column": f.name,
                    "type": str(f.type),
                    "description": TABLES[name].describe()[f.name],
                }
                for f in TABLES[name].schema
            ]
            for name in names
        }
        out.write(json.dumps(listing, indent=1) + "\n")
        return 0
    for name in names:
        described = TABLES[name].describe()
        for f in TABLES[name].schema:
            out.write(f"{name}\t{f.name}\t{f.type}\t{described[f.name]}\n")
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `fields` command's arguments."""
    fields = sub.add_parser("fields", help="list every table's columns with their descriptions")
    fields.add_argument("tables", nargs="*", metavar="TABLE", help=f"of {', '.join(TABLES)}")
    fields.add_argument("--format", choices=["text", "json"], default="text")
    fields.set_defaults(run=cmd_fields)
