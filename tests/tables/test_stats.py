"""dissector.tables.stats: the one latency aggregator of summary, report and the fleet job.

Expected values are computed by hand from the rule the module states (linear interpolation
between the closest ranks: i + f = (n - 1) * p), and by a ten-line reference implementation
of that rule written here from its definition, not from numpy.
"""

from __future__ import annotations

import math
import re
import sqlite3
import statistics
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from dissector.tables.schema import TABLES
from dissector.tables.stats import (
    ANSWERED,
    COUNT,
    DELIVERED_ROW,
    JOURNEY_LATENCIES,
    MAX,
    MS_NAMES,
    NEVER_DELIVERED,
    PERCENTILES,
    SUBSCRIPTION,
    SUBSCRIPTION_COUNTS,
    Latencies,
    Subscriptions,
    describe,
    journey_latencies,
    latency_ms,
    percentile_name,
    stat_label,
)


def reference(values: list[int], p: float) -> float:
    """The percentile by its definition: sort, take rank (n - 1) * p, interpolate."""
    xs = sorted(values)
    rank = (len(xs) - 1) * p
    low = math.floor(rank)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (rank - low) * (xs[high] - xs[low])


def test_names_and_constants() -> None:
    assert PERCENTILES == (0.5, 0.9, 0.99, 0.999, 0.9999)
    names = ["p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "p99_99_ms"]
    assert [percentile_name(p) for p in PERCENTILES] == names
    assert (*names, "max_ms") == MS_NAMES and MAX == "max_ms"
    assert [stat_label(n) for n in MS_NAMES] == ["p50", "p90", "p99", "p99.9", "p99.99", "max"]
    # never rounded to a whole percent: 99.9 is not 100, 99.5 not 100 either
    assert percentile_name(0.995) == "p99_5_ms" and percentile_name(0.25) == "p25_ms"
    # names a Spark or SQL column and a JSON key can be, without quoting
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in MS_NAMES)
    assert COUNT == "count"
    assert ANSWERED == ("success", "error")


def test_hand_computed_percentiles() -> None:
    # n = 5: p50 at rank 2 (4000); p90 at rank 3.6: 8000 + 0.6 * 8000 = 12800;
    # p99 at rank 3.96: 8000 + 0.96 * 8000 = 15680 (µs)
    # p99.9 at rank 3.996: 8000 + 0.996 * 8000 = 15968; p99.99 at rank 3.9996: 15996.8
    us = np.array([16000, 1000, 8000, 2000, 4000], dtype=np.int64)
    assert describe(us) == {
        "count": 5,
        "p50_ms": 4.0,
        "p90_ms": 12.8,
        "p99_ms": 15.68,
        "p99_9_ms": 15.968,
        "p99_99_ms": 15.997,
        "max_ms": 16.0,
    }
    # one value: every percentile is it
    assert describe(np.array([1234], dtype=np.int64)) == dict.fromkeys(MS_NAMES, 1.234) | {
        "count": 1
    }
    # n = 4: p50 at rank 1.5 between 2000 and 3000; p90 at rank 2.7: 3000 + 0.7 * 7000 = 7900;
    # p99.9 at rank 2.997: 3000 + 0.997 * 7000 = 9979; p99.99 at 2.9997: 9997.9
    four = describe(np.array([1000, 2000, 3000, 10000], dtype=np.int64))
    assert [four[n] for n in MS_NAMES] == [2.5, 7.9, 9.79, 9.979, 9.998, 10.0]


