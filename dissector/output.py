"""EDGE: write tables as JSON lines, CSV or Parquet, to a file or standard output.

Input: a pyarrow.Table and a format name. Output: bytes on a file or stdout.
Rule: the table's Arrow schema is written as is (Parquet keeps the column descriptions);
timestamps in JSON lines are ISO 8601 UTC strings with microseconds.
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


def write_table(table: pa.Table, fmt: str, path: str | None) -> None:
    """Write `table` in `fmt` to `path`, or to standard output when path is None or '-'."""
    if path in (None, "-"):
        _write(table, fmt, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    with Path(path).open("wb") as fh:
        _write(table, fmt, fh)


def _write(table: pa.Table, fmt: str, out: BinaryIO) -> None:
    if fmt == "parquet":
        pq.write_table(table, out)
    elif fmt == "csv":
        pacsv.write_csv(table, out)
    elif fmt == "jsonl":
        for batch in table.to_batches(max_chunksize=8192):
            lines = (json.dumps(row, default=_json_default) for row in batch.to_pylist())
            out.write(("\n".join(lines) + "\n").encode() if batch.num_rows else b"")
    else:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
