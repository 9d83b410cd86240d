"""A batch's entries as the journeys make them: those its payload holds, else the claim.

Input: a batched SEND or MESSAGE (metadata `num_messages_in_batch` = n, the claim), then
the messages extractor's rows of that frame (`AppMessage`s, which follow it).
Output: calls of `take(index)`: make (SEND) or deliver (MESSAGE) batch entry `index`, once
per entry.
Rules (the count is the facts layer's rule, dissector.facts.batches):
- The entries are those the messages extractor split out of the payload (its rows with a
  batch index below the claim): a claim of 10,000 entries in a payload holding 3 makes 3
  rows (the extractor's `payload.batch_invalid` anomaly says the counts).
- When it split none (an encrypted payload, a codec or bytes it cannot decode), the claim
  stands, bounded by the bytes that could carry it (`facts.batches.carried`). A payload too
  small for one entry gives the whole entry (index None): the delivery still has its row.
- A frame's rows come right after it (the pipeline publishes them before the next event),
  so the batch is settled by the next frame or connection event (`settle`; the frame's
  anomalies come among its rows).
"""

from __future__ import annotations

from collections.abc import Callable

from dissector.facts.batches import bounded, carried


class ClaimedBatch:
    """One batched frame waiting for its rows; see the module docstring."""

    __slots__ = ("claimed", "conn_id", "plain", "split", "take")

    def __init__(
        self, conn_id: int, claimed: int, plain: int, take: Callable[[int | None], None]
    ) -> None:
        self.conn_id = conn_id
        self.claimed = bounded(claimed)
        self.plain = plain
        self.take = take
        self.split = False  # the extractor split out at least one entry

    def entry(self, index: int | None) -> None:
        """A row of the frame: entry `index` is in the payload."""
        if index is not None and 0 <= index < self.claimed:
            self.split = True
            self.take(index)

    def settle(self) -> None:
        """No more rows of the frame: when none named an entry, the claim by the bytes."""
        if self.split:
            return
        k = carried(self.claimed, self.plain)
        if k == 0:
            self.take(None)
        for i in range(k):
            self.take(i)
