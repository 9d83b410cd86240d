"""One consumer's pending deliveries, in delivery order and by message id (cumulative acks).

Input: deliveries (`add`: a message id (ledger, entry) and what is kept of it), removals (the
caller deletes from `live` as it likes: an individual ack, a bound, the end), and cumulative
acks (`take_upto`: every pending id at or below an id).
Output: `live`, the pending deliveries by id in first-delivery order (a redelivery keeps its
id's place); `latest`, them in latest-delivery order; from `take_upto`, the (id, value)
pairs it covers, taken out of `live`, in latest-delivery order: exactly what scanning
`latest` for ids <= the acked one would give.
Rule: beside `live`, a heap of (ledger, entry, serial) with lazy deletion: a heap entry counts
only while its id is in `live` and `serials` gives it that serial (the serial of its latest
delivery). Removals and redeliveries leave entries behind that are skipped when they come up,
and the heap is rebuilt from its entries still counting when it holds more than twice what is
live (plus 64). Each delivery pushes one entry, popped or dropped once: a cumulative ack costs
what it takes out (times log n), never a scan of everything pending.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["Deliveries"]

V = TypeVar("V")


class Deliveries(Generic[V]):
    """See the module docstring."""

    __slots__ = ("heap", "live", "next_serial", "serials")

    def __init__(self) -> None:
        self.live: OrderedDict[tuple[int, int], V] = OrderedDict()
        self.heap: list[tuple[int, int, int]] = []  # (ledger, entry, serial)
        self.serials: dict[tuple[int, int], int] = {}  # id -> serial of its latest delivery
        self.next_serial = 0

    def __len__(self) -> int:
        return len(self.live)

    def add(self, key: tuple[int, int], value: V) -> V | None:
        """A delivery of `key`, last in latest-delivery order (in `live`, a pending id keeps
        its place); the value it replaces, if pending."""
        live = self.live
        old = live.get(key)
        live[key] = value
        serial = self.next_serial
        self.next_serial = serial + 1
        self.serials[key] = serial
        heapq.heappush(self.heap, (key[0], key[1], serial))
        if len(self.heap) > 2 * len(live) + 64:
            self._compact()
        return old

    def latest(self) -> list[tuple[tuple[int, int], V]]:
        """The pending (id, value) pairs in latest-delivery order."""
        serials = self.serials
        return sorted(self.live.items(), key=lambda item: serials[item[0]])

    def take_upto(self, upto: tuple[int, int]) -> list[tuple[tuple[int, int], V]]:
        """Take out of `live` every id <= `upto`; (id, value) pairs in latest-delivery
        order."""
        heap, live, serials = self.heap, self.live, self.serials
        found: list[tuple[int, tuple[int, int]]] = []
        while heap and (heap[0][0], heap[0][1]) <= upto:
            ledger, entry, serial = heapq.heappop(heap)
            key = (ledger, entry)
            if serials.get(key) != serial:
                continue  # delivered again since: a later entry stands for it
            del serials[key]
            if key in live:
                found.append((serial, key))
        found.sort()
        return [(key, live.pop(key)) for _, key in found]

    def _compact(self) -> None:
        """Drop the heap entries that no longer count (and the serials of ids gone)."""
        live, serials = self.live, self.serials
        self.serials = {k: s for k, s in serials.items() if k in live}
        kept = self.serials
        self.heap = [e for e in self.heap if kept.get((e[0], e[1])) == e[2]]
        heapq.heapify(self.heap)
