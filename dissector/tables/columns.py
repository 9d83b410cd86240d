"""How a table is declared: one column list that yields its Arrow schema and its row function.

Input: a table's name, the parameters of its row function, an optional prelude (statements
naming values several columns share) and its columns, each with a name, an Arrow type, the
Python expression that gives its value and a one-line description.
Output: a `Table` with `.schema` (pyarrow.Schema, descriptions in the field metadata) and
`.row(...)`, a function compiled once at import that returns one row as a tuple in column order.
Rule: a value is written next to its column's name and nowhere else, so it cannot land in
another column by position; the generated code (`.source`) is what runs, with no per-row dict
or lookup by name. Values are converted to the schema's types by the helpers below (uint64 ->
int64 two's complement, ms -> us timestamps).
"""

from __future__ import annotations

import keyword
import linecache
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
I64, I32, STR, BOOL, BIN = pa.int64(), pa.int32(), pa.string(), pa.bool_(), pa.binary()
#: Lists name their item "element", as Parquet does, so that schemas survive a round trip.
STRINGS = pa.list_(pa.field("element", STR))

_I64 = 1 << 63
#: The last millisecond a date can hold: 9999-12-31T23:59:59.999Z. Past it (up to 2**63 µs)
#: Arrow still stores a timestamp, but Python's datetime, hence JSON lines, the text view
#: and pandas' objects, cannot show it (fuzzing finding 9).
_MAX_MS = 253_402_300_799_999


def path_text(path: str) -> str:
    """A file name as text a table can hold (Arrow strings are UTF-8): the bytes of a name
    that is not UTF-8 (kept by Python as lone surrogates) written as `\\xNN`."""
    if path.isascii():
        return path
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = path.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


def i64(value: int) -> int:
    """uint64 as Java's long: values from 2**63 up become negative."""
    return value - (1 << 64) if value >= _I64 else value


def opt64(value: int | None) -> int | None:
    """i64, None kept (one call a cell: i64 written out)."""
    if value is None or value < _I64:
        return value
    return value - (1 << 64)


def ms(value: int | None) -> int | None:
    """Milliseconds since the epoch as microseconds; None when absent or not a date of the
    years 1970 to 9999."""
    return None if value is None or not 0 <= value <= _MAX_MS else value * 1000


#: Names every column expression may use.
HELPERS: dict[str, Any] = {"_i64": i64, "_opt64": opt64, "_ms": ms}


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: pa.DataType
    value: str  # Python expression over the row function's parameters and prelude names
    doc: str
    nullable: bool = True
    #: Costly and rarely wanted: null unless asked for (`Table.row_with`), so that tables
    #: keep one schema whether or not it was made.
    on_request: bool = False

    def field(self) -> pa.Field:
        return pa.field(
            self.name, self.type, nullable=self.nullable, metadata={"description": self.doc}
        )


def col(
    name: str,
    dtype: pa.DataType,
    value: str,
    doc: str,
    nullable: bool = True,
    *,
    on_request: bool = False,
) -> Column:
    """A column: its name, type, the expression that gives its value, one line of doc;
    on_request: null unless the row function `Table.row_with` is used."""
    return Column(name, dtype, value, doc, nullable, on_request)


def one_of(values: Iterable[str]) -> str:
    """A closed set of values as a column's description says it: "a, b or c". Columns take
    it from the set's enum (dissector.events), so their descriptions follow it."""
    *rest, last = values
    return f"{', '.join(rest)} or {last}" if rest else last


def value_columns(row: str) -> list[Column]:
    """The value columns of the messages and journeys tables (`row`: the row variable),
    filled only when values are asked for (--values; docs/values.md)."""
    return [
        col(
            "value",
            STR,
            f"{row}.value",
            "--values only: the payload decoded by its schema, as JSON text (query it with "
            "-Y value.a.b or SQL json_extract)",
        ),
        col(
            "value_schema",
            STR,
            f"{row}.value_schema",
            "--values only: the schema that decoded it, type and version (AVRO v3, JSON "
            "(declared)); null when none was found",
        ),
        col(
            "value_error",
            STR,
            f"{row}.value_error",
            "--values only: why value is null (no schema, not decodable, encrypted)",
        ),
    ]


def endpoints() -> list[Column]:
    """Endpoint columns; the row function's prelude names client_ip ... broker_port."""
    return [
        col("client_ip", STR, "client_ip", "client address (IPv4 dotted or IPv6 text)"),
        col("client_port", I32, "client_port", "client TCP port"),
        col("broker_ip", STR, "broker_ip", "broker address"),
        col("broker_port", I32, "broker_port", "broker TCP port"),
    ]


def community_id_column(note: str = "") -> Column:
    """The connection's Community ID; the row function's parameters or prelude name
    `community_id`, the string made once per connection (dissector.flow.community_id)."""
    doc = "Community ID v1 of the connection: the flow id Zeek, Suricata and Wireshark log"
    return col("community_id", STR, "community_id", doc + note)


class Table:
    """A table declared once: its schema and row function both come from `columns`."""

    __slots__ = (
        "_env", "_params", "_prelude", "_row_with", "columns", "name", "row", "schema", "source"
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        params: str,
        columns: list[Column],
        *,
        prelude: str = "",
        env: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.columns = tuple(columns)
        names = [c.name for c in self.columns]
        bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"table {name}: bad or repeated column names in {names}")
        self.schema = pa.schema([c.field() for c in self.columns])
        self._params, self._prelude, self._env = params, prelude, env or {}
        self.source = _row_source(name, params, prelude, self.columns, requested=False)
        self.row: Callable[..., tuple[Any, ...]] = _compile(name, self.source, self._env)
        self._row_with: Callable[..., tuple[Any, ...]] | None = None

    @property
    def on_request(self) -> list[str]:
        """Columns made only when asked for (null otherwise)."""
        return [c.name for c in self.columns if c.on_request]

    def row_with(self) -> Callable[..., tuple[Any, ...]]:
        """The row function that also makes the on-request columns (compiled once, when
        first asked for)."""
        if not self.on_request:
            return self.row
        if self._row_with is None:
            source = _row_source(
                self.name, self._params, self._prelude, self.columns, requested=True
            )
            self._row_with = _compile(self.name, source, self._env, " with on-request columns")
        return self._row_with

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def describe(self) -> dict[str, str]:
        """Column name -> one-line description."""
        return {c.name: c.doc for c in self.columns}


def _row_source(
    name: str, params: str, prelude: str, columns: tuple[Column, ...], *, requested: bool
) -> str:
    body = textwrap.indent(textwrap.dedent(prelude).strip(), "    ")
    values = "".join(
        f"        {c.value if requested or not c.on_request else 'None'},  # {c.name}\n"
        for c in columns
    )
    return f"def {name}_row({params}):\n{body}\n    return (\n{values}    )\n"


def _compile(
    name: str, source: str, env: Mapping[str, Any], variant: str = ""
) -> Callable[..., tuple[Any, ...]]:
    """Compile a row function once; its source is kept for tracebacks and debuggers."""
    filename = f"<table {name}{variant}>"
    namespace: dict[str, Any] = {**HELPERS, **env}
    exec(compile(source, filename, "exec"), namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    fn: Callable[..., tuple[Any, ...]] = namespace[f"{name}_row"]
    return fn
