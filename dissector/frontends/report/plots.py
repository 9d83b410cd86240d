"""EDGE: the report's plots, drawn by matplotlib as SVG and inlined as data: URLs.

Input: what `collect` gathered: latency per request command (and per subscription, its
journeys' end-to-end latency), messages per second.
Output: <img> elements (`figure`), and the throughput series they plot.
Rules:
- Bounded: a latency CDF from at most PLOT_POINTS values per line, the TOPICS_PLOTTED
  busiest topics; throughput at most THROUGHPUT_POINTS points per line.
- Throughput: every second from the first message to the last is a point, a second
  without a message a zero (never a line drawn across it as if there were traffic).
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from dissector.events import Direction, MessageKind
from dissector.frontends.report.collect import ReportData, when
from dissector.frontends.terminal import printable

PLOT_POINTS = 4000
TOPICS_PLOTTED = 8
#: Points of a throughput line at most: a longer span is summed into wider buckets (an SVG
#: point per second of a day-long capture would make the page tens of megabytes).
THROUGHPUT_POINTS = 2000
#: Each direction's line style: produced solid, delivered dashed.
_DIRECTIONS: dict[str, str] = {Direction.CLIENT_TO_BROKER: "-", Direction.BROKER_TO_CLIENT: "--"}


def figure(draw: Any, key: str, *, width: float, height: float, rows: int = 1) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, 1, figsize=(width, height), squeeze=False)
    try:
        # matplotlib warns (several lines, with its source paths) about any glyph its font
        # lacks; labels come from the capture, and stderr keeps to our own lines
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            draw(axes[0][0] if rows == 1 else [a[0] for a in axes])
            fig.tight_layout()
            buf = io.StringIO()
            fig.savefig(buf, format="svg")
    finally:
        plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    encoded = base64.b64encode(svg.encode()).decode()  # an <img>: no id or style clashes
    return f'<img class=plot id="{key}" alt="{key}" src="data:image/svg+xml;base64,{encoded}">'


def cdf(ax: Any, values: dict[str, np.ndarray], of: str = "requests") -> None:
    """One step line per key (the 10 with the most values), x on a log scale (values under
    1 µs, negative dispatch times among them, drawn at 1 µs); of: what the values are of."""
    for command in sorted(values, key=lambda c: -len(values[c]))[:10]:
        us = np.sort(values[command])
        if len(us) > PLOT_POINTS:
            us = us[np.linspace(0, len(us) - 1, PLOT_POINTS).astype(int)]
        ms = np.maximum(us / 1000, 1e-3)
        ax.step(
            ms,
            np.linspace(0, 1, len(ms)),
            where="post",
            label=f"{command} ({len(values[command])})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel(f"fraction of {of}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def io_graph(axes: list[Any], report: ReportData, topics: list[str]) -> None:
    start = min(s for s, _, _ in report.throughput)
    lines = [(topic, direction) for topic in topics for direction in _DIRECTIONS]
    for ax, counter, label in (
        (axes[0], report.throughput, "messages/s"),
        (axes[1], report.throughput_bytes, "payload bytes/s"),
    ):
        xs, series, width = throughput_series(counter, lines)
        for topic, direction in lines:
            ys = series[(topic, direction)]
            if any(ys):
                c2b = direction == Direction.CLIENT_TO_BROKER
                kind = MessageKind.PRODUCED if c2b else MessageKind.DELIVERED
                ax.plot(xs, ys, _DIRECTIONS[direction], marker=".",
                        label=printable(f"{topic.rsplit('/', 1)[-1]} {kind}"))  # fmt: skip
        for ts, _ in report.losses[:200]:
            ax.axvline(ts / 1e6 - start, color="red", alpha=0.4, linewidth=1)
        ax.set_ylabel(label if width == 1 else f"{label} (mean of {width} s)")
        ax.grid(True, alpha=0.3)
    axes[1].set_xlabel(f"seconds since {when(start * 1_000_000)}")
    axes[0].legend(fontsize=7, loc="upper right")


def throughput_series(
    counter: Mapping[tuple[int, str, str], int], lines: list[tuple[str, str]]
) -> tuple[list[int], dict[tuple[str, str], list[float]], int]:
    """Every second from the counter's first to its last (seconds after the first), and per
    (topic, direction) line its value in each, 0 where it has none; beyond
    THROUGHPUT_POINTS seconds, buckets of `width` seconds hold the mean per second. Returns
    (xs, {line: ys}, width); one pass over the counter, whatever the span."""
    start = min(s for s, _, _ in counter)
    span = max(s for s, _, _ in counter) - start + 1
    width = -(-span // THROUGHPUT_POINTS)  # ceil: at most THROUGHPUT_POINTS buckets
    points = -(-span // width)
    sums: dict[tuple[str, str], list[float]] = {line: [0] * points for line in lines}
    for (second, topic, direction), value in counter.items():
        ys = sums.get((topic, direction))
        if ys is not None:
            ys[(second - start) // width] += value
    xs = [i * width for i in range(points)]
    if width == 1:
        return xs, sums, width  # whole numbers, as counted
    return xs, {line: [v / width for v in ys] for line, ys in sums.items()}, width
