"""EDGE: `pulsar-dissect sql`: a SQL query (DuckDB) over the captures' tables.

Input: the parsed arguments of `sql`: captures and a query naming tables.
Output: the result as aligned text columns, or in a table format.
Rule: only the tables the query names are made, as Parquet in a temporary folder that is
removed afterwards, whatever happens.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from typing import Any, TextIO

import pyarrow as pa

from dissector.errors import UsageError
from dissector.frontends.cli.options import (
    Subcommands,
    jobs_argument,
    reader_arguments,
    reader_options,
    stream_tables,
)
from dissector.frontends.terminal import printable
from dissector.tables.output import FORMATS, TableWriter
from dissector.tables.schema import TABLES

#: A table named in a query: `frames`, `messages` ... as whole words.
_TABLE_WORD = re.compile(r"\b(" + "|".join(TABLES) + r")\b", re.IGNORECASE)


def cmd_sql(args: argparse.Namespace, out: TextIO) -> int:
    """A SQL query over the tables of the captures (DuckDB): joins, aggregates, anything."""
    from dissector.frontends.expressions import run_sql

    names = [n for n in TABLES if n in {m.lower() for m in _TABLE_WORD.findall(args.query)}]
    if not names:
        raise UsageError(f"sql: the query names no table (tables: {', '.join(TABLES)})")
    options = reader_options(args)
    with tempfile.TemporaryDirectory(prefix="pulsar-dissect-sql-") as folder:
        paths = {n: os.path.join(folder, f"{n}.parquet") for n in names}
        writers = {n: TableWriter("parquet", paths[n], TABLES[n].schema) for n in names}
        try:
            stream_tables(args, options, names, lambda name, batch: writers[name].write(batch))
            for writer in writers.values():
                writer.close()
        except BaseException:
            for writer in writers.values():
                writer.abort()
            raise
        result = run_sql(args.query, paths)
    if args.format == "text":
        out.write(_text_table(result))
        return 0
    with TableWriter(args.format, args.output, result.schema) as writer:
        for batch in result.to_batches():
            writer.write(batch)
    return 0


def _text_table(table: pa.Table) -> str:
    """A query's result as aligned columns (header, then rows), as a SQL shell prints it."""
    if table.num_columns == 0:
        return ""
    # column by column: a result may name two columns alike (SELECT a, a)
    columns = [[printable(_cell(v)) for v in column.to_pylist()] for column in table.columns]
    rows = [list(row) for row in zip(*columns, strict=True)]
    header = [printable(name) for name in table.column_names]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    lines.append(f"({len(rows)} row{'' if len(rows) == 1 else 's'})")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def add_parser(sub: Subcommands) -> None:
    """The `sql` command's arguments."""
    sql = sub.add_parser(
        "sql",
        help="run a SQL query (DuckDB) over the captures' tables, named frames, messages, ...",
    )
    reader_arguments(sql)
    sql.add_argument("query", help='e.g. "SELECT command, count(*) FROM frames GROUP BY 1"')
    sql.add_argument("--format", choices=["text", *FORMATS], default="text")
    sql.add_argument("-o", "--output", metavar="PATH", help="the result's file (default: stdout)")
    jobs_argument(sql)
    sql.set_defaults(run=cmd_sql)
