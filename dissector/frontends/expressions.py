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
- Bounded: DuckDB runs with file system access off and its settings locked (no file read or
  written, no extension loaded, no database attached: a filter sees its batch, a query the
  tables). A filter is one expression over one row: no subquery, no second statement and
  none of the functions that make rows or values of any size (GENERATORS); a filter still
  running after FILTER_SECONDS on one batch is stopped (one line). `sql` runs any read-only
  query over the tables for as long as it needs (Ctrl-C stops it).
"""

from __future__ import annotations

import json
import os
import re
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from dissector.errors import UsageError

#: Duration units -> microseconds.
_UNITS = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_DURATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(us|µs|ms|s|m|h)\b")
# a name starts after no word character: a long word is tried once, not at each of its letters
_CONTAINS = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\s+contains\s+", re.IGNORECASE)
#: Functions a filter may not call: they make rows, or values as large as their argument.
GENERATORS = frozenset(
    {"range", "generate_series", "repeat", "list_resize", "array_resize", "unnest", "sleep_ms"}
)
#: Seconds a filter may take on one batch (4,096 rows: milliseconds for any sane filter).
FILTER_SECONDS = 60.0
_QUOTED = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")")


#: Characters of a filter quoted in a message (a long one is shortened).
SHOWN = 80


def _shown(expression: str) -> str:
    """The filter as messages quote it: at most SHOWN characters."""
    short = expression if len(expression) <= SHOWN else expression[:SHOWN] + "..."
    return repr(short)


def _outside_quotes(text: str) -> str:
    """Wireshark's spellings -> SQL, in the parts of `text` outside quoted strings."""
    text = text.replace("&&", " AND ").replace("||", " OR ")
    text = text.replace("==", "=").replace("!=", "<>")
    text = re.sub(r"!(?!=)", " NOT ", text)
    text = _DURATION.sub(lambda m: str(round(float(m.group(1)) * _UNITS[m.group(2)])), text)
    return text


#: `value.a.b` / `value.items[0].price`: a field of the value column's JSON (--values).
_VALUE_PATH = r"(?<![\w.\"'])value((?:\.[A-Za-z_]\w*|\[\d+\])+)"
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_OP = r"(?:=|<>|<=|>=|<|>)"
#: a value field compared with a number after it (or BETWEEN / IN numbers): a DOUBLE
_VALUE_NUMERIC = re.compile(
    rf"{_VALUE_PATH}(?=\s*{_OP}\s*{_NUMBER}(?![\w.])|\s+(?:NOT\s+)?"
    rf"(?:BETWEEN\s+{_NUMBER}|IN\s*\(\s*{_NUMBER}))",
    re.IGNORECASE,
)
#: ... or before it: `100 < value.amount`
_VALUE_NUMBER_LEFT = re.compile(rf"((?<![\w.]){_NUMBER}\s*{_OP}\s*){_VALUE_PATH}")
#: a value field compared with true or false: a BOOLEAN
_VALUE_BOOLEAN = re.compile(rf"{_VALUE_PATH}(?=\s*(?:=|<>)\s*(?:true|false)\b)", re.IGNORECASE)
_VALUE_ANY = re.compile(_VALUE_PATH)


def _value_paths(sql: str) -> str:
    """`value.a.b` -> the field of the value column's JSON (DuckDB's JSON functions),
    outside quoted strings: a DOUBLE where it is compared with a number, a BOOLEAN where with
    true/false, else its text (strings, LIKE, contains, IS NULL); NULL when absent."""
    parts = _QUOTED.split(sql)
    for i in range(0, len(parts), 2):
        part = parts[i]
        part = _VALUE_NUMBER_LEFT.sub(
            lambda m: (
                f"{m.group(1)}TRY_CAST(json_extract_string(value, '${m.group(2)}') AS DOUBLE)"
            ),
            part,
        )
        part = _VALUE_NUMERIC.sub(
            lambda m: f"TRY_CAST(json_extract_string(value, '${m.group(1)}') AS DOUBLE)", part
        )
        part = _VALUE_BOOLEAN.sub(
            lambda m: f"TRY_CAST(json_extract_string(value, '${m.group(1)}') AS BOOLEAN)", part
        )
        parts[i] = _VALUE_ANY.sub(lambda m: f"json_extract_string(value, '${m.group(1)}')", part)
    return "".join(parts)


def to_sql(expression: str) -> str:
    """A display filter as a SQL boolean expression (see the module docstring)."""
    parts = _QUOTED.split(expression)
    out = [part if i % 2 else _outside_quotes(part) for i, part in enumerate(parts)]
    sql = "".join(out)
    # `col contains 'x'` -> contains(col, 'x'): the needle is the next quoted string; each
    # search starts where the last rewrite ended (linear in the expression)
    done: list[str] = []
    while True:
        m = _CONTAINS.search(sql)
        if m is None:
            break
        rest = sql[m.end() :]
        needle = _QUOTED.match(rest)
        if needle is None:
            raise UsageError(f"--filter: contains takes a quoted string: {_shown(expression)}")
        done.append(
            sql[: m.start()] + f"contains(CAST({m.group(1)} AS VARCHAR), {needle.group(1)})"
        )
        sql = rest[needle.end() :]
    return _value_paths("".join(done) + sql)


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every node of DuckDB's parse tree (json_serialize_sql), iteratively."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def check_filter(con: Any, select: str, expression: str) -> None:
    """UsageError when the filter's query is more than one expression over one row."""
    text = con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0]
    tree = json.loads(text)
    if tree.get("error") or len(tree.get("statements", [])) != 1:
        return  # DuckDB itself explains the syntax error when the filter is tried
    for node in _nodes(tree["statements"][0]):
        if node.get("class") in ("SUBQUERY", "WINDOW"):
            what = "subquery" if node["class"] == "SUBQUERY" else "window function"
            raise UsageError(f"--filter {_shown(expression)}: a filter takes no {what} (use sql)")
        name = str(node.get("function_name", "")).lower()
        if node.get("class") == "FUNCTION" and name in GENERATORS:
            raise UsageError(f"--filter {_shown(expression)}: {name}() is not allowed in a filter")


