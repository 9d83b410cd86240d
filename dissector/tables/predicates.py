"""Row predicates, modelled once and compiled to each engine that filters rows.

Input: a predicate: `Term`s (column, op, value) joined by `AllOf` (and) and `AnyOf` (or). The
read filters build theirs from the user's options (dissector.tables.filters.Filter), the
Spark data source from the filters Spark pushes down (dissector.frontends.spark).
Output: the rows a predicate keeps, as an Arrow mask over a table or record batch (`mask`),
as a SQL condition DuckDB evaluates (`to_sql`), as a check of one row's values (`row_check`,
compiled once; `matches` for a row given as a mapping); the Spark data source's own filter
objects are made from and into terms in dissector.frontends.spark (pyspark is an extra).
Rules (every target gives the same rows):
- Ops: eq, lt, le, gt, ge (a scalar value) and in (a tuple of values). A null in the row
  never passes a comparison; `in` passes a null only when its values hold None (as Arrow's
  is_in, which the Spark reader always used).
- Time columns (Arrow timestamps, e.g. `ts`) compare as whole microseconds since the epoch:
  the value is an int (the read filters clamp it to int64), the column is cast.
- A term on a column the rows do not have does not apply: it is left out of its group, and a
  group left empty does not apply either (a topic filter keeps every row of a table without
  a topic; a command filter looks at the command columns the table has). Nothing that
  applies: every row passes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import pyarrow as pa

Op = Literal["eq", "lt", "le", "gt", "ge", "in"]


@dataclass(frozen=True, slots=True)
class Term:
    """`column op value`; for op "in", value is a tuple."""

    column: str
    op: Op
    value: Any


@dataclass(frozen=True, slots=True)
class AllOf:
    """Every part passes (no part: every row passes)."""

    parts: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """At least one part passes."""

    parts: tuple[Predicate, ...]


Predicate: TypeAlias = Term | AllOf | AnyOf
Data: TypeAlias = pa.Table | pa.RecordBatch


def restrict(pred: Predicate, columns: Collection[str]) -> Predicate | None:
    """The part of `pred` that applies to rows with these columns (None: nothing applies);
    a group left with one part is that part."""
    if isinstance(pred, Term):
        return pred if pred.column in columns else None
    kept = tuple(p for p in (restrict(part, columns) for part in pred.parts) if p is not None)
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else type(pred)(kept)


def terms(pred: Predicate) -> Iterable[Term]:
    """Every term of `pred`, depth first."""
    if isinstance(pred, Term):
        yield pred
    else:
        for part in pred.parts:
            yield from terms(part)


# ------------------------------------------------------------------------------ Arrow

#: op -> the name of its pyarrow.compute function
_COMPARE = {"eq": "equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}


def mask(pred: Predicate, data: Data) -> pa.Array | pa.ChunkedArray:
    """One boolean per row of `data`: whether `pred` keeps it (see the rules)."""
    applies = restrict(pred, data.schema.names)
    if applies is None:
        return pa.array([True] * data.num_rows)
    return _mask(applies, data)


def _mask(pred: Predicate, data: Data) -> Any:
    import pyarrow.compute as pc  # here: ~25 ms a text read or a row check need not pay

    if isinstance(pred, Term):
        column = data.column(pred.column)
        if pa.types.is_timestamp(column.type):
            column = pc.cast(column, pa.int64())
        if pred.op == "in":
            hit = pc.is_in(column, pa.array(pred.value, type=column.type))
        else:
            compare: Callable[[Any, Any], Any] = getattr(pc, _COMPARE[pred.op])
            hit = compare(column, pred.value)
        return pc.fill_null(hit, False)
    join = pc.and_ if isinstance(pred, AllOf) else pc.or_
    out = _mask(pred.parts[0], data)
    for part in pred.parts[1:]:
        out = join(out, _mask(part, data))
    return out


def apply(pred: Predicate, data: Data) -> Data:
    """The rows of `data` that `pred` keeps (`data` itself when nothing applies)."""
    if data.num_rows == 0 or restrict(pred, data.schema.names) is None:
        return data
    return data.filter(mask(pred, data))


# ------------------------------------------------------------------------------ rows

RowCheck: TypeAlias = Callable[[Sequence[Any]], bool]


def row_check(pred: Predicate, columns: Sequence[str]) -> RowCheck:
    """`pred` as a function of one row's values, given in the order of `columns` (times as
    µs ints): compiled once, then a few calls per row (the text view checks every frame)."""
    applies = restrict(pred, columns)
    if applies is None:
        return _always
    return _check(applies, {name: i for i, name in enumerate(columns)})


def matches(pred: Predicate, row: Mapping[str, Any]) -> bool:
    """Whether one row (column -> value; times as µs ints) passes `pred`."""
    return row_check(pred, list(row))(list(row.values()))


def _always(row: Sequence[Any]) -> bool:
    return True


def _check(pred: Predicate, at: dict[str, int]) -> RowCheck:
    if isinstance(pred, Term):
        i, bound = at[pred.column], pred.value
        if pred.op == "in":
            values = frozenset(bound)
            return lambda row: row[i] in values
        compare = _PYTHON[pred.op]
        return lambda row: row[i] is not None and bool(compare(row[i], bound))
    parts = tuple(_check(part, at) for part in pred.parts)
    if isinstance(pred, AllOf):

        def every(row: Sequence[Any]) -> bool:
            for part in parts:  # noqa: SIM110  (a loop: all() of a generator is 2x slower)
                if not part(row):
                    return False
            return True

        return every

    def some(row: Sequence[Any]) -> bool:
        for part in parts:  # noqa: SIM110  (as `every`)
            if part(row):
                return True
        return False

    return some


_PYTHON: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}

# -------------------------------------------------------------------------------- SQL

_SQL_OPS = {"eq": "=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def to_sql(pred: Predicate, schema: pa.Schema) -> str:
    """`pred` as a DuckDB boolean expression over a table of `schema` ("true" when nothing
    applies); NULL where a row's value is null, which a WHERE (or coalesce(..., false))
    treats as false, as the other targets do."""
    applies = restrict(pred, schema.names)
    return "true" if applies is None else _sql(applies, schema)


def _sql(pred: Predicate, schema: pa.Schema) -> str:
    if isinstance(pred, AllOf | AnyOf):
        join = " AND " if isinstance(pred, AllOf) else " OR "
        return "(" + join.join(_sql(part, schema) for part in pred.parts) + ")"
    name = _identifier(pred.column)
    if pa.types.is_timestamp(schema.field(pred.column).type):
        name = f"epoch_us({name})"
    if pred.op != "in":
        return f"{name} {_SQL_OPS[pred.op]} {_literal(pred.value)}"
    values = [v for v in pred.value if v is not None]
    listed = f"{name} IN ({', '.join(_literal(v) for v in values)})" if values else "false"
    return f"({listed} OR {name} IS NULL)" if len(values) < len(pred.value) else listed


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: Any) -> str:
    """A value as a SQL literal: NULL, true/false, an integer of any size (DuckDB reads one
    past int64 as HUGEINT), a string."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {type(value).__name__} (times are µs ints)")
