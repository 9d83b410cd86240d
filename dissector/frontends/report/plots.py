"""EDGE: the report's plots, drawn by matplotlib as SVG and inlined as data: URLs.

Input: what `collect` gathered: latency per request command, messages per second.
Output: <img> elements (`figure`), and the throughput series they plot.
Rules:
- Bounded: the latency CDF from at most PLOT_POINTS values per command, the TOPICS_PLOTTED
  busiest topics; throughput at most THROUGHPUT_POINTS points per line.
- A second without a message is a zero, never a line drawn across it.
"""

from __future__ import annotations

import base64
import io
import warnings
from typing import Any

import numpy as np

from dissector.frontends.report.collect import ReportData, when
from dissector.frontends.terminal import printable

PLOT_POINTS = 4000
TOPICS_PLOTTED = 8


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


def cdf(ax: Any, values: dict[str, np.ndarray]) -> None:
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
    ax.set_ylabel("fraction of requests")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def io_graph(axes: list[Any], report: ReportData, topics: list[str]) -> None:
    seconds = sorted({s for s, _, _ in report.throughput})
    start = seconds[0]
    for ax, counter, label in (
        (axes[0], report.throughput, "messages/s"),
        (axes[1], report.throughput_bytes, "payload bytes/s"),
    ):
        for topic in topics:
            for direction, style in (("client_to_broker", "-"), ("broker_to_client", "--")):
                ys = [counter.get((s, topic, direction), 0) for s in seconds]
                if any(ys):
                    kind = "produced" if direction == "client_to_broker" else "delivered"
                    ax.plot([s - start for s in seconds], ys, style, marker=".",
                            label=printable(f"{topic.rsplit('/', 1)[-1]} {kind}"))  # fmt: skip
        for ts, _ in report.losses[:200]:
            ax.axvline(ts / 1e6 - start, color="red", alpha=0.4, linewidth=1)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[1].set_xlabel(f"seconds since {when(start * 1_000_000)}")
    axes[0].legend(fontsize=7, loc="upper right")
