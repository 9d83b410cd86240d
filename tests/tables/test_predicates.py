"""The one predicate model (dissector.tables.predicates) and the read filters built on it:
each compile target keeps the same rows.

Expected rows are picked by hand from the small tables below; every case is checked on the
Arrow mask (table and record batch), on DuckDB running the compiled SQL, and on the
row-at-a-time evaluation the text view uses. (The Spark data source's target:
tests/frontends/test_spark.py::test_the_predicate_model_pushed_to_spark.)
"""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from dissector.errors import UsageError
from dissector.tables.filters import Filter, parse_time
from dissector.tables.predicates import (
    AllOf,
    AnyOf,
    Predicate,
    Term,
    apply,
    mask,
    matches,
    restrict,
    row_check,
    to_sql,
)

T0 = 1_700_000_000_000_000  # µs
TS = pa.timestamp("us", tz="UTC")
FRAMES = pa.table(
    {
        "ts": pa.array([T0, T0 + 1, T0 + 2, T0 + 3, T0 + 4], TS),
        "conn_id": pa.array([1, 1, 2, 2, 3], pa.int64()),
        "topic": pa.array(["a", None, "b", "a", "it's"], pa.string()),
        "command": pa.array(["SEND", "PING", "SEND", "MESSAGE", "ACK"], pa.string()),
    }
)
TIMELINE = pa.table(
    {
        "ts": pa.array([T0, T0 + 5, T0 + 9], TS),
        "conn_id": pa.array([1, 2, 3], pa.int64()),
        "request_command": pa.array(["LOOKUP", None, "SEND"], pa.string()),
        "response_command": pa.array(["LOOKUP_RESPONSE", "ACK", None], pa.string()),
    }
)
ANOMALIES = pa.table({"ts": pa.array([T0, T0 + 3], TS), "conn_id": pa.array([0, 2], pa.int64())})


def kept(pred: Predicate, table: pa.Table) -> list[int]:
    """The row numbers `pred` keeps, the same by every target (else the test fails)."""
    rows = pa.table(
        {**{n: table[n] for n in table.column_names}, "_n": list(range(table.num_rows))}
    )
    by_arrow: list[int] = apply(pred, rows)["_n"].to_pylist()
    batch = rows.to_batches()[0]
    assert apply(pred, batch)["_n"].to_pylist() == by_arrow
    assert len(mask(pred, batch)) == table.num_rows
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("t", rows)
    where = to_sql(pred, table.schema)
    by_sql = [r[0] for r in con.execute(f"SELECT _n FROM t WHERE {where} ORDER BY _n").fetchall()]
    assert by_sql == by_arrow, where
    by_row = [i for i, row in enumerate(_python_rows(table)) if matches(pred, row)]
    assert by_row == by_arrow
    return by_arrow