def _connect(tables: dict[str, str] | None = None) -> Any:
    """A DuckDB connection with views of `tables` (name -> Parquet file), then no file system
    access outside the tables' folders and its settings locked."""
    import duckdb  # imported only when a filter or query is asked for

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    folders = sorted(
        {os.path.dirname(os.path.abspath(p)) + os.sep for p in (tables or {}).values()}
    )
    if folders:
        con.execute("SET allowed_directories = ?", [folders])
        literal = folders[0].replace("'", "''")
        con.execute(f"SET temp_directory = '{literal}'")  # spills stay beside the tables
    for name, path in (tables or {}).items():
        literal = path.replace("'", "''")
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{literal}')")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


class RowFilter:
    """Keep the rows of one table's batches for which `expression` is true."""

    def __init__(self, expression: str, table: str, schema: pa.Schema) -> None:
        self.expression, self.table, self.schema = expression, table, schema
        self.sql = to_sql(expression)
        self._select = f"SELECT coalesce(({self.sql}), false) FROM rows"
        self._con = _connect()
        try:
            check_filter(self._con, self._select, expression)
            self.apply(_empty(schema))  # a mistake shows now, before any capture is read
        except BaseException:
            self._con.close()  # now, in this thread (see `mask`)
            raise
        # closed when the filter goes, or at the latest when the interpreter starts to exit
        # (atexit, in the main thread): never torn down during its shutdown (duckdb#13904)
        weakref.finalize(self, self._con.close)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of `batch` for which the expression is true."""
        return batch.filter(self.mask(batch))

    def mask(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """One boolean per row of `batch`: the expression's value, NULL as false."""
        import duckdb

        rows = pa.Table.from_batches([batch], schema=self.schema)
        stop = threading.Timer(FILTER_SECONDS, self._con.interrupt)
        stop.daemon = True
        try:
            self._con.register("rows", rows)
            stop.start()
            keep = self._con.sql(self._select)
            column = keep.to_arrow_table().column(0)
        except duckdb.InterruptException:
            raise UsageError(
                f"--filter {_shown(self.expression)}: stopped after {FILTER_SECONDS:g} s on one "
                "batch: simplify it, or use the sql command"
            ) from None
        except duckdb.Error as exc:
            raise UsageError(self._explain(exc)) from None
        finally:
            # The timer's thread holds the connection (its `interrupt`): it ends here, so the
            # connection is never last released by a thread of ours while the interpreter
            # exits, which aborts the process (duckdb/duckdb#13904; the fuzzing campaign's
            # cli input 10 of seed 31 exited by SIGABRT after a filter's syntax error).
            stop.cancel()
            stop.join()
            self._con.unregister("rows")
        if column.num_chunks == 0:
            return pa.array([], pa.bool_())
        mask: pa.BooleanArray = column.combine_chunks()
        if len(mask) != batch.num_rows:  # an aggregate: one value for the whole batch
            raise UsageError(
                f"--filter {_shown(self.expression)}: a filter is a condition on each row "
                "(no aggregate such as count(*): use sql)"
            )
        if mask.type != pa.bool_():
            raise UsageError(
                f"--filter {_shown(self.expression)}: not a condition (it gives {mask.type}, "
                "not true/false)"
            )
        return mask

    def _explain(self, exc: Exception) -> str:
        first = _first_line(exc)
        columns = ", ".join(self.schema.names)
        return (
            f"--filter {_shown(self.expression)} on table {self.table}: {first} "
            f"(columns: {columns}; `pulsar-dissect fields {self.table}` describes them)"
        )


def _first_line(exc: Exception) -> str:
    """DuckDB's message, its first line, shortened (it may quote a whole long filter)."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else type(exc).__name__
    return first if len(first) <= 2 * SHOWN else first[: 2 * SHOWN] + "..."


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


def run_sql(query: str, tables: dict[str, str]) -> pa.Table:
    """`query` over tables given as name -> Parquet file; the result as Arrow."""
    import duckdb

    con = _connect(tables)
    done: list[pa.Table | BaseException] = []
    finished = threading.Event()

    def work() -> None:
        try:
            done.append(con.sql(query).to_arrow_table())
        except BaseException as exc:  # handed to the caller's thread, without the frames
            done.append(exc.with_traceback(None))  # that hold DuckDB's pending result
        finally:
            finished.set()

    # DuckDB holds the thread that runs it until the query ends; a thread of its own
    # leaves this one free to take Ctrl-C and interrupt the query. (An Event, not
    # Thread.join: a join that Ctrl-C interrupts may later return before the thread ends.)
    worker = threading.Thread(target=work, name="sql", daemon=True)
    worker.start()
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        con.interrupt()
        finished.wait()
        con.close()  # DuckDB's own threads end now, not while the interpreter shuts down
        raise
    # the query is over: its thread ends and the connection closes here, in this thread (a
    # thread of ours releasing it while the interpreter exits aborts it: duckdb#13904)
    worker.join()
    con.close()
    outcome = done[0]
    if isinstance(outcome, duckdb.Error):
        first = _first_line(outcome)
        raise UsageError(f"sql: {first} (tables: {', '.join(tables)})") from None
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
