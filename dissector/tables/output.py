"""EDGE: write tables as JSON lines, CSV or Parquet, to a file or standard output.

Input: a pyarrow.Table and a format name. Output: bytes on a file or stdout.
Rule: the table's Arrow schema is written as is (Parquet keeps the column descriptions);
timestamps in JSON lines are ISO 8601 UTC strings with microseconds; maps become JSON objects
(and JSON text in CSV), binary values hex.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

FORMATS = ("jsonl", "csv", "parquet")


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Arrow maps come out as lists of pairs: make them JSON objects."""
    for name, value in row.items():
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            row[name] = dict(value)
    return row


def json_row(row: dict[str, Any]) -> str:
    """One table row (as from RecordBatch.to_pylist) as a JSON line, without the newline."""
    return json.dumps(_plain(row), default=_json_default)


def write_table(table: pa.Table, fmt: str, path: str | None) -> None:
    """Write `table` in `fmt` to `path`, or to standard output when path is None or '-'."""
    if path in (None, "-"):
        _write(table, fmt, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    with Path(path).open("wb") as fh:
        _write(table, fmt, fh)


def _flat(table: pa.Table) -> pa.Table:
    """CSV holds no nested or binary values: those columns become JSON / hex text."""
    for i, field in enumerate(table.schema):
        t = field.type
        if pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_struct(t):
            values = [
                None
                if v is None
                else json.dumps(dict(v) if pa.types.is_map(t) else v, default=_json_default)
                for v in table.column(i).to_pylist()
            ]
        elif pa.types.is_binary(t):
            values = [None if v is None else v.hex() for v in table.column(i).to_pylist()]
        else:
            continue
        table = table.set_column(i, field.name, pa.array(values, type=pa.string()))
    return table


def _write(table: pa.Table, fmt: str, out: BinaryIO) -> None:
    if fmt == "parquet":
        pq.write_table(table, out)
    elif fmt == "csv":
        pacsv.write_csv(_flat(table), out)
    elif fmt == "jsonl":
        for batch in table.to_batches(max_chunksize=8192):
            lines = (json_row(row) for row in batch.to_pylist())
            out.write(("\n".join(lines) + "\n").encode() if batch.num_rows else b"")
    else:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
