"""A batch's entries: as many as its payload really holds, not as many as it claims.

Input: a batched SEND or MESSAGE (metadata `num_messages_in_batch` = n, the claim), then
the messages extractor's rows of that frame (`AppMessage`s, which follow it).
Output: calls of `take(index)`: make (SEND) or deliver (MESSAGE) batch entry `index`, once
per entry the payload holds.
Rules:
- The entries are those the messages extractor split out of the payload (its rows with a
  batch index below the claim): a claim of 10,000 entries in a payload holding 3 makes 3
  rows (the extractor's `payload.batch_invalid` anomaly says the counts).
- When it split none (an encrypted payload, a codec or bytes it cannot decode), the entries
  are 0 .. k-1 with k the claim capped by the bytes that could carry them: one entry per
  MIN_ENTRY bytes of the payload's plain size, which is the payload's size, or for a
  compressed payload its `uncompressed_size` up to MAX_RATIO times its size. A payload too
  small for one entry gives the whole entry (index None): the delivery still has its row.
- A frame's rows come right after it (the pipeline publishes them before the next event),
  so the batch is settled by the next frame or connection event (`settle`; the frame's
  anomalies come among its rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissector.events import Frame
from dissector.journeys.state import MAX_BATCH

#: Bytes of the smallest batch entry: its 4-byte metadata size, then a SingleMessageMetadata
#: holding only its required `payload_size` (a tag byte and a one-byte varint), and an
#: empty payload (the binary protocol's batch format, proto/pulsar_api.proto).
MIN_ENTRY = 6
#: Plain bytes a compressed payload the dissector could not decode is taken to stand for,
#: per compressed byte, at most (its claimed `uncompressed_size` when smaller): batches of
#: like messages compress well, a claim of more is not backed by bytes.
MAX_RATIO = 16


def plain_bound(frame: Frame, meta: Any) -> int:
    """Plain bytes the frame's payload may stand for (module rule); the frame's size past its
    command and metadata when it carries no payload view (a recorded frame)."""
    if frame.payload is not None:
        size = len(frame.payload)
    else:
        size = max(0, frame.total_size - frame.command_size - (frame.metadata_size or 0))
    if meta is None or meta.compression == 0:
        return size
    claimed = meta.uncompressed_size if meta.HasField("uncompressed_size") else size
    return min(claimed, size * MAX_RATIO)


class ClaimedBatch:
    """One batched frame waiting for its rows; see the module docstring."""

    __slots__ = ("claimed", "conn_id", "plain", "split", "take")

    def __init__(
        self, conn_id: int, claimed: int, plain: int, take: Callable[[int | None], None]
    ) -> None:
        self.conn_id = conn_id
        self.claimed = min(claimed, MAX_BATCH)
        self.plain = plain
        self.take = take
        self.split = False  # the extractor split out at least one entry

    def entry(self, index: int | None) -> None:
        """A row of the frame: entry `index` is in the payload."""
        if index is not None and 0 <= index < self.claimed:
            self.split = True
            self.take(index)

    def settle(self) -> None:
        """No more rows of the frame: when none named an entry, the bound from bytes."""
        if self.split:
            return
        k = min(self.claimed, self.plain // MIN_ENTRY)
        if k == 0:
            self.take(None)
        for i in range(k):
            self.take(i)
