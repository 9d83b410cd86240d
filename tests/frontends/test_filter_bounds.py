"""Issue 31 F10 and the note on -Y/sql: a display filter is rewritten in time linear in its
length, is one condition over one row, cannot touch files or run without end; `sql` reads
the tables and nothing else.

Expected values: the SQL a rewrite must give, written by hand; DuckDB's refusals; files that
must not appear.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dissector.errors import UsageError
from dissector.frontends import expressions
from dissector.frontends.expressions import RowFilter, run_sql, to_sql
from dissector.tables.schema import TABLES
from tests.support.cli import cli
from tests.support.samples import PCAPS

SAMPLE = str(PCAPS / "produce_consume.pcap")
SCHEMA = pa.schema([("topic", pa.string()), ("conn_id", pa.int64())])


def test_contains_rewrites_each_occurrence() -> None:
    assert to_sql("topic contains 'a' && command contains 'S''X' || x.y contains \"q\"") == (
        "contains(CAST(topic AS VARCHAR), 'a')  AND  contains(CAST(command AS VARCHAR), 'S''X')"
        '  OR  contains(CAST(x.y AS VARCHAR), "q")'
    )


def test_a_long_word_is_one_word() -> None:
    # before: the `contains` pattern was tried at each of the word's letters, each try
    # running to its end (quadratic: 100,000 letters took 88 s)
    word = "a" * 200_000
    assert to_sql(word) == word
    assert to_sql(f"{word} contains 'x'") == f"contains(CAST({word} AS VARCHAR), 'x')"


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("conn_id > (SELECT count(*) FROM range(100000000))", "no subquery"),
        ("len(range(100000000)) > 1", r"range\(\) is not allowed"),
        ("length(repeat('x', 1000000000)) > 1", r"repeat\(\) is not allowed"),
        ("row_number() OVER () < 3", "no window function"),
        ("count(*) > 0", "a condition on each row"),
    ],
)
def test_a_filter_is_one_condition_over_one_row(expression: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        RowFilter(expression, "t", SCHEMA)


def test_a_filter_cannot_reach_files(tmp_path: Path) -> None:
    target = tmp_path / "x.csv"
    with pytest.raises(UsageError):  # a second statement smuggled in
        RowFilter(f"conn_id > 0) FROM rows; COPY (SELECT 1) TO '{target}'; SELECT (1", "t", SCHEMA)
    assert not target.exists()
    # the filter's own connection: file system access off, settings locked
    locked = (
        "current_setting('enable_external_access') = false"
        " AND current_setting('lock_configuration')"
    )
    batch = pa.RecordBatch.from_pylist([{"topic": "t", "conn_id": 1}], schema=SCHEMA)
    assert RowFilter(locked, "t", SCHEMA).apply(batch).num_rows == 1


def test_a_filter_running_too_long_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    # levenshtein of two 60,000-character strings: 3.6e9 cell updates, minutes on any
    # machine; the bound is a thousandth of that
    monkeypatch.setattr(expressions, "FILTER_SECONDS", 0.2)
    rows = RowFilter("levenshtein(topic, reverse(topic)) > 0", "t", SCHEMA)
    batch = pa.RecordBatch.from_pylist([{"topic": "ab" * 30_000, "conn_id": 1}], schema=SCHEMA)
    with pytest.raises(UsageError, match=r"stopped after 0\.2 s"):
        rows.apply(batch)


def test_sql_writes_no_file(tmp_path: Path) -> None:
    target = tmp_path / "f.csv"
    done = cli("sql", SAMPLE, f"COPY frames TO '{target}'")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert not target.exists()
    done = cli("sql", SAMPLE, "SELECT * FROM read_csv('/etc/passwd') JOIN frames ON true")
    assert done.returncode == 2 and "disabled" in done.stderr


def test_sql_still_reads_its_tables(tmp_path: Path) -> None:
    path = tmp_path / "frames.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    assert run_sql("SELECT sum(x) AS s FROM frames", {"frames": str(path)}).to_pylist() == [
        {"s": 6}
    ]
    with pytest.raises(UsageError):
        run_sql("SET enable_external_access = true", {"frames": str(path)})


def test_sql_text_view_with_duplicate_column_names() -> None:
    # F6: `SELECT conn_id, conn_id` ended in an IndexError
    done = cli("sql", SAMPLE, "SELECT conn_id, conn_id, 'x' AS conn_id FROM frames LIMIT 1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["conn_id", "conn_id", "conn_id"]
    assert lines[2].split() == ["1", "1", "x"]


def test_the_filter_of_the_frames_table_accepts_real_filters() -> None:
    rows = RowFilter("command == 'SEND' && topic contains 'x'", "frames", TABLES["frames"].schema)
    assert rows.sql.startswith("command = 'SEND'")


def test_ctrl_c_stops_a_running_query(tmp_path: Path) -> None:
    """The query never ends by itself (a cross join with 10^11 rows): the process is kept
    running by construction; Ctrl-C must stop it with one line and exit 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    query = "SELECT count(*) FROM frames, range(100000000000)"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-m", "dissector.frontends.cli", "sql", SAMPLE, query],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("pulsar-dissect-sql-*/frames.parquet")):  # tables written
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # into the query (if not, Ctrl-C during the read ends it the same way)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130
    assert err.splitlines() == ["pulsar-dissect: interrupted"]
    assert not list(tmp_path.glob("pulsar-dissect-sql-*"))  # the temporary tables are gone