def test_the_tail_percentiles_by_hand() -> None:
    """2000 requests of 1 ms and one of 1001 ms (n = 2001, ranks 0 to 2000): p99 (rank 1980)
    and p99.9 (rank 1998) are 1 ms; p99.99 at rank 1999.8 is 1000 + 0.8 * 1000000 = 801000
    µs: only the last percentile sees the outlier."""
    us = np.array([1000] * 1000 + [1_001_000] + [1000] * 1000, dtype=np.int64)
    got = describe(us)
    assert got == {"count": 2001, "p50_ms": 1.0, "p90_ms": 1.0, "p99_ms": 1.0,
                   "p99_9_ms": 1.0, "p99_99_ms": 801.0, "max_ms": 1001.0}  # fmt: skip
    # 0, 1, ..., 10000 µs (n = 10001): percentile p is exactly 10000 * p
    ramp = describe(np.arange(10_001, dtype=np.int64)[::-1].copy())
    assert [ramp[n] for n in MS_NAMES] == [5.0, 9.0, 9.9, 9.99, 9.999, 10.0]


#: statistics.quantiles(n=10000) cut points: the k-th is the k/10000 percentile.
CUTS = 10_000


@pytest.mark.parametrize("n", [2, 3, 10, 1001, 20_000])
def test_describe_equals_numpy_and_the_standard_library(n: int) -> None:
    """The same latencies through numpy's linear method and the standard library's
    `statistics.quantiles(method="inclusive")` (exact arithmetic, its own code): every
    percentile, p99.9 and p99.99 included, gives the same milliseconds."""
    rng = np.random.default_rng(n)
    us = rng.lognormal(mean=7, sigma=1.5, size=n).astype(np.int64)  # a long tail, µs
    got = describe(us)
    cuts = statistics.quantiles(us.tolist(), n=CUTS, method="inclusive")
    for p in PERCENTILES:
        name = percentile_name(p)
        assert got[name] == latency_ms(np.quantile(us, p, method="linear")), name
        assert got[name] == latency_ms(cuts[round(p * CUTS) - 1]), name
    assert got[MAX] == latency_ms(max(us.tolist())) and got[COUNT] == n


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
                             "p99_9_ms": 2.998, "p99_99_ms": 3.0, "max_ms": 3.0}  # fmt: skip
    assert stats["LOOKUP"][COUNT] == 1


def test_a_batch_without_answers_keeps_nothing() -> None:
    lat = Latencies()
    answered, latency = lat.add(_timeline([("SEND", "unanswered", None)]))
    assert answered.tolist() == [False] and latency.size == 0
    assert not lat and lat.stats() == {}


# ------------------------------------------------------------------ per subscription

T, U = "persistent://public/default/t", "persistent://public/default/u"


