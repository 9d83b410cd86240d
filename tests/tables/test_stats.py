"""dissector.tables.stats: the one latency aggregator of summary, report and the fleet job.

Expected values are computed by hand from the rule the module states (linear interpolation
between the closest ranks: i + f = (n - 1) * p), and by a ten-line reference implementation
of that rule written here from its definition, not from numpy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from dissector.tables.schema import TABLES
from dissector.tables.stats import (
    ANSWERED,
    COUNT,
    MAX,
    MS_NAMES,
    PERCENTILES,
    Latencies,
    describe,
    latency_ms,
    percentile_name,
)


def reference(values: list[int], p: float) -> float:
    """The percentile by its definition: sort, take rank (n - 1) * p, interpolate."""
    xs = sorted(values)
    rank = (len(xs) - 1) * p
    low = math.floor(rank)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (rank - low) * (xs[high] - xs[low])


def test_names_and_constants() -> None:
    assert PERCENTILES == (0.5, 0.9, 0.99)
    assert [percentile_name(p) for p in PERCENTILES] == ["p50_ms", "p90_ms", "p99_ms"]
    assert MS_NAMES == ("p50_ms", "p90_ms", "p99_ms", "max_ms") and MAX == "max_ms"
    assert COUNT == "count"
    assert ANSWERED == ("success", "error")


def test_hand_computed_percentiles() -> None:
    # n = 5: p50 at rank 2 (4000); p90 at rank 3.6: 8000 + 0.6 * 8000 = 12800;
    # p99 at rank 3.96: 8000 + 0.96 * 8000 = 15680 (µs)
    us = np.array([16000, 1000, 8000, 2000, 4000], dtype=np.int64)
    assert describe(us) == {
        "count": 5,
        "p50_ms": 4.0,
        "p90_ms": 12.8,
        "p99_ms": 15.68,
        "max_ms": 16.0,
    }
    # one value: every percentile is it
    assert describe(np.array([1234], dtype=np.int64)) == dict.fromkeys(MS_NAMES, 1.234) | {
        "count": 1
    }
    # n = 4: p50 at rank 1.5 between 2000 and 3000; p90 at rank 2.7: 3000 + 0.7 * 7000 = 7900
    four = describe(np.array([1000, 2000, 3000, 10000], dtype=np.int64))
    assert (four["p50_ms"], four["p90_ms"], four["p99_ms"]) == (2.5, 7.9, 9.79)


@pytest.mark.parametrize(
    "values",
    [[5], [1, 2], [3, 1, 2], [0, 0, 0, 7], [10**9, 1, 17, 17, 250_000, 3, 999_999]],
)
def test_describe_follows_the_stated_rule(values: list[int]) -> None:
    got = describe(np.array(values, dtype=np.int64))
    for p in PERCENTILES:
        assert got[percentile_name(p)] == round(reference(values, p) / 1000, 3), p
    assert got[MAX] == round(max(values) / 1000, 3)
    assert got[COUNT] == len(values)


def test_milliseconds_rounded_to_three_decimals() -> None:
    assert latency_ms(1) == 0.001
    assert latency_ms(1_234_567) == 1234.567
    assert latency_ms(12_800.0) == 12.8
    assert latency_ms(0.4) == 0.0


def _timeline(rows: list[tuple[str, str, int | None]]) -> pa.RecordBatch:
    """A timeline batch with (request_command, outcome, latency_us) set, other columns null."""
    schema = TABLES["timeline"].schema
    data: dict[str, list[Any]] = {name: [None] * len(rows) for name in schema.names}
    data["request_command"] = [r[0] for r in rows]
    data["outcome"] = [r[1] for r in rows]
    data["latency_us"] = [r[2] for r in rows]
    for name in ("ts", "conn_id"):
        data[name] = [0] * len(rows)
    return pa.RecordBatch.from_pydict(
        {n: pa.array(v, schema.field(n).type) for n, v in data.items()}, schema=schema
    )


def test_only_answered_requests_count_per_command() -> None:
    lat = Latencies()
    assert not lat
    answered, latency = lat.add(
        _timeline(
            [
                ("SEND", "success", 1000),
                ("SEND", "error", 3000),
                ("SEND", "unanswered", None),
                ("LOOKUP", "success", 500),
                ("FLOW", "redelivered", None),
            ]
        )
    )
    assert answered.tolist() == [True, True, False, True, False]
    assert latency.tolist() == [1000, 3000, 500]
    lat.add(_timeline([("SEND", "success", 2000), ("ACK", "unmatched", None)]))
    assert lat
    values = lat.values()
    assert {c: sorted(v.tolist()) for c, v in values.items()} == {
        "SEND": [1000, 2000, 3000],
        "LOOKUP": [500],
    }
    assert all(v.dtype == np.int64 for v in values.values())
    stats = lat.stats()
    assert stats["SEND"] == {"count": 3, "p50_ms": 2.0, "p90_ms": 2.8, "p99_ms": 2.98,
                             "max_ms": 3.0}  # fmt: skip
    assert stats["LOOKUP"][COUNT] == 1


def test_a_batch_without_answers_keeps_nothing() -> None:
    lat = Latencies()
    answered, latency = lat.add(_timeline([("SEND", "unanswered", None)]))
    assert answered.tolist() == [False] and latency.size == 0
    assert not lat and lat.stats() == {}
