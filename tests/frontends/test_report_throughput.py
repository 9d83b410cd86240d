"""The report's throughput plot: a second without a message is drawn as zero.

Input: messages rows at chosen seconds, added to the report as a read would add them.
Output: the series matplotlib is asked to draw (Axes.plot's x and y), and the series
function for a span too long to plot second by second.
Rule: expected values are counted by hand from the rows made here: every second from the
first to the last is a point, missing ones 0; a long span is summed into equal buckets of at
most THROUGHPUT_POINTS points, in messages per second.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from matplotlib.axes import Axes

from dissector.frontends.report import Report
from dissector.frontends.report.plots import THROUGHPUT_POINTS, throughput_series

T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
C2B = "client_to_broker"


def _messages(rows: list[tuple[float, str, int]]) -> pa.RecordBatch:
    """A messages batch holding what the report reads: (seconds after T0, topic, size)."""
    return pa.RecordBatch.from_pydict(
        {
            "ts": pa.array(
                [T0 + dt.timedelta(seconds=s) for s, _, _ in rows], pa.timestamp("us", "UTC")
            ),
            "direction": [C2B] * len(rows),
            "kind": ["send"] * len(rows),
            "topic": [t for _, t, _ in rows],
            "payload_size": pa.array([n for _, _, n in rows], pa.int64()),
        }
    )


def test_seconds_without_messages_are_plotted_as_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    # three messages of 100 bytes in second 0, two of 50 bytes in second 5, none between
    report = Report(["t.pcap"])
    report.add("messages", _messages([(0.1, "t", 100), (0.2, "t", 100), (0.9, "t", 100)]))
    report.add("messages", _messages([(5.0, "t", 50), (5.5, "t", 50)]))
    drawn: list[tuple[list[Any], list[Any]]] = []
    plot = Axes.plot

    def spy(self: Axes, *args: Any, **kwargs: Any) -> Any:
        drawn.append((list(args[0]), list(args[1])))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", spy)
    report.html()
    assert drawn == [
        ([0, 1, 2, 3, 4, 5], [3, 0, 0, 0, 0, 2]),  # messages/s
        ([0, 1, 2, 3, 4, 5], [300, 0, 0, 0, 0, 100]),  # payload bytes/s
    ]


def test_a_long_span_is_bucketed_into_bounded_points() -> None:
    # 4 messages in second 0 and 6 in second 1,000,000 (11.6 days later): 1,000,001 seconds
    # in buckets of ceil(1,000,001 / THROUGHPUT_POINTS) seconds
    counter = Counter({(0, "t", C2B): 4, (1_000_000, "t", C2B): 6})
    width = -(-1_000_001 // THROUGHPUT_POINTS)
    xs, series, step = throughput_series(counter, [("t", C2B), ("u", C2B)])
    assert step == width and len(xs) <= THROUGHPUT_POINTS
    assert xs == [i * width for i in range(len(xs))]
    assert xs[-1] <= 1_000_000 < xs[-1] + width  # the last second is in the last bucket
    ys = series[("t", C2B)]
    assert len(ys) == len(xs)
    assert ys[0] == pytest.approx(4 / width) and ys[-1] == pytest.approx(6 / width)
    assert all(y == 0 for y in ys[1:-1])
    assert series[("u", C2B)] == [0] * len(xs)  # a line asked for without rows: zeros


def test_one_second_is_one_point() -> None:
    xs, series, step = throughput_series(Counter({(7, "t", C2B): 2}), [("t", C2B)])
    assert (xs, series, step) == ([0], {("t", C2B): [2]}, 1)
