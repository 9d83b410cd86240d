"""What one connection's state machine keeps: what waits for an answer, and its entities.

Input: nothing (filled in by the transitions: `requests.py`, `acks.py`).
Output: `Store`, the per-connection maps the transitions share (requests by (direction,
request_id), SENDs by producer_id then sequence_id, FIFO requests, deliveries by consumer,
acked ids) with the count of what waits, its entities and schema facts, whether the
journeys' facts (`consumed`) and the lifecycle facts (`lifecycles`) are made, and `pair`, which
makes a completion fact (or a shared stand-in when no fact is wanted); `Fact`, what a frame
may complete.
Rule: every map is bounded by the machine (`bounds.MAX_PENDING` over all of them together,
`bounds.ACKED_MEMORY` per consumer); `_pending` counts what waits in them.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from functools import partial
from typing import Any

from dissector.events import (
    Acked,
    AckedIds,
    Delivered,
    Delivering,
    Direction,
    Frame,
    Handshake,
    Lifecycle,
    Outcome,
    Pair,
    Permits,
    RequestIdReused,
)
from dissector.facts.deliveries import Deliveries
from dissector.facts.entities import Entities
from dissector.facts.pairs import make_pair
from dissector.facts.schemas import SchemaFacts

__all__ = ["Fact", "Store"]

#: What a frame completes: a completion fact, a request sent with its id in flight, what
#: an ACK did to its consumer's unacknowledged deliveries, or a consumer's permits; and
#: what a MESSAGE or ACK says of its consumer's messages (the journeys' facts:
#: consumed.py); a producer's or consumer's step (lifecycles.py).
Fact = Pair | RequestIdReused | Acked | Permits | Delivering | AckedIds | Lifecycle | Handshake
#: Made in place of a Pair when no fact is wanted (pairs=False).
_NO_PAIR = Pair(
    0, None, None, Outcome.SUCCESS, None, None, None, None, None, None, None, None, None
)


def _no_pair(*args: Any, **kwargs: Any) -> Pair:
    return _NO_PAIR


class Store:
    """One connection's pending requests, SENDs and deliveries; see the module docstring."""

    def __init__(
        self,
        conn_id: int,
        pairs: bool,
        schemas: bool = False,
        consumed: bool = False,
        lifecycles: bool = False,
    ) -> None:
        self.conn_id = conn_id
        self.pairing = pairs
        self.consumed = consumed and pairs  # the journeys' facts (consumed.py) are made
        self.lifecycles = lifecycles and pairs  # the entities' steps (lifecycles.py) are made
        self.entities = Entities()
        self.schemas = SchemaFacts(conn_id, schemas)  # made only when wanted
        self._by_request: dict[tuple[Direction, int], Frame] = {}  # (direction, request_id)
        self._again: dict[tuple[Direction, int], list[Frame]] = {}  # the same key, in flight
        # producer_id -> sequence_id -> SEND frames, keys in the order first sent
        self._sends: dict[int, dict[int, deque[Frame]]] = {}
        self._fifo: dict[tuple[Direction, int], deque[Frame]] = {}  # (direction, type)
        # consumer_id -> (ledger, entry) -> its unacknowledged delivery, in first-delivery
        # order (and by id)
        self._delivered: dict[int, Deliveries[Delivered]] = {}
        # consumer_id -> (ledger, entry) -> packet number of the ACK that acknowledged it
        self._acked_ids: dict[int, OrderedDict[tuple[int, int], int]] = {}
        self._pending = 0
        #: (request, response, request_id, *, ack_of=, outcome=) -> the completion fact
        self.pair: Callable[..., Pair] = (
            partial(make_pair, conn_id, self.entities) if pairs else _no_pair
        )
