"""Frames table rows of frame runs, made as Arrow columns from the runs' blocks.

Input: `FrameRun`s (dissector.pulsar.frame_runs: frames of SEND, SEND_RECEIPT and MESSAGE
taken whole by the compiled scan, their topics set by the pipeline), each with its
connection's FlowKey fields and Community ID; and rows of the same batch made by the row
function from `Frame`s, with their places.
Output: `RunRows`, gathering runs for one record batch of the frames table; `batch(...)`: the
frames record batch of the rows in the order they came.
Rule: every value is the one the frames table's row function (dissector.tables.per_frame)
gives the same frame's `Frame`: a field is null exactly when the frame does not set it
(the scan's present bits), uint64 ids stay int64 as columns.i64 keeps them, the broker entry
timestamp as columns.ms converts it. A run's rows are columns from the start: numpy reads
the blocks, per-run values are repeated, no Python object is made per row except the topic
string the pipeline already holds. tests/core/test_frame_runs.py compares whole tables.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa

from dissector.events import Checksum, FrameRun
from dissector.pulsar import frame_runs as R
from dissector.pulsar.wire import COMMAND_NAMES

#: A connection as frame rows show it (dissector.tables.builders.ConnInfo).
ConnInfo = tuple[str | None, int | None, str | None, int | None, str | None]

_I64 = pa.int64()
_MAX_MS = 253_402_300_799_999  # dissector.tables.columns.ms: the last millisecond of 9999


@cache
def _names() -> tuple[pa.Array, pa.Array]:
    """Command names by type (the types a run may hold; other entries are never read) and
    checksum names by the scan's verdict (0: not a payload frame: null). Made at the first
    batch, not at import: pyarrow's conversion of Python lists imports pandas, which a text
    read never needs (tests/test_startup.py)."""
    names = pa.array([COMMAND_NAMES.get(t, "") for t in range(64)], pa.string())
    verdicts = [None, Checksum.ABSENT.value, Checksum.VALID.value, Checksum.INVALID.value]
    return names, pa.array(verdicts, pa.string())


class RunRows:
    """The runs gathered for one record batch, and where each starts among its rows: a few
    list appends a run; the runs themselves are not kept."""

    __slots__ = (
        "bases",
        "blocks",
        "count",
        "firsts",
        "keys",
        "lasts",
        "sides",
        "sizes",
        "starts",
        "times",
        "topics",
        "which",
    )

    def __init__(self) -> None:
        self.count = 0  # rows of the runs
        self.clear()

    def add(self, run: FrameRun, conn: ConnInfo, place: int) -> None:
        key = (run.conn_id, run.direction)
        side = self.keys.get(key)
        if side is None:
            side = self.keys[key] = len(self.sides)
            self.sides.append((run.conn_id, run.direction.value, *conn))
        self.which.append(side)
        self.sizes.append(run.size)
        self.starts.append(place)
        self.bases.append(run.base)
        self.blocks.append(run.rows)
        self.count += run.size
        self.firsts += run.first_packets
        self.lasts += run.last_packets
        self.times += run.last_ts
        self.topics += run.topics if run.topics is not None else [None] * run.size

    def clear(self) -> None:
        self.count = 0
        # per run: its connection side (an index into `sides`), size, place, base, block
        self.keys: dict[tuple[int, Any], int] = {}
        self.sides: list[tuple[Any, ...]] = []  # (conn_id, direction, *ConnInfo)
        self.which: list[int] = []
        self.sizes: list[int] = []
        self.starts: list[int] = []  # each run's first row's place in the batch
        self.bases: list[int] = []
        self.blocks: list[bytes] = []
        # per row, the runs' lists joined as they come (one C-level extend a run)
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.times: list[int] = []
        self.topics: list[str | None] = []


def split(run: FrameRun, k: int) -> tuple[FrameRun, FrameRun]:
    """The run's first k frames and the rest, as two runs."""
    cut = k * R.NCOLS * 8
    head = run._replace(
        size=k,
        rows=run.rows[:cut],
        first_packets=run.first_packets[:k],
        last_packets=run.last_packets[:k],
        last_ts=run.last_ts[:k],
        topics=None if run.topics is None else run.topics[:k],
    )
    tail = run._replace(
        size=run.size - k,
        rows=run.rows[cut:],
        first_packets=run.first_packets[k:],
        last_packets=run.last_packets[k:],
        last_ts=run.last_ts[k:],
        topics=None if run.topics is None else run.topics[k:],
    )
    return head, tail


