"""EDGE: write tables as JSON lines, CSV or Parquet, batch by batch, to a file or standard output;
the journeys table as OpenTelemetry spans too (OTLP JSON lines).

Input: a format name, a destination and a table's schema; then Arrow record batches.
Output: bytes on a file or stdout.
Rules: the table's Arrow schema is written as is (Parquet keeps the column descriptions);
timestamps in JSON lines are ISO 8601 UTC strings with microseconds; maps become JSON objects
(and JSON text in CSV), binary values hex. Batches are written as they come, so memory holds
one batch, not the table. A file is written under a hidden temporary name in its folder and
renamed when complete: a reader never sees half a file, and a failed or interrupted write
leaves nothing behind (`abort`). A path that exists and is not a regular file (a device such
as /dev/stdout or /dev/full, a FIFO) is written in place: renaming over it would replace the
device with a file. Every failed write, flush or close is an OutputError (one line).
OTLP (`otlp`, journeys only): one ExportTraceServiceRequest per record batch per line, as the
OpenTelemetry Collector's file exporter writes them (dissector.tables.otlp makes them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson
import pyarrow as pa

from dissector.errors import OutputError, os_reason

if TYPE_CHECKING:  # imported by the writers of their format (~30 ms a text read need not pay)
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

FORMATS = ("jsonl", "csv", "parquet")
#: The journeys table as OpenTelemetry spans: OTLP JSON lines (dissector.tables.otlp).
OTLP = "otlp"
#: Rows of one Parquet row group: record batches are gathered (as Arrow, compact) up to it,
#: or up to ROW_GROUP_BYTES of Arrow data, whichever comes first: a read of every table
#: gathers a group per table (65,536 rows of the frames, messages, timeline and journeys
#: tables are 20 to 25 MB each; issue 42).
ROW_GROUP_ROWS = 65536
ROW_GROUP_BYTES = 8 << 20
#: File name extension of each format (a folder of tables holds NAME.EXT files).
EXTENSIONS = {"jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet"}
#: The OTLP file's name ends so (JSON lines: the OTLP file exporter's preferred .jsonl).
OTLP_EXTENSION = ".otlp.jsonl"


def otlp_lines(batch: pa.RecordBatch) -> bytes:
    """The journeys of a batch as one line of OTLP JSON (nothing for no rows)."""
    if not batch.num_rows:
        return b""
    from dissector.tables.otlp import export_line

    return export_line(batch, _version())


def _version() -> str | None:
    """This package's version (the spans' instrumentation scope's)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("pulsar-dissector")
    except importlib.metadata.PackageNotFoundError:
        return None


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def json_lines(batch: pa.RecordBatch, first: dict[str, Any] | None = None) -> bytes:
    """The rows of a batch as JSON lines (UTF-8, each ending in a newline); `first`: keys
    put at the start of every row (live's `{"table": NAME}`).

    orjson (a well-kept C encoder, 5x json's speed here) writes the rows; timestamps are
    written as datetime.isoformat() does (`_iso`, for a whole column at once: no datetime
    object per value); Arrow maps, which come out as lists of pairs, become objects; binary
    values hex. Rows are made column by column (a list per column, then zipped)."""
    names, columns = batch.schema.names, []
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if field.type == _UTC_US:
            column = _iso(column)
        values = column.to_pylist()
        if pa.types.is_map(field.type):
            values = [None if v is None else dict(v) for v in values]
        columns.append(values)
    dumps, default = orjson.dumps, _json_default
    parts = []
    if first:  # the row's own object, its opening brace replaced by `first`'s keys
        head = dumps(first)[:-1] + b","
        for values in zip(*columns, strict=True):
            parts.append(head + dumps(dict(zip(names, values, strict=True)), default=default)[1:])
    else:
        for values in zip(*columns, strict=True):
            parts.append(dumps(dict(zip(names, values, strict=True)), default=default))
    parts.append(b"")
    return b"\n".join(parts)


