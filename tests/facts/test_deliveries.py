"""Deliveries: pending deliveries in first-delivery order, taken out by cumulative acks by id.

Expected values come from the rule itself, run the slow way: a cumulative ack up to an id
covers every pending id <= it, in latest-delivery order (a scan of an OrderedDict where a
redelivery moves its id to the end, as pairing did before issue 42), on random deliveries,
redeliveries, individual acks and removals; `live` keeps each id where it was first
delivered (a second OrderedDict where a redelivery keeps its place).
"""

from __future__ import annotations

from collections import OrderedDict
from random import Random

from dissector.facts.deliveries import Deliveries


def test_take_upto_is_the_scan_of_everything_pending() -> None:
    for seed in range(20):
        rng = Random(seed)
        d: Deliveries[int] = Deliveries()
        model: OrderedDict[tuple[int, int], int] = OrderedDict()  # latest-delivery order
        first: OrderedDict[tuple[int, int], int] = OrderedDict()  # first-delivery order
        for step in range(600):
            key = (rng.randrange(3), rng.randrange(40))
            op = rng.random()
            if op < 0.55:  # a delivery (again: a redelivery, moved to the end of `model`)
                old = model.pop(key, None)
                model[key] = first[key] = step
                assert d.add(key, step) == old
                assert len(d.heap) <= 2 * len(d.live) + 64  # rebuilt beyond its bound
            elif op < 0.75:  # an individual ack, or a bound forgetting the first delivered
                if rng.random() < 0.5:
                    model.pop(key, None)
                    first.pop(key, None)
                    d.live.pop(key, None)
                elif first:
                    gone = first.popitem(last=False)
                    del model[gone[0]]
                    assert gone == d.live.popitem(last=False)
            else:
                want = [(k, v) for k, v in model.items() if k <= key]
                for k, _ in want:
                    del model[k], first[k]
                assert d.take_upto(key) == want, (seed, step)
            assert list(d.live.items()) == list(first.items())
            assert d.latest() == list(model.items())
            assert len(d.serials) <= len(d.heap)


def test_cleared_live_leaves_nothing_to_take() -> None:
    d: Deliveries[str] = Deliveries()
    for e in range(5):
        d.add((1, e), f"m{e}")
    d.live.clear()  # what the end of a connection does
    assert d.take_upto((9, 9)) == []
    d.add((1, 2), "again")
    assert d.take_upto((1, 3)) == [((1, 2), "again")]


def test_redelivered_again_and_again_the_heap_stays_bounded() -> None:
    """Each redelivery leaves an entry behind: the heap is rebuilt before it holds more than
    twice what is pending (plus 64), and what it takes is still in delivery order."""
    d: Deliveries[int] = Deliveries()
    peak = 0
    for i in range(3000):
        d.add((7, i % 3), i)
        peak = max(peak, len(d.heap))
    assert peak <= 2 * 3 + 64
    assert d.take_upto((7, 2)) == [((7, 0), 2997), ((7, 1), 2998), ((7, 2), 2999)]