def _journeys(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """A journeys batch with the given columns set, the others null (counts 0)."""
    schema = TABLES["journeys"].schema
    data: dict[str, list[Any]] = {name: [None] * len(rows) for name in schema.names}
    for name in ("ts", "conn_id", "deliveries", "redeliveries"):
        data[name] = [0] * len(rows)
    data["evicted"] = [False] * len(rows)
    for i, row in enumerate(rows):
        for name, value in row.items():
            data[name][i] = value
    return pa.RecordBatch.from_pydict(
        {n: pa.array(v, schema.field(n).type) for n, v in data.items()}, schema=schema
    )


def _delivered(
    topic: str | None,
    sub: str | None,
    dispatch: int | None,
    e2e: int | None,
    deliveries: int = 1,
    redeliveries: int = 0,
) -> dict[str, Any]:
    """A row of a subscription: acked when it has an end-to-end latency."""
    return {
        "topic": topic, "subscription": sub, "consumer_conn_id": 2,
        "dispatch_us": dispatch, "end_to_end_us": e2e, "deliveries": deliveries,
        "redeliveries": redeliveries, "acked_ts": None if e2e is None else 5,
    }  # fmt: skip


#: Two batches: subscription (T, "a") has dispatch 4000, 1000, -500, 2500 µs (sorted -500,
#: 1000, 2500, 4000; n = 4: p50 at rank 1.5: 1750; p90 at rank 2.7: 2500 + 0.7 * 1500 =
#: 3550; p99 at rank 2.97: 2500 + 0.97 * 1500 = 3955; p99.9 at rank 2.997: 3995.5 (3.9955 ms
#: is 3.99549... in binary: 3.995); p99.99 at 2.9997: 3999.55) and end to end 10000, 30000,
#: 20000 (one unacked: p50 20000; p90 at rank 1.8: 28000; p99 at rank 1.98: 29800; p99.9 at
#: 1.998: 29980; p99.99 at 1.9998: 29998); one row only
#: acked (deliveries 0), one seen twice, one with a redelivery count only.
ROWS = [
    [
        _delivered(T, "a", 4000, 10000),
        _delivered(T, "a", 1000, None, deliveries=2, redeliveries=1),
        {"topic": T, "deliveries": 0},  # produced, never delivered
        _delivered(U, None, None, 7000),  # SUBSCRIBE missed, receipt missed
    ],
    [
        _delivered(T, "a", -500, 30000, redeliveries=3),
        _delivered(T, "a", 2500, 20000),
        _delivered(T, "a", None, None, deliveries=0) | {"acked_ts": 9},  # only its ack
        {"topic": None},  # never delivered, topic unknown
        _delivered(T, "b", 100, 200),
        {"topic": T},
    ],
]


def test_subscriptions_counts_and_latencies_by_hand() -> None:
    subs = Subscriptions()
    assert not subs
    for rows in ROWS:
        subs.add(_journeys(rows))
    subs.add(_journeys([]))
    assert subs
    one = {"count": 1} | dict.fromkeys(MS_NAMES, 0.1)
    none = {"count": 0} | dict.fromkeys(MS_NAMES)
    assert subs.result() == {
        "subscriptions": [
            {
                "topic": T, "subscription": "a", "messages": 5, "delivered": 4,
                "delivered_twice": 2, "not_acked": 1,
                "dispatch": {"count": 4, "p50_ms": 1.75, "p90_ms": 3.55, "p99_ms": 3.955,
                             "p99_9_ms": 3.995, "p99_99_ms": 4.0, "max_ms": 4.0},
                "end_to_end": {"count": 3, "p50_ms": 20.0, "p90_ms": 28.0, "p99_ms": 29.8,
                               "p99_9_ms": 29.98, "p99_99_ms": 29.998, "max_ms": 30.0},
            },
            {
                "topic": T, "subscription": "b", "messages": 1, "delivered": 1,
                "delivered_twice": 0, "not_acked": 0,
                "dispatch": one, "end_to_end": one | dict.fromkeys(MS_NAMES, 0.2),
            },
            {
                "topic": U, "subscription": None, "messages": 1, "delivered": 1,
                "delivered_twice": 0, "not_acked": 0,
                "dispatch": none, "end_to_end": one | dict.fromkeys(MS_NAMES, 7.0),
            },
        ],
        "never_delivered": [
            {"topic": T, "never_delivered": 2}, {"topic": None, "never_delivered": 1}
        ],
    }  # fmt: skip


def test_describe_of_nothing_is_null_as_in_sql() -> None:
    assert describe(np.empty(0, np.int64)) == {COUNT: 0} | dict.fromkeys(MS_NAMES)


def test_the_sql_definitions_count_what_the_aggregator_counts() -> None:
    """SUBSCRIPTION_COUNTS and DELIVERED_ROW are SQL (what the fleet job's Spark runs):
    run here by SQLite over the same rows, they give the aggregator's counts."""
    subs = Subscriptions()
    for rows in ROWS:
        subs.add(_journeys(rows))
    table = pa.Table.from_batches([_journeys(rows) for rows in ROWS])
    names = [*SUBSCRIPTION, "consumer_conn_id", "deliveries", "redeliveries", "acked_ts"]
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE journeys ({', '.join(names)})")
    db.executemany(
        f"INSERT INTO journeys VALUES ({', '.join('?' * len(names))})",
        [
            tuple(None if v is None else (v if isinstance(v, str) else int(v)) for v in row)
            for row in zip(*(table.column(n).cast(pa.string() if n in SUBSCRIPTION else
                                                  pa.int64()).to_pylist() for n in names),
                           strict=True)
        ],
    )  # fmt: skip
    counts = ", ".join(f"SUM(CASE WHEN {sql} THEN 1 ELSE 0 END)" for sql in
                       SUBSCRIPTION_COUNTS.values())  # fmt: skip
    by_sql = db.execute(
        f"SELECT topic, subscription, {counts} FROM journeys WHERE {DELIVERED_ROW} "
        "GROUP BY topic, subscription"
    ).fetchall()
    never = db.execute(
        f"SELECT topic, COUNT(*) FROM journeys WHERE NOT ({DELIVERED_ROW}) GROUP BY topic"
    ).fetchall()
    result = subs.result()
    assert sorted(by_sql, key=str) == sorted(
        (
            (s["topic"], s["subscription"], *(s[n] for n in SUBSCRIPTION_COUNTS))
            for s in result["subscriptions"]
        ),
        key=str,
    )
    assert sorted(never, key=str) == sorted(
        ((n["topic"], n[NEVER_DELIVERED]) for n in result[NEVER_DELIVERED]), key=str
    )
    assert JOURNEY_LATENCIES == ("dispatch_us", "end_to_end_us")
    assert set(JOURNEY_LATENCIES) | set(names) <= set(TABLES["journeys"].schema.names)


def test_many_subscriptions_interleaved_in_batches() -> None:
    """200 rows over 12 subscriptions, shuffled, in batches of 37: each subscription's
    counts and percentiles are those of its rows alone (the reference rule above)."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(200):
        sub = int(rng.integers(12))
        dispatch = None if i % 7 == 0 else int(rng.integers(-2000, 90_000))
        rows.append(
            _delivered(f"t{sub % 3}", f"s{sub}", dispatch, int(rng.integers(1, 10**6)),
                       redeliveries=int(i % 5 == 0))
        )  # fmt: skip
    subs = Subscriptions()
    for start in range(0, len(rows), 37):
        subs.add(_journeys(rows[start : start + 37]))
    result = subs.result()["subscriptions"]
    assert [(s["topic"], s["subscription"]) for s in result] == sorted(
        {(r["topic"], r["subscription"]) for r in rows}
    )
    for s in result:
        mine = [r for r in rows if r["subscription"] == s["subscription"]]
        assert s["messages"] == len(mine)
        assert s["delivered_twice"] == sum(r["redeliveries"] > 0 for r in mine)
        for key, column in (("dispatch", "dispatch_us"), ("end_to_end", "end_to_end_us")):
            values = [r[column] for r in mine if r[column] is not None]
            assert s[key][COUNT] == len(values)
            for p in PERCENTILES:
                assert s[key][percentile_name(p)] == round(reference(values, p) / 1000, 3)
            assert s[key][MAX] == round(max(values) / 1000, 3)


def test_journey_latencies_are_those_the_subscriptions_keep() -> None:
    """Every subscription together: the delivered rows' non-null values, in row order (the
    HdrHistogram files' dispatch and end_to_end kinds)."""
    got = [journey_latencies(_journeys(rows)) for rows in ROWS]
    assert [g["dispatch_us"].tolist() for g in got] == [[4000, 1000], [-500, 2500, 100]]
    assert [g["end_to_end_us"].tolist() for g in got] == [[10000, 7000], [30000, 20000, 200]]
    subs = Subscriptions()
    for rows in ROWS:
        subs.add(_journeys(rows))
    for column in JOURNEY_LATENCIES:
        kept = np.concatenate(list(subs.latencies[column].values().values()))
        assert sorted(kept.tolist()) == sorted(np.concatenate([g[column] for g in got]).tolist())
        assert all(g[column].dtype == np.int64 for g in got)
