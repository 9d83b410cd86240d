"""EDGE: display filters (`-Y EXPR`) and SQL over the tables, evaluated by DuckDB.

Input: an expression on the columns of one table (a SQL WHERE clause, with a few of
Wireshark's habits accepted), then Arrow record batches of that table.
Output: the batches' rows for which the expression is true (`RowFilter.apply`), or the
result of a SQL query over tables (`run_sql`).
Rules:
- DuckDB evaluates, so every SQL operator and function works: comparisons, AND/OR/NOT,
  IN (...), LIKE, BETWEEN, IS NULL, regexp_matches(...). A well-kept engine instead of a
  hand-written parser: it is also what the `sql` command runs.
- Wireshark habits are rewritten first, outside quoted strings: `&&` `||` `!` `==` `!=`,
  `A contains 'x'`, and durations `10ms` `1.5s` `250us` (as microseconds, the unit of every
  `*_us` column). Timestamps compare with ISO 8601 strings: `ts >= '2024-05-01T10:00:00Z'`.
- The expression decides which rows pass: DuckDB computes one boolean per row, pyarrow
  keeps those rows, so the batch's schema (and its column descriptions) is untouched. NULL
  counts as false.
- A mistake (unknown column, syntax) is found before any capture is read, on an empty
  batch of the table's schema, and is one clear line (UsageError) naming the columns.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from dissector.errors import UsageError

#: Duration units -> microseconds.
_UNITS = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_DURATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(us|µs|ms|s|m|h)\b")
_CONTAINS = re.compile(r"([A-Za-z_][\w.]*)\s+contains\s+", re.IGNORECASE)
_QUOTED = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")


def _outside_quotes(text: str) -> str:
    """Wireshark's spellings -> SQL, in the parts of `text` outside quoted strings."""
    text = text.replace("&&", " AND ").replace("||", " OR ")
    text = text.replace("==", "=").replace("!=", "<>")
    text = re.sub(r"!(?!=)", " NOT ", text)
    text = _DURATION.sub(lambda m: str(round(float(m.group(1)) * _UNITS[m.group(2)])), text)
    return text


def to_sql(expression: str) -> str:
    """A display filter as a SQL boolean expression (see the module docstring)."""
    parts = _QUOTED.split(expression)
    out = [part if i % 2 else _outside_quotes(part) for i, part in enumerate(parts)]
    sql = "".join(out)
    # `col contains 'x'` -> contains(col, 'x'): the needle is the next quoted string
    while True:
        m = _CONTAINS.search(sql)
        if m is None:
            break
        rest = sql[m.end() :]
        needle = _QUOTED.match(rest)
        if needle is None:
            raise UsageError(f"--filter: contains takes a quoted string: {expression!r}")
        sql = (
            sql[: m.start()]
            + f"contains(CAST({m.group(1)} AS VARCHAR), {needle.group(1)})"
            + rest[needle.end() :]
        )
    return sql


def _connect() -> Any:
    import duckdb  # imported only when a filter or query is asked for

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


class RowFilter:
    """Keep the rows of one table's batches for which `expression` is true."""

    def __init__(self, expression: str, table: str, schema: pa.Schema) -> None:
        self.expression, self.table, self.schema = expression, table, schema
        self.sql = to_sql(expression)
        self._con = _connect()
        self.apply(_empty(schema))  # a mistake shows now, before any capture is read

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of `batch` for which the expression is true."""
        return batch.filter(self.mask(batch))

    def mask(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """One boolean per row of `batch`: the expression's value, NULL as false."""
        import duckdb

        rows = pa.Table.from_batches([batch], schema=self.schema)
        try:
            self._con.register("rows", rows)
            keep = self._con.sql(f"SELECT coalesce(({self.sql}), false) FROM rows")
            column = keep.to_arrow_table().column(0)
        except duckdb.Error as exc:
            raise UsageError(self._explain(exc)) from None
        finally:
            self._con.unregister("rows")
        if column.num_chunks == 0:
            return pa.array([], pa.bool_())
        mask: pa.BooleanArray = column.combine_chunks()
        if mask.type != pa.bool_():
            raise UsageError(
                f"--filter {self.expression!r}: not a condition (it gives {mask.type}, "
                "not true/false)"
            )
        return mask

    def _explain(self, exc: Exception) -> str:
        first = str(exc).strip().splitlines()[0]
        columns = ", ".join(self.schema.names)
        return (
            f"--filter {self.expression!r} on table {self.table}: {first} "
            f"(columns: {columns}; `pulsar-dissect fields {self.table}` describes them)"
        )


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


def run_sql(query: str, tables: dict[str, str]) -> pa.Table:
    """`query` over tables given as name -> Parquet file; the result as Arrow."""
    import duckdb

    con = _connect()
    for name, path in tables.items():
        literal = path.replace("'", "''")
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{literal}')")
    try:
        result: pa.Table = con.sql(query).to_arrow_table()
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        raise UsageError(f"sql: {first} (tables: {', '.join(tables)})") from None
    return result
