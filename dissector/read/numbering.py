"""EDGE: connection numbering, decided here for every kind of read.

Input: a read's settings and its groups (ReaderOptions; group indexes from
dissector.capture.merge); for -j reads, what each worker opened.
Output: the first conn_id of each group's pipeline (`Numbering`); for -j reads, each
worker's conn_ids mapped to those one process gives (`renumbering`, `renumber`).
Rules:
- One process numbers connections 1, 2, ... by the packet that opened them, on from one
  group of captures to the next: ids are small and unique across one read.
- A group numbered in its own range starts at group index * CONN_ID_STRIDE + 1
  (`range_start`): the -j workers (each sees only its shard, so it cannot know how many
  connections other workers opened before), Spark and the fleet job (each series read on its
  own by an executor, no coordination) and local reads with `per_series_ids` (so local and
  Spark tables compare row for row). The range is far larger than any capture's connections.
- A -j read's ids are renumbered after the workers end to those of one process: per group, by
  the packet that opened each connection (ties: worker order), on from group to group, or
  from the group's own range with `per_series_ids`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dissector.read.options import ReaderOptions

#: conn_id = series index * CONN_ID_STRIDE + n: unique across every capture of one read,
#: and the same whichever process (pandas here, a Spark executor) dissects the series.
CONN_ID_STRIDE = 1 << 32

#: group index -> [(packet that opened it, local conn_id)] in opening order (-j workers).
Opened = dict[int, list[tuple[int, int]]]


def range_start(group: int) -> int:
    """The first conn_id of a group (or series) numbered in its own range."""
    return group * CONN_ID_STRIDE + 1


class Numbering:
    """Where each group's connections start, in one read (see the module rules)."""

    __slots__ = ("next_id", "own_ranges")

    def __init__(self, options: ReaderOptions) -> None:
        #: each group in its own range: sharded workers, and per-series numbering
        self.own_ranges = options.shard is not None or options.per_series_ids
        self.next_id = 1  # one process: the id the next group starts at

    def first(self, group: int) -> int:
        """The first conn_id of group `group`."""
        return range_start(group) if self.own_ranges else self.next_id

    def ended(self, next_id: int) -> None:
        """A group ended, its pipeline's next conn_id being `next_id`."""
        self.next_id = next_id


def renumbering(opened: list[Opened], per_series: bool = False) -> list[dict[int, np.ndarray]]:
    """Per worker, per group: local connection number -> conn_id of a one-process read,
    which numbers connections by the packet that opened them, on from group to group (or
    from each series' own range: ReaderOptions.per_series_ids)."""
    out: list[dict[int, np.ndarray]] = [{} for _ in opened]
    first = 1  # the conn_id of the group's first connection
    for index in sorted({i for worker in opened for i in worker}):
        base = range_start(index)
        if per_series:
            first = base
        order = sorted(
            (packet, k, local)
            for k, worker in enumerate(opened)
            for packet, local in worker.get(index, [])
        )
        luts = {k: np.zeros(len(w.get(index, [])), dtype=np.int64) for k, w in enumerate(opened)}
        for rank, (_, k, local) in enumerate(order):
            luts[k][local - base] = first + rank
        for k, lut in luts.items():
            out[k][index] = lut
        first += len(order)
    return out


def int64_values(column: pa.Array) -> np.ndarray:
    """The values of an int64 column without nulls, read in place (pyarrow's to_numpy goes
    through its pandas conversion, which imports pandas: a second of a -j read's end)."""
    if column.null_count:
        converted: np.ndarray = column.to_numpy(zero_copy_only=False)
        return converted
    data = column.buffers()[1]
    assert data is not None
    return np.frombuffer(data, dtype=np.int64, count=len(column), offset=column.offset * 8)


def renumber(batch: pa.RecordBatch, luts: dict[int, np.ndarray]) -> pa.RecordBatch:
    """A worker's record batch with its conn_ids as one process gives them (`renumbering`)."""
    at = batch.schema.get_field_index("conn_id")
    ids = int64_values(batch.column(at))
    new = ids.copy()
    for index, lut in luts.items():
        local = ids - range_start(index)
        hit = (local >= 0) & (local < len(lut))
        new[hit] = lut[local[hit]]
    return batch.set_column(at, batch.schema.field(at), pa.array(new, type=pa.int64()))
