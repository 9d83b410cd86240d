"""The run driver leaves the process's garbage collector as its caller set it (issue 26).

The driver raises the GC threshold while it makes a batch (bulk reading makes millions of
short-lived records); a caller holding a suspended generator (`iter_events`, the Spark and
fleet executors' `iter_series`) must see its own threshold between two items, even one it
changed meanwhile, and a whole-call read (`read_tables`) restores it on return. Expected
values are the thresholds the test itself sets.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from dissector import ReaderOptions, iter_events, read_tables
from dissector.capture import merge as merge_mod
from dissector.read import driver, runs
from dissector.read.runs import iter_series

SAMPLE = Path(__file__).resolve().parents[2] / "pcaps" / "produce_consume.pcap"


@pytest.fixture
def own_threshold() -> Iterator[tuple[int, int, int]]:
    """A threshold of the caller's own (none of the defaults), put back afterwards."""
    before = gc.get_threshold()
    mine = (1234, 11, 12)
    gc.set_threshold(*mine)
    yield mine
    gc.set_threshold(*before)


def test_iter_events_leaves_the_callers_threshold_between_items(
    own_threshold: tuple[int, int, int],
) -> None:
    seen = []
    for n, _ in enumerate(iter_events(SAMPLE)):
        seen.append(gc.get_threshold())
        if n == 10:  # the caller changes its mind mid-read: that is what it sees next
            own_threshold = (4321, 13, 14)
            gc.set_threshold(*own_threshold)
        elif n > 10:
            assert seen[-1] == own_threshold, n
    assert len(seen) > 20
    assert set(seen[:11]) == {(1234, 11, 12)}
    assert gc.get_threshold() == own_threshold


def test_an_abandoned_iter_events_leaves_the_callers_threshold(
    own_threshold: tuple[int, int, int],
) -> None:
    events = iter_events(SAMPLE)
    next(events)
    assert gc.get_threshold() == own_threshold
    events.close()
    assert gc.get_threshold() == own_threshold


def test_iter_series_leaves_the_callers_threshold_between_items(
    own_threshold: tuple[int, int, int],
) -> None:
    seen = {gc.get_threshold() for _ in iter_series([str(SAMPLE)], ReaderOptions(), 3)}
    assert seen == {own_threshold}


def test_read_tables_restores_the_callers_threshold(
    own_threshold: tuple[int, int, int],
) -> None:
    assert read_tables(SAMPLE, tables=["frames"])["frames"].num_rows > 0
    assert gc.get_threshold() == own_threshold


def test_the_driver_collects_less_often_while_it_works(
    own_threshold: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a batch is made (the capture's packets read), the threshold is the driver's."""
    during: set[tuple[int, int, int]] = set()
    real = merge_mod.merged

    def watched(*args: object, **kw: object) -> Iterator[merge_mod.Item]:
        for item in real(*args, **kw):  # type: ignore[arg-type]
            during.add(gc.get_threshold())
            yield item

    monkeypatch.setattr(runs, "merged", watched)
    for _ in iter_events(SAMPLE):
        pass
    assert during == {(driver.GC_THRESHOLD, *own_threshold[1:])}
