"""Hive-partitioned Parquet output: the tables' record batches in, a data lake's layout out.

Input: record batches of the tables (as a TableBuilder sink hands them over), the broker of
every connection (from ConversationOpened / Conversation events), a pyarrow filesystem and
base path, and the task number.
Output: BASE/<table>/capture_date=YYYY-MM-DD/broker=IP_PORT/part-TTTTT-NNN.parquet, the
layout DuckDB (`hive_partitioning=true`), Spark SQL, Trino and pyarrow.dataset read as one
dataset per table, with `capture_date` (date) and `broker` (string) as columns.
Rules:
- capture_date is the UTC date of the row's `ts`; a row without a time (`ts` null) goes to
  `__HIVE_DEFAULT_PARTITION__`, the name Hive, Spark and DuckDB read as null.
- broker is the connection's broker endpoint `<broker_ip>_<broker_port>` (every table joins
  its connection by `conn_id`; IPv6 colons become '-', as ':' is not allowed in Hadoop
  paths); rows of no connection (capture-level anomalies, the checks of a capture) go to
  `broker=__none__`.
- Partition values live in the directory names only, not in the files (engines reject a
  column found in both). Files are written through pyarrow.fs, so any filesystem pyarrow
  writes (local, S3, GCS, HDFS) works.
- Bounded: at most MAX_OPEN_FILES writers are open per task (the least recently used is
  closed; its partition gets a new file if it is written again), and the broker of a closed
  connection is forgotten once its rows are written (`forget`).
"""

from __future__ import annotations

import posixpath
from collections import OrderedDict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from dissector.events import FlowKey
from dissector.tables.schema import TABLES

#: Partition of rows that belong to no connection.
NO_BROKER = "__none__"
#: Hive's (and Spark's, DuckDB's) directory name for a null partition value.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: The partition columns, as pyarrow.dataset takes them:
#: `pyarrow.dataset.dataset(OUT/table, partitioning=pyarrow.dataset.partitioning(PARTITIONS,
#: flavor="hive"))` (inferring them fails on a table whose only partition is null).
PARTITIONS = pa.schema([("capture_date", pa.date32()), ("broker", pa.string())])
#: Parquet files open at once per task: each holds a column buffer, so memory and file
#: descriptors stay bounded however many brokers and days a task's captures cover.
MAX_OPEN_FILES = 64


def broker_key(key: FlowKey) -> str:
    """The partition value of a connection's broker endpoint."""
    _, _, broker_ip, broker_port = key
    return f"{broker_ip.replace(':', '-')}_{broker_port}"


class PartitionedWriter:
    """Writes the tables of one task into Hive partitions; see the module docstring."""

    def __init__(self, fs: pafs.FileSystem, base: str, task: int) -> None:
        self.fs, self.base, self.task = fs, base, task
        self.brokers: dict[int, str] = {}  # conn_id -> broker partition value
        self.counts = dict.fromkeys(TABLES, 0)
        self._writers: OrderedDict[tuple[str, str, str], pq.ParquetWriter] = OrderedDict()
        self._files: dict[tuple[str, str, str], int] = {}  # partition -> files started

    def connection(self, conn_id: int, key: FlowKey) -> None:
        """Remember the broker of a connection (before any of its rows is written)."""
        self.brokers[conn_id] = broker_key(key)

    def forget(self, conn_ids: list[int]) -> None:
        """Drop the brokers of connections whose rows have all been written."""
        for conn_id in conn_ids:
            self.brokers.pop(conn_id, None)

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        """Split a batch by partition and append each part to its partition's file."""
        if not batch.num_rows:
            return
        self.counts[table] += batch.num_rows
        dates = pc.fill_null(pc.strftime(batch.column("ts"), format="%Y-%m-%d"), NULL_PARTITION)
        brokers = self._brokers(batch.column("conn_id"))
        keys = pc.binary_join_element_wise(dates, brokers, "/")
        unique = pc.unique(keys)
        for key in unique.to_pylist():
            part = batch if len(unique) == 1 else batch.filter(pc.equal(keys, key))
            date, broker = key.split("/", 1)
            self._writer((table, date, broker)).write_batch(part)

    def _brokers(self, conn_ids: pa.Array) -> pa.Array:
        ids = pc.unique(conn_ids)
        names = pa.array([self.brokers.get(i, NO_BROKER) for i in ids.to_pylist()], pa.string())
        where = pc.index_in(conn_ids, value_set=ids)  # a null conn_id has no index
        return pc.fill_null(pc.take(names, where), NO_BROKER)

    def _writer(self, partition: tuple[str, str, str]) -> pq.ParquetWriter:
        writer = self._writers.get(partition)
        if writer is not None:
            self._writers.move_to_end(partition)
            return writer
        if len(self._writers) >= MAX_OPEN_FILES:
            _, oldest = self._writers.popitem(last=False)
            oldest.close()
        table, date, broker = partition
        folder = posixpath.join(self.base, table, f"capture_date={date}", f"broker={broker}")
        self.fs.create_dir(folder, recursive=True)
        n = self._files.get(partition, 0)
        self._files[partition] = n + 1
        path = posixpath.join(folder, f"part-{self.task:05d}-{n:03d}.parquet")
        writer = pq.ParquetWriter(path, TABLES[table].schema, filesystem=self.fs)
        self._writers[partition] = writer
        return writer

    def close(self) -> None:
        while self._writers:
            _, writer = self._writers.popitem(last=False)
            writer.close()


def write_empty(fs: pafs.FileSystem, base: str, table: str) -> None:
    """A schema-only file for a table without rows, in the null partition, so that reading
    the table (and its partition columns) never fails."""
    folder = posixpath.join(base, table, f"capture_date={NULL_PARTITION}", f"broker={NO_BROKER}")
    fs.create_dir(folder, recursive=True)
    path = posixpath.join(folder, "part-empty.parquet")
    pq.write_table(TABLES[table].schema.empty_table(), path, filesystem=fs)
