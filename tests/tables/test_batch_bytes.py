"""Batches and Parquet row groups are cut by the bytes of their large cells, not only rows.

Input: rows of the messages table with large `value` cells, fed to the builder's batches;
record batches of large strings fed to the Parquet writer.
Output: the number of batches and row groups made.
Rule (issue 42): a value's JSON may be 1 MiB; 16,384 such rows held until a batch is made
would be 16 GiB, so a batch is made once BATCH_BYTES of them are held, and a row group once
ROW_GROUP_BYTES of Arrow buffers are gathered.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dissector.tables import builders
from dissector.tables.output import ROW_GROUP_BYTES, TableWriter


def test_rows_with_large_cells_make_a_batch_before_batch_rows() -> None:
    made: list[pa.RecordBatch] = []
    schema = pa.schema([("value", pa.string())])
    batches = builders._Batches("t", schema, lambda name, b: made.append(b))
    cell = "x" * (1 << 20)  # a value at MAX_VALUE_JSON_BYTES
    rows = 3 * (builders.BATCH_BYTES >> 20)
    for _ in range(rows):
        batches.add((cell,), len(cell))
    batches.flush()
    # BATCH_BYTES / 1 MiB rows per batch, not one batch of BATCH_ROWS
    assert [b.num_rows for b in made] == [builders.BATCH_BYTES >> 20] * 3
    assert sum(b.num_rows for b in made) == rows < builders.BATCH_ROWS


def test_small_rows_still_make_batches_of_batch_rows() -> None:
    made: list[pa.RecordBatch] = []
    schema = pa.schema([("value", pa.string())])
    batches = builders._Batches("t", schema, lambda name, b: made.append(b))
    for _ in range(builders.BATCH_ROWS + 1):
        batches.add(("x",))
    batches.flush()
    assert [b.num_rows for b in made] == [builders.BATCH_ROWS, 1]


def test_parquet_row_groups_are_cut_by_bytes(tmp_path: Path) -> None:
    schema = pa.schema([("value", pa.string()), ("n", pa.int64())])
    path = tmp_path / "m.parquet"
    writer = TableWriter("parquet", str(path), schema)
    big = "y" * (4 << 20)
    per_group = ROW_GROUP_BYTES // len(big)
    for i in range(2 * per_group):
        writer.write(pa.RecordBatch.from_pydict({"value": [big], "n": [i]}, schema=schema))
    writer.close()
    meta = pq.ParquetFile(path).metadata
    assert meta.num_rows == 2 * per_group
    assert meta.num_row_groups == 2
