"""Parquet row groups are bounded in bytes as well as in rows (issue 42 item 7).

Input: record batches of a wide string column written through TableWriter.
Output: pass or fail: a row group is cut once ROW_GROUP_BYTES of Arrow data are gathered,
before ROW_GROUP_ROWS rows; every row is written.
Rule: sizes counted from the file's own metadata, never time.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dissector.tables.output import ROW_GROUP_BYTES, ROW_GROUP_ROWS, TableWriter


def test_a_row_group_is_cut_at_its_bytes(tmp_path: Path) -> None:
    schema = pa.schema([("text", pa.string())])
    rows = 1_000
    width = ROW_GROUP_BYTES // rows // 2 + 1  # two batches pass the bytes bound
    batch = pa.RecordBatch.from_pylist([{"text": "x" * width}] * rows, schema=schema)
    assert 2 * rows < ROW_GROUP_ROWS and 2 * batch.nbytes >= ROW_GROUP_BYTES
    out = tmp_path / "t.parquet"
    with TableWriter("parquet", str(out), schema) as writer:
        for _ in range(6):
            writer.write(batch)
    meta = pq.ParquetFile(out).metadata
    assert meta.num_rows == 6 * rows
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [2 * rows] * 3