def _python_rows(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    for row in rows:
        if isinstance(row.get("ts"), dt.datetime):
            row["ts"] = table_us(row["ts"])
    return rows


def table_us(when: dt.datetime) -> int:
    return (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


@pytest.mark.parametrize(
    ("options", "frames", "timeline", "anomalies"),
    [
        ({}, [0, 1, 2, 3, 4], [0, 1, 2], [0, 1]),
        ({"conns": {2, 3}}, [2, 3, 4], [1, 2], [1]),
        ({"topics": {"a"}}, [0, 3], [0, 1, 2], [0, 1]),  # no topic column: all kept
        ({"topics": {"it's", "b"}}, [2, 4], [0, 1, 2], [0, 1]),  # a quote in a literal
        ({"commands": {"SEND"}}, [0, 2], [2], [0, 1]),
        ({"commands": {"ACK", "LOOKUP"}}, [4], [0, 1], [0, 1]),  # request OR response
        ({"since": T0 + 2}, [2, 3, 4], [1, 2], [1]),
        ({"until": T0 + 2}, [0, 1], [0], [0]),
        ({"since": T0 + 1, "until": T0 + 4, "topics": {"a"}}, [3], [], [1]),
        ({"conns": {1}, "commands": {"PING"}}, [1], [], []),
    ],
)
def test_read_filters_keep_the_same_rows_everywhere(
    options: dict[str, Any], frames: list[int], timeline: list[int], anomalies: list[int]
) -> None:
    opts: dict[str, Any] = {
        k: frozenset(v) if isinstance(v, set) else v for k, v in options.items()
    }
    rows = Filter(**opts)
    assert kept(rows.predicate, FRAMES) == frames
    assert kept(rows.predicate, TIMELINE) == timeline
    assert kept(rows.predicate, ANOMALIES) == anomalies
    assert rows.table(FRAMES).num_rows == len(frames)
    assert rows.table(TIMELINE).num_rows == len(timeline)


@pytest.mark.parametrize(
    ("bound", "text", "frames"),
    [
        ("since", "1e20", []),  # past int64 µs: the bound itself, nothing is that late
        ("since", "-1e30", [0, 1, 2, 3, 4]),
        ("until", "inf", [0, 1, 2, 3, 4]),
        ("until", "-1e300", []),
    ],
)
def test_time_bounds_past_int64_are_the_bound(bound: str, text: str, frames: list[int]) -> None:
    value = parse_time(text)
    assert value in (2**63 - 1, -(2**63))
    bounds: dict[str, Any] = {bound: value}
    assert kept(Filter(**bounds).predicate, FRAMES) == frames


def test_a_time_that_is_not_a_number_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not a time"):
        parse_time("nan")


def test_terms_and_groups() -> None:
    assert kept(Term("conn_id", "eq", 2), FRAMES) == [2, 3]
    assert kept(Term("conn_id", "gt", 1), FRAMES) == [2, 3, 4]
    assert kept(Term("conn_id", "le", 1), FRAMES) == [0, 1]
    assert kept(Term("topic", "eq", "a"), FRAMES) == [0, 3]  # null: not kept
    assert kept(Term("topic", "in", ()), FRAMES) == []
    assert kept(Term("topic", "in", (None, "b")), FRAMES) == [1, 2]  # None lists null
    either = AnyOf((Term("conn_id", "eq", 3), Term("command", "eq", "PING")))
    assert kept(either, FRAMES) == [1, 4]
    assert kept(AllOf((either, Term("ts", "ge", T0 + 2))), FRAMES) == [4]
    assert kept(AllOf(()), FRAMES) == [0, 1, 2, 3, 4]


def test_a_term_on_a_missing_column_does_not_apply() -> None:
    commands = AnyOf(tuple(Term(c, "in", ("SEND",)) for c in ("command", "request_command")))
    assert restrict(commands, FRAMES.column_names) == Term("command", "in", ("SEND",))
    assert restrict(Term("topic", "eq", "a"), ANOMALIES.column_names) is None
    assert to_sql(Term("topic", "eq", "a"), ANOMALIES.schema) == "true"
    assert matches(Term("topic", "eq", "a"), {"conn_id": 1})
    untouched = Filter(topics=frozenset({"a"})).table(ANOMALIES)
    assert untouched is ANOMALIES


def test_the_sql_is_what_duckdb_reads() -> None:
    pred = Filter(topics=frozenset({"x'y"}), since=5, commands=frozenset({"SEND"})).predicate
    assert to_sql(pred, TIMELINE.schema) == (
        """(("request_command" IN ('SEND') OR "response_command" IN ('SEND'))"""
        """ AND epoch_us("ts") >= 5)"""
    )
    assert to_sql(pred, FRAMES.schema) == (
        """("topic" IN ('x''y') AND "command" IN ('SEND') AND epoch_us("ts") >= 5)"""
    )


def test_a_filter_pickles_as_its_settings() -> None:
    rows = Filter(conns=frozenset({2}), since=T0 + 3)
    again = pickle.loads(pickle.dumps(rows))
    assert again == rows and again.predicate == rows.predicate
    assert kept(again.predicate, FRAMES) == [3]


def test_row_checks_take_values_in_column_order() -> None:
    check = row_check(Filter(topics=frozenset({"a"}), until=10).predicate, ("topic", "ts"))
    assert check(("a", 9)) and not check(("a", 10)) and not check((None, 9))
    assert row_check(Term("topic", "eq", "a"), ("conn_id",))((5,))  # does not apply
