"""Batches are cut by the bytes of their large cells, not only by rows.

Input: rows with large cells (as a value's JSON is), fed to the builder's batches.
Output: the batches made (Parquet row groups cut by bytes: tests/tables/test_row_groups.py).
Rule (issue 42): a value's JSON may be 1 MiB; BATCH_ROWS such rows held until a batch is made
would be 16 GiB, so a batch is made once BATCH_BYTES of them are held.
"""

from __future__ import annotations

import pyarrow as pa

from dissector.tables import builders


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
