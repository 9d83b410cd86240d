"""EDGE: captures dissected into pandas DataFrames: `read_capture` and its `Capture`.

Input: capture paths (files, globs, directories, local or remote) and read_capture's keyword
settings; Arrow tables.
Output: a `Capture` whose attributes are pandas DataFrames (nullable integer and boolean
columns, categoricals for low-cardinality strings, durations also as timedelta64[us]).
Rule: pandas is imported only when a DataFrame is made (half a second: more than the command
line needs to read a small capture); each DataFrame is made once, on first access, and kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

from dissector.capture.listing import expand_captures
from dissector.errors import UsageError
from dissector.findings import Thresholds
from dissector.pipeline import DEFAULT_TLS_PORTS
from dissector.pulsar.decompression import DEFAULT_MAX_UNCOMPRESSED
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.read.options import KeylogPath, PathLike, ReaderOptions, as_paths
from dissector.read.tables import read_tables
from dissector.tables.schema import TABLES

if TYPE_CHECKING:
    import pandas as pd


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """A table as a DataFrame with nullable Int64/Int32/boolean columns (not float/object).

    pandas is imported here, when a DataFrame is asked for: it takes half a second, more
    than the command line needs to start and read a small capture."""
    import pandas as pd

    types = {
        pa.int64(): pd.Int64Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }
    return table.to_pandas(types_mapper=types.get)


#: String columns with few distinct values: categoricals in the DataFrames of `Capture`.
CATEGORICAL = frozenset(
    {
        "direction", "command", "checksum", "kind", "compression", "code", "severity",
        "ended", "request_command", "response_command", "request_direction", "outcome",
        "sub_type", "access_mode", "state", "auth_method", "unit", "trace_format",
    }
)  # fmt: skip
#: Integer microsecond durations, each also given as a timedelta64[us] column without the
#: `_us` suffix in the DataFrames of `Capture` (the integer column stays, as in the files).
DURATIONS = (
    "latency_us", "duration_us", "persist_us", "dispatch_us", "consume_us", "end_to_end_us",
    "broker_skew_us",
)  # fmt: skip


def to_friendly_pandas(table: pa.Table) -> pd.DataFrame:
    """`to_pandas`, then what a pandas user expects: low-cardinality strings as
    categoricals, durations also as timedelta64[us] (`latency` beside `latency_us`)."""
    import pandas as pd

    frame = to_pandas(table)
    for name in frame.columns:
        if name in CATEGORICAL and pa.types.is_string(table.schema.field(name).type):
            frame[name] = frame[name].astype("category")
    for name in DURATIONS:
        if name in frame.columns:
            at = frame.columns.get_loc(name) + 1
            values = pd.to_timedelta(frame[name].astype("float64"), unit="us")
            frame.insert(at, name.removesuffix("_us"), values.astype("timedelta64[us]"))
    return frame


class Capture:
    """The tables of one or more captures as pandas DataFrames (Arrow tables in `.arrow`).

    Each DataFrame is made once, on first access, and kept: edits to it persist. Low-
    cardinality strings are categoricals; durations are also timedelta64[us] columns.
    Only the tables read are available (`read_capture(..., tables=[...])`).
    """

    def __init__(self, arrow: dict[str, pa.Table], paths: list[str] | None = None) -> None:
        self.arrow = arrow
        self.paths = paths or []
        self._frames: dict[str, pd.DataFrame] = {}

    def table(self, name: str) -> pd.DataFrame:
        """The DataFrame of table `name` (made on first access, then kept)."""
        if name not in self._frames:
            if name not in self.arrow:
                read = ", ".join(self.arrow) or "none"
                raise UsageError(
                    f"table {name!r} was not read (read: {read}); "
                    f"read_capture(..., tables=[..., {name!r}]) reads it"
                )
            self._frames[name] = to_friendly_pandas(self.arrow[name])
        return self._frames[name]

    @property
    def frames(self) -> pd.DataFrame:
        return self.table("frames")

    @property
    def messages(self) -> pd.DataFrame:
        return self.table("messages")

    @property
    def timeline(self) -> pd.DataFrame:
        return self.table("timeline")

    @property
    def entities(self) -> pd.DataFrame:
        return self.table("entities")

    @property
    def anomalies(self) -> pd.DataFrame:
        return self.table("anomalies")

    @property
    def conversations(self) -> pd.DataFrame:
        return self.table("conversations")

    @property
    def findings(self) -> pd.DataFrame:
        return self.table("findings")

    @property
    def checks(self) -> pd.DataFrame:
        return self.table("checks")

    @property
    def journeys(self) -> pd.DataFrame:
        return self.table("journeys")

    def __repr__(self) -> str:
        files = ", ".join(self.paths[:3]) + (
            f" (+{len(self.paths) - 3})" if len(self.paths) > 3 else ""
        )
        rows = ", ".join(f"{name}={table.num_rows}" for name, table in self.arrow.items())
        return f"Capture({files or 'no files'}: {rows})"


def read_capture(
    paths: PathLike | Iterable[PathLike],
    *,
    ports: Iterable[int] = (),
    tls_ports: Iterable[int] = DEFAULT_TLS_PORTS,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
    payload_preview: int = 0,
    values: bool = False,
    redact_fields: str = "",
    series: str = "auto",
    tables: Iterable[str] | None = None,
    fields: bool = False,
    merge: bool = True,
    s3_endpoint: str | None = None,
    tls_keylog: KeylogPath | Iterable[KeylogPath] = (),
    thresholds: Thresholds | None = None,
) -> Capture:
    """Dissect captures into tables: `.frames`, `.messages`, `.anomalies`, `.conversations`,
    `.timeline` (request/response pairs with latency), `.entities` (producers, consumers)
    `.findings` (diagnoses: what went wrong, with evidence; dissector.findings), `.checks`
    (what the diagnoses checked and could not know: the clean bill) and `.journeys` (each
    message from its SEND to each subscription's ACK, docs/journeys.md).

    ports: extra broker ports, added to the defaults (6650 plain, 6651 TLS).
    payload_preview: keep the first N bytes of every payload (escaped) in the messages table.
    values: decode every message's payload by the schema the capture carries (the `value`,
    `value_schema` and `value_error` columns of messages and journeys; docs/values.md);
    off by default: payloads are the user's data.
    redact_fields: with values, fields masked in every value ("a.b,c": dotted paths, a
        name holding a dot backquoted: "`card.number`"); refused with payload_preview.
    tables: the tables to make (default: every one); fewer is faster (the frames table
    alone needs no payload decoding).
    fields: make the frames table's `fields` column (every field of the command as JSON);
    it costs about as much as the rest of the frames row, so it is null unless asked for.
    merge: captures taken at the same time merge by timestamp (mergecap); False reads
    them one after another (mergecap -a).
    paths: files, globs or directories, local or remote (`s3://`, `gs://`, `hdfs://`, ...).
    s3_endpoint: an S3 endpoint URL other than AWS (default: AWS_ENDPOINT_URL_S3, then
    AWS_ENDPOINT_URL).
    tls_keylog: NSS key log files (SSLKEYLOGFILE) to decrypt TLS sessions with (TLS 1.3 and
    1.2; AES-GCM, ChaCha20-Poly1305, AES-CBC); an unreadable one raises InputError.
    thresholds: the findings' rules' thresholds (dissector.findings.Thresholds; default: the
    official clients' settings).
    """
    options = ReaderOptions.make(
        ports,
        tls_ports=frozenset(tls_ports),
        max_frame_size=max_frame_size,
        max_uncompressed=max_uncompressed,
        payload_preview=payload_preview,
        values=values,
        redact_fields=redact_fields,
        series=series,
        fields=fields,
        s3_endpoint=s3_endpoint,
        merge=merge,
        tls_keylog=tuple(as_paths(tls_keylog, "tls_keylog")) if tls_keylog else (),
        thresholds=thresholds or Thresholds(),
    )
    names = list(TABLES) if tables is None else list(tables)
    unknown = sorted(set(names) - set(TABLES))
    if unknown:
        raise UsageError(f"no table {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    files = expand_captures(as_paths(paths), s3_endpoint)
    return Capture(read_tables(files, options, names), files)
