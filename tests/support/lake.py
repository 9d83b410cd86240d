"""A table the fleet job wrote, read back as a multiset of rows to compare row for row.

Input: the job's output folder and a table name, or an Arrow table.
Output: the rows as sorted reprs (hive partition columns dropped from the written ones).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads

from dissector.frontends.partitioned import PARTITIONS
from dissector.tables.schema import SCHEMAS


def lake_rows(out: Path, name: str) -> list[str]:
    """The rows of a written table, read back with pyarrow.dataset (hive partitions dropped),
    as sorted reprs: a multiset to compare row for row."""
    hive = pads.partitioning(PARTITIONS, flavor="hive")
    table = pads.dataset(out / name, format="parquet", partitioning=hive).to_table()
    return sorted(map(repr, table.select(SCHEMAS[name].names).to_pylist()))


def table_rows(table: pa.Table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))