def batch(
    schema: pa.Schema, rows: pa.RecordBatch | None, places: list[int], runs: RunRows
) -> pa.RecordBatch:
    """The record batch of `rows` (made by the row function, at `places` in the batch) and
    of `runs`' rows, in their places."""
    sizes = np.array(runs.sizes, dtype=np.int64)
    made = _columns(schema, runs, sizes)
    if rows is None or rows.num_rows == 0:
        return made
    # each run row's place: its run's place plus its index within the run
    firsts = np.cumsum(sizes) - sizes
    within = np.arange(runs.count, dtype=np.int64) - np.repeat(firsts, sizes)
    order = np.concatenate(
        [np.array(places, dtype=np.int64), np.repeat(np.array(runs.starts), sizes) + within]
    )
    both = pa.Table.from_batches([rows, made]).combine_chunks()
    return both.take(pa.array(np.argsort(order, kind="stable"))).to_batches()[0]


def _columns(schema: pa.Schema, runs: RunRows, sizes: Any) -> pa.RecordBatch:
    """The frames table's columns for the runs' rows, in the runs' order."""
    names, verdicts = _names()
    m = np.frombuffer(b"".join(runs.blocks), dtype=np.int64).reshape(-1, R.NCOLS)
    which = pa.array(np.repeat(np.array(runs.which, dtype=np.int64), sizes))
    sides = list(zip(*runs.sides, strict=True))  # per column of `sides`, its values

    def per_run(k: int, typ: pa.DataType) -> pa.Array:
        return pa.array(sides[k], typ).take(which)

    def col(k: int) -> Any:
        return m[:, k]

    present = col(R.C_PRESENT)

    def where(bit: int, values: Any, typ: pa.DataType = _I64) -> pa.Array:
        return pa.array(values, typ, mask=(present & bit) == 0)

    verdict = col(R.C_CHECKSUM)
    crc = verdict >= 2  # valid or invalid: both CRC32C known
    entry_ts = col(R.C_ENTRY_TS)
    ts_ok = ((present & R.HAS_ENTRY_TS) != 0) & (entry_ts >= 0) & (entry_ts <= _MAX_MS)
    bases = np.repeat(np.array(runs.bases, dtype=np.int64), sizes)
    values: dict[str, pa.Array] = {
        "ts": pa.array(runs.times, pa.int64()),
        "conn_id": per_run(0, pa.int64()),
        "direction": per_run(1, pa.string()),
        "client_ip": per_run(2, pa.string()),
        "client_port": per_run(3, pa.int64()),
        "broker_ip": per_run(4, pa.string()),
        "broker_port": per_run(5, pa.int64()),
        "community_id": per_run(6, pa.string()),
        "first_packet": pa.array(runs.firsts, pa.int64()),
        "last_packet": pa.array(runs.lasts, pa.int64()),
        "stream_offset": pa.array(bases + col(R.C_OFFSET)),
        "frame_size": pa.array(col(R.C_TOTAL) + 4),
        "command": names.take(pa.array(col(R.C_TYPE))),
        "request_id": where(R.HAS_REQUEST_ID, col(R.C_REQUEST_ID)),
        "producer_id": where(R.HAS_PRODUCER_ID, col(R.C_PRODUCER_ID)),
        "consumer_id": where(R.HAS_CONSUMER_ID, col(R.C_CONSUMER_ID)),
        "sequence_id": where(R.HAS_SEQUENCE_ID, col(R.C_SEQUENCE_ID)),
        "topic": pa.array(runs.topics, pa.string()),
        "ledger_id": where(R.HAS_MESSAGE_ID, col(R.C_LEDGER_ID)),
        "entry_id": where(R.HAS_MESSAGE_ID, col(R.C_ENTRY_ID)),
        "checksum": verdicts.take(pa.array(verdict)),
        "checksum_expected": pa.array(col(R.C_CRC_EXPECTED), mask=~crc),
        "checksum_computed": pa.array(col(R.C_CRC_COMPUTED), mask=~crc),
        "broker_entry_timestamp": pa.array(entry_ts * 1000, mask=~ts_ok),
        "broker_entry_index": where(R.HAS_ENTRY_INDEX, col(R.C_ENTRY_INDEX)),
        "num_messages": where(
            R.HAS_NUM_MESSAGES, col(R.C_NUM_MESSAGES).astype(np.int32), pa.int32()
        ),
        "payload_size": where(R.HAS_PAYLOAD, col(R.C_PAYLOAD_LEN)),
        "complete": pa.array(np.ones(runs.count, dtype=bool)),
        "fields": pa.nulls(runs.count, pa.string()),
    }
    arrays = []
    for field in schema:
        array = values[field.name]
        if not array.type.equals(field.type):
            array = array.cast(field.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
