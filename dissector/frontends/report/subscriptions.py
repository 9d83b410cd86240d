"""EDGE: the report's Subscriptions section: per (topic, subscription), the journeys'
counts and latency percentiles, the numbers `summary` shows.

Input: the dissector.tables.stats.Subscriptions the report gathered from the journeys table.
Output: the section's HTML: a counts table (`subscriptions-table`), the messages never
delivered per topic (`never-delivered`), one table per journey latency (`dispatch-table`,
`end_to_end-table`) and the end-to-end latency's distribution per subscription
(`end-to-end-plot`).
Rule: every number is `Subscriptions.result()`'s, as `summary` gives it; text from the
capture (topics, subscription names) is HTML-escaped.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from dissector.frontends.report.plots import cdf, figure
from dissector.tables.stats import (
    COUNT,
    JOURNEY_LATENCIES,
    MS_NAMES,
    NEVER_DELIVERED,
    SUBSCRIPTION_COUNTS,
    Subscriptions,
    latency_name,
    stat_label,
)

#: The subscriptions' columns, as the page heads them.
_COUNT_HEADS = {
    "messages": "messages",
    "delivered": "delivered",
    "delivered_twice": "delivered twice",
    "not_acked": "not acked",
}
_LATENCY_HEADS = {
    "dispatch_us": "dispatch (SEND_RECEIPT to first MESSAGE)",
    "end_to_end_us": "end to end (SEND to the subscription's ACK)",
}


def subscriptions_section(subscriptions: Subscriptions | None) -> str:
    """The section: counts, never delivered, one latency table per journey latency (None:
    the journeys table was not read)."""
    if subscriptions is None:
        return "<p>Not read (<code>--no-journeys</code>).</p>"
    if not subscriptions:
        return "<p>No message journey (no SEND, MESSAGE or ACK joined).</p>"
    result = subscriptions.result()
    subs = result["subscriptions"]
    heads = "".join(f"<th>{_COUNT_HEADS[name]}</th>" for name in SUBSCRIPTION_COUNTS)
    rows = "".join(
        f"<tr>{_names(s)}"
        + "".join(f"<td class=n>{s[name]}</td>" for name in SUBSCRIPTION_COUNTS)
        + "</tr>"
        for s in subs
    )
    counts = (
        "<p>Each message delivered (or acknowledged) in a subscription is a journey "
        "(docs/journeys.md); <i>delivered twice</i>: delivered more than once to it "
        "(redeliveries &gt; 0: seen twice, or the broker's redelivery count says so).</p>"
        f"<table id=subscriptions-table><tr><th>topic</th><th>subscription</th>{heads}</tr>"
        + rows
        + "</table>"
    )
    never = "".join(
        f"<tr><td>{_cell(n['topic'] or '?')}</td><td class=n>{n[NEVER_DELIVERED]}</td></tr>"
        for n in result[NEVER_DELIVERED]
    )
    if never:
        counts += (
            "<h3>Produced, never seen delivered</h3><table id=never-delivered>"
            f"<tr><th>topic</th><th>messages</th></tr>{never}</table>"
        )
    stat_heads = "".join(f"<th>{stat_label(name)} ms</th>" for name in MS_NAMES)
    latency = []
    for column in JOURNEY_LATENCIES:
        key = latency_name(column)
        body = "".join(
            f"<tr>{_names(s)}<td class=n>{s[key][COUNT]}</td>"
            + "".join(f"<td class=n>{s[key][name]:.3f}</td>" for name in MS_NAMES)
            + "</tr>"
            for s in subs
            if s[key][COUNT]
        )
        latency.append(
            f"<h3>Latency: {_LATENCY_HEADS[column]}</h3>"
            + (
                f"<table id={key}-table><tr><th>topic</th><th>subscription</th>"
                f"<th>{COUNT}</th>{stat_heads}</tr>{body}</table>"
                if body
                else "<p>none measured (a hop not captured).</p>"
            )
        )
    return counts + _plot(subscriptions) + "".join(latency)


def _plot(subscriptions: Subscriptions) -> str:
    """The end-to-end latency's distribution, a line per subscription (those with values)."""
    values: dict[str, np.ndarray] = {}
    for (topic, sub), us in subscriptions.latencies["end_to_end_us"].values().items():
        name = "?" if sub is None else sub
        label = f"{(topic or '?').rsplit('/', 1)[-1]} {name}"  # the topic's last part
        if len(us):
            values[f"{topic} {name}" if label in values else label] = us
    if not values:
        return ""
    plot = figure(lambda ax: cdf(ax, values, of="messages"), "end-to-end-plot", width=9,
                  height=4)  # fmt: skip
    return "<h3>End-to-end latency per subscription (SEND to the subscription's ACK)</h3>" + plot


def _names(s: dict[str, Any]) -> str:
    subscription = "? (SUBSCRIBE not captured)" if s["subscription"] is None else s["subscription"]
    return f"<td>{_cell(s['topic'] or '?')}</td><td>{_cell(subscription)}</td>"


def _cell(value: Any) -> str:
    return "" if value is None else html.escape(str(value))