def test_a_filter_leaves_no_thread_of_its_own_holding_duckdb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The campaign rerun's cli input 10 of seed 31: `-Y "1=1; DROP TABLE frames"` exited
    # by SIGABRT now and then. The stopping timer's thread held the connection; when that
    # thread released it last while the interpreter exited, DuckDB aborted the process
    # (duckdb/duckdb#13904). Every timer a filter starts is waited for (joined) before the
    # filter returns or fails, and a filter that fails closes its connection at once.
    import duckdb

    timers: list[Recorded] = []
    connections: list[Any] = []

    class Recorded(threading.Timer):
        joined = False

        def start(self) -> None:
            timers.append(self)
            super().start()

        def join(self, timeout: float | None = None) -> None:
            super().join(timeout)
            self.joined = not self.is_alive()

    connect = expressions._connect

    def recorded_connect(tables: dict[str, str] | None = None) -> Any:
        connections.append(connect(tables))
        return connections[-1]

    monkeypatch.setattr(threading, "Timer", Recorded)
    monkeypatch.setattr(expressions, "_connect", recorded_connect)
    schema = TABLES["frames"].schema
    with pytest.raises(UsageError):
        RowFilter("1=1; DROP TABLE frames", "frames", schema)
    with pytest.raises(duckdb.ConnectionException):
        connections[0].execute("SELECT 1")  # closed
    ok = RowFilter("conn_id = 1", "frames", schema)
    ok.apply(pa.RecordBatch.from_pylist([], schema=schema))
    assert len(timers) == 3 and all(t.joined for t in timers)
    # a filter's connection closes with the filter (and at exit, before the interpreter's
    # teardown: weakref.finalize runs at atexit), not when DuckDB's module is torn down
    connections[1].execute("SELECT 1")  # open while the filter lives
    del ok
    gc.collect()
    with pytest.raises(duckdb.ConnectionException):
        connections[1].execute("SELECT 1")


def test_sql_closes_its_connection_in_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As for filters: the query's thread must not be the one that releases the connection
    # last (duckdb#13904). When run_sql returns or fails, its connection is closed.
    import duckdb
    import pyarrow.parquet as pq

    path = tmp_path / "frames.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    connections: list[Any] = []
    connect = expressions._connect

    def recorded_connect(tables: dict[str, str] | None = None) -> Any:
        connections.append(connect(tables))
        return connections[-1]

    monkeypatch.setattr(expressions, "_connect", recorded_connect)
    assert run_sql("SELECT count(*) AS n FROM frames", {"frames": str(path)}).num_rows == 1
    with pytest.raises(UsageError):
        run_sql("SELECT nope FROM frames", {"frames": str(path)})
    assert len(connections) == 2
    for con in connections:
        with pytest.raises(duckdb.ConnectionException):
            con.execute("SELECT 1")