_UTC_US = pa.timestamp("us", "UTC")  # the tables' timestamps


def _iso(column: pa.Array) -> pa.Array:
    """Microsecond UTC timestamps as datetime.isoformat() writes them (seconds with their
    six-digit fraction, the fraction left out when it is zero; +00:00), computed by Arrow
    on the column's UTC wall time (no time zone database needed)."""
    import pyarrow.compute as pc

    text = pc.strftime(column.cast(pa.timestamp("us")), format="%Y-%m-%dT%H:%M:%S", locale="C")
    text = pc.replace_substring_regex(text, pattern=r"\.000000$", replacement="")
    return pc.binary_join_element_wise(text, "+00:00", "")


def _nested(t: pa.DataType) -> bool:
    return bool(pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_struct(t))


def flat_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a table as CSV holds it: nested and binary columns become text."""
    fields = [
        f.with_type(pa.string()) if _nested(f.type) or pa.types.is_binary(f.type) else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def _csv_writer(out: BinaryIO, schema: pa.Schema) -> pacsv.CSVWriter:
    import pyarrow.csv as pacsv

    return pacsv.CSVWriter(out, flat_schema(schema))


def flat(batch: pa.RecordBatch) -> pa.RecordBatch:
    """CSV holds no nested or binary values: those columns become JSON / hex text."""
    arrays = list(batch.columns)
    for i, field in enumerate(batch.schema):
        t = field.type
        if _nested(t):
            values = [
                None
                if v is None
                else json.dumps(dict(v) if pa.types.is_map(t) else v, default=_json_default)
                for v in arrays[i].to_pylist()
            ]
        elif pa.types.is_binary(t):
            values = [None if v is None else v.hex() for v in arrays[i].to_pylist()]
        else:
            continue
        arrays[i] = pa.array(values, type=pa.string())
    return pa.RecordBatch.from_arrays(arrays, schema=flat_schema(batch.schema))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def in_place(path: str) -> bool:
    """True for a path that exists and is not a regular file (device, FIFO, socket)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def open_output(path: str) -> tuple[BinaryIO, str | None]:
    """A binary file to write `path` through, and its hidden temporary name (None when the
    path is a device or FIFO, written in place). OSError when it cannot be made."""
    if in_place(path):
        return open(path, "wb"), None
    folder, name = os.path.split(os.path.abspath(path))
    fd, hidden = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
    os.fchmod(fd, 0o666 & ~_umask())  # as open() would have made it
    return os.fdopen(fd, "wb"), hidden


