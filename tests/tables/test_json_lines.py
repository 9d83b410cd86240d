"""JSON lines of table rows (dissector.tables.output.json_lines), made column by column.

The reference is the plain way, row by row: pyarrow's `to_pylist` (a datetime per
timestamp, which orjson writes as `datetime.isoformat()` does), maps made objects, binary
values hex, `first`'s keys put first; on every table of bundled samples (timestamps,
maps, lists, structs, binary, nulls) and on timestamps at the edges of what a datetime
holds, whole seconds (no fraction written) and before 1970.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from dissector.read import ReaderOptions, read_tables
from dissector.tables.output import _json_default, json_lines  # binary values: hex

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ["produce_consume.pcap", "batching.pcap", "compression_zstd.pcap", "seek.pcap"]


def row_by_row(batch: pa.RecordBatch, first: dict[str, Any] | None) -> bytes:
    maps = [f.name for f in batch.schema if pa.types.is_map(f.type)]
    lines = []
    for row in batch.to_pylist():
        for name in maps:
            if row[name] is not None:
                row[name] = dict(row[name])
        lines.append(orjson.dumps({**first, **row} if first else row, default=_json_default))
    return b"".join(line + b"\n" for line in lines)


@pytest.mark.parametrize("name", SAMPLES)
def test_every_table_of_a_sample(name: str) -> None:
    path = ROOT / "pcaps" / name
    assert path.exists(), path
    tables = read_tables(path, ReaderOptions())
    for table_name, table in tables.items():
        for batch in table.to_batches():
            for first in (None, {"table": table_name}):
                assert json_lines(batch, first) == row_by_row(batch, first), table_name


def test_timestamps_as_isoformat_writes_them() -> None:
    micros = [0, 1, 999_999, 1_000_000, -1, -1_000_000, -1_000_001, 1_700_000_000_000_000]
    micros += [253_402_300_799_999_999, -62_135_596_800_000_000]  # 9999-12-31, 0001-01-01
    ts = pa.array([*micros, None], type=pa.timestamp("us", "UTC"))
    batch = pa.RecordBatch.from_arrays([ts, pa.array(range(len(ts)))], names=["ts", "n"])
    got = json_lines(batch).splitlines()
    assert got[0] == b'{"ts":"1970-01-01T00:00:00+00:00","n":0}'  # whole second: no fraction
    assert got[1] == b'{"ts":"1970-01-01T00:00:00.000001+00:00","n":1}'
    assert got[4] == b'{"ts":"1969-12-31T23:59:59.999999+00:00","n":4}'
    assert got[-1] == b'{"ts":null,"n":10}'
    assert json_lines(batch) == row_by_row(batch, None)
