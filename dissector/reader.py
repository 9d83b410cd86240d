"""EDGE: read capture files through the pipeline into events or pandas tables.

Input: one or more capture paths and reader settings (broker ports, TLS ports, frame limit).
Output: `iter_events` streams pipeline events (memory stays flat for captures of any size);
`read_capture` returns a `Capture` whose attributes are pandas DataFrames.
Rule: each file is dissected on its own (connections do not span files); connection ids keep
counting across files so they stay unique in one result. Damage that ends a file's reading
becomes an anomaly row, never an exception; a file that is not a capture raises InputError.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa

from dissector.capture import open_capture
from dissector.events import Anomaly
from dissector.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.messages import MessageExtractor
from dissector.payload import DEFAULT_MAX_UNCOMPRESSED
from dissector.pipeline import (
    DEFAULT_BROKER_PORTS,
    DEFAULT_TLS_PORTS,
    Pipeline,
    PipelineEvent,
)
from dissector.schema import SCHEMAS
from dissector.tables import TableBuilder

PathLike = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    broker_ports: frozenset[int] = DEFAULT_BROKER_PORTS
    tls_ports: frozenset[int] = DEFAULT_TLS_PORTS
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    messages: bool = True  # extract application messages (the messages table)
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
    payload_preview: int = 0  # bytes of each payload kept in the messages table (opt-in)

    @classmethod
    def make(cls, ports: Iterable[int] = (), **kw: Any) -> ReaderOptions:
        """Options with `ports` added to the default broker ports."""
        return cls(broker_ports=DEFAULT_BROKER_PORTS | frozenset(ports), **kw)


def _paths(paths: PathLike | Iterable[PathLike]) -> list[str]:
    if isinstance(paths, str | os.PathLike):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def iter_file(
    path: PathLike, options: ReaderOptions, first_conn_id: int = 1
) -> Generator[PipelineEvent, None, int]:
    """Events of one capture file. The generator's return value is the next free conn id."""
    pipe = Pipeline(
        broker_ports=options.broker_ports,
        tls_ports=options.tls_ports,
        max_frame_size=options.max_frame_size,
        first_conn_id=first_conn_id,
        messages=MessageExtractor(
            max_uncompressed=options.max_uncompressed, preview=options.payload_preview
        )
        if options.messages
        else None,
    )
    last_ts = 0
    with open_capture(path) as reader:
        for pkt in reader:
            last_ts = pkt.ts
            yield from pipe.feed(pkt)
        for issue in reader.issues:
            yield Anomaly.of(
                issue.code,
                conn_id=0,
                direction=None,
                stream_offset=None,
                detail=f"{os.fspath(path)}: {issue.detail} (file offset {issue.offset})",
                packet=issue.packet,
                ts=last_ts,
            )
    yield from pipe.close()
    return pipe.next_conn_id


def iter_events(
    paths: PathLike | Iterable[PathLike], options: ReaderOptions | None = None
) -> Iterator[tuple[str, PipelineEvent]]:
    """(capture path, event) for every event of every capture, in order."""
    options = options or ReaderOptions()
    next_id = 1
    for path in _paths(paths):
        events = iter_file(path, options, next_id)
        while True:
            try:
                ev = next(events)
            except StopIteration as stop:
                next_id = stop.value
                break
            yield path, ev


#: Arrow -> pandas: nullable integer and boolean columns stay integers and booleans.
_PANDAS_TYPES = {
    pa.int64(): pd.Int64Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """A table as a DataFrame with nullable Int64/Int32/boolean columns (not float/object)."""
    return table.to_pandas(types_mapper=_PANDAS_TYPES.get)


@dataclass
class Capture:
    """The tables of one or more captures as pandas DataFrames (Arrow tables in `.arrow`)."""

    arrow: dict[str, pa.Table] = field(repr=False)

    @property
    def frames(self) -> pd.DataFrame:
        return to_pandas(self.arrow["frames"])

    @property
    def messages(self) -> pd.DataFrame:
        return to_pandas(self.arrow["messages"])

    @property
    def timeline(self) -> pd.DataFrame:
        return to_pandas(self.arrow["timeline"])

    @property
    def entities(self) -> pd.DataFrame:
        return to_pandas(self.arrow["entities"])

    @property
    def anomalies(self) -> pd.DataFrame:
        return to_pandas(self.arrow["anomalies"])

    @property
    def conversations(self) -> pd.DataFrame:
        return to_pandas(self.arrow["conversations"])


def read_tables(
    paths: PathLike | Iterable[PathLike], options: ReaderOptions | None = None
) -> dict[str, pa.Table]:
    """Every table of the captures, as Arrow tables."""
    builders: dict[str, TableBuilder] = {}
    for path, ev in iter_events(paths, options):
        builder = builders.get(path)
        if builder is None:
            builder = builders[path] = TableBuilder(capture=path)
        builder.add(ev)
    names = tuple(SCHEMAS)
    if not builders:
        builders[""] = TableBuilder()
    per_file = [b.tables() for b in builders.values()]
    return {n: pa.concat_tables([t[n] for t in per_file]) for n in names}


def read_capture(
    paths: PathLike | Iterable[PathLike],
    *,
    ports: Iterable[int] = (),
    tls_ports: Iterable[int] = DEFAULT_TLS_PORTS,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
    payload_preview: int = 0,
) -> Capture:
    """Dissect captures into tables: `.frames`, `.messages`, `.anomalies`, `.conversations`,
    `.timeline` (request/response pairs with latency) and `.entities` (producers, consumers).

    ports: extra broker ports, added to the defaults (6650 plain, 6651 TLS).
    payload_preview: keep the first N bytes of every payload (escaped) in the messages table.
    """
    options = ReaderOptions.make(
        ports,
        tls_ports=frozenset(tls_ports),
        max_frame_size=max_frame_size,
        max_uncompressed=max_uncompressed,
        payload_preview=payload_preview,
    )
    return Capture(read_tables(paths, options))