@contextlib.contextmanager
def hidden_file(path: str) -> Iterator[BinaryIO]:
    """A whole file written as TableWriter writes one: under a hidden temporary name in its
    folder, renamed to `path` when the block ends normally, removed when it ends by an
    exception (a device or FIFO is written in place); an OSError becomes our OutputError
    naming `path`."""
    try:
        out, hidden = open_output(path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {os_reason(exc)}") from None
    try:
        with out:
            yield out
        if hidden is not None:
            os.replace(hidden, path)
    except BaseException as exc:
        if hidden is not None:
            with contextlib.suppress(OSError):
                os.unlink(hidden)
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            raise OutputError(f"{path}: cannot write: {os_reason(exc)}") from None
        raise


class TableWriter:
    """Write one table's record batches in a format to a path (None or '-': stdout).

    Use as a context manager: leaving it normally completes the file (`close`); leaving it by
    an exception removes what was written (`abort`).
    """

    def __init__(self, fmt: str, path: str | None, schema: pa.Schema) -> None:
        if fmt not in (*FORMATS, OTLP):
            raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}, {OTLP}")
        if fmt == OTLP:
            from dissector.tables.otlp import missing_columns

            missing = missing_columns(schema)
            if missing:
                raise ValueError(f"otlp: spans of the journeys table; no {', '.join(missing)}")
        self.fmt, self.schema, self.rows = fmt, schema, 0
        self.path = None if path is None or path == "-" else os.fspath(path)
        self._hidden: str | None = None
        if self.path is None:
            self._out: BinaryIO = sys.stdout.buffer
        else:
            try:
                self._out, self._hidden = open_output(self.path)
            except OSError as exc:
                raise self._cannot(exc) from None
        self._parquet: pq.ParquetWriter | None = None
        self._csv: pacsv.CSVWriter | None = None
        self._group: list[pa.RecordBatch] = []  # Parquet: batches of the next row group
        self._group_rows = self._group_bytes = 0

    def _cannot(self, exc: OSError) -> OutputError:
        """Our error for a failed write: the path asked for (not the hidden name) and why."""
        if self.path is None:
            return OutputError(f"standard output: cannot write: {os_reason(exc)}")
        folder = os.path.dirname(os.path.abspath(self.path))
        if isinstance(exc, FileNotFoundError) and not os.path.isdir(folder):
            return OutputError(f"{self.path}: cannot write: no folder {folder}")
        return OutputError(f"{self.path}: cannot write: {os_reason(exc)}")

    def write(self, batch: pa.RecordBatch) -> None:
        try:
            self._write(batch)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._cannot(exc) from None

    def _write(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        if self.fmt == "parquet":
            if batch.num_rows:
                self._group.append(batch)
                self._group_rows += batch.num_rows
                self._group_bytes += batch.nbytes
                if self._group_rows >= ROW_GROUP_ROWS or self._group_bytes >= ROW_GROUP_BYTES:
                    self._write_group()
        elif self.fmt == "csv":
            if self._csv is None:
                self._csv = _csv_writer(self._out, self.schema)
            if batch.num_rows:
                self._csv.write_batch(flat(batch))
        elif self.fmt == OTLP:
            self._out.write(otlp_lines(batch))
        elif batch.num_rows:
            self._out.write(json_lines(batch))

    def _write_group(self) -> None:
        if self._parquet is None:
            import pyarrow.parquet as pq

            self._parquet = pq.ParquetWriter(self._out, self.schema)
        if self._group:
            group = pa.Table.from_batches(self._group, schema=self.schema)
            self._parquet.write_table(group, row_group_size=max(group.num_rows, 1))
        self._group, self._group_rows, self._group_bytes = [], 0, 0

    def close(self) -> None:
        """Complete the output: end the format, then give the file its name."""
        self.finish()
        self.publish()

    def finish(self) -> None:
        """End the format and flush: the file is complete, still under its hidden name."""
        try:
            self._finish()
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.abort()
            raise self._cannot(exc) from None

    def publish(self) -> None:
        """Give the finished file its name (nothing for standard output; a device or FIFO
        written in place is closed)."""
        if self.path is None or self._out.closed:
            return
        try:
            self._out.close()
            if self._hidden is not None:
                os.replace(self._hidden, self.path)
        except OSError as exc:
            self.abort()
            raise self._cannot(exc) from None
        self._hidden = None

    def _finish(self) -> None:
        if self.fmt == "parquet":
            self._write_group()  # the last rows, or an empty table
        if self.fmt == "csv" and self._csv is None:
            self._csv = _csv_writer(self._out, self.schema)  # header only
        for writer in (self._parquet, self._csv):
            if writer is not None:
                writer.close()
        self._out.flush()

    def abort(self) -> None:
        """Give up: nothing of the output is left on disk."""
        if self.path is not None:
            with contextlib.suppress(Exception):
                self._out.close()
        if self._hidden is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._hidden)
        self._hidden = None

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def write_table(table: pa.Table, fmt: str, path: str | None) -> None:
    """Write a whole table in `fmt` to `path`, or to standard output when path is None or '-'."""
    with TableWriter(fmt, path, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=8192):
            writer.write(batch)
