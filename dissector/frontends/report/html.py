"""EDGE: the report's HTML page, section by section, from what `collect` gathered.

Input: a ReportData (every table's batches added).
Output: an HTML document: what went wrong (the findings, ranked as `diagnose` ranks them,
each linked to its connection's ladder, where its evidence is marked), overview, latency,
subscriptions (their journeys' counts and latencies, as `summary`), throughput, a ladder
diagram per connection (those with findings first), producers and
consumers, anomalies with what each means. Styles (report.css), a few lines
of script (report.js) and the plots (plots.py, SVG) are inline: opening it fetches nothing.
Rules:
- Bounded: ladders for at most LADDER_CONNECTIONS connections, runs of RUN_MIN alike lines
  and more collapsed, the first ROWS anomalies and entities.
- Text from the capture is HTML-escaped; secrets never reach the tables, so not the page.
"""

from __future__ import annotations

import html
from importlib import resources
from typing import Any

from dissector.anomalies import REGISTRY
from dissector.events import Direction, EntityKind
from dissector.frontends.diagnoses import bill, evidence_text, ranked
from dissector.frontends.report.collect import LADDER_FRAMES, ROWS, ReportData, when
from dissector.frontends.report.plots import TOPICS_PLOTTED, cdf, figure, io_graph
from dissector.frontends.report.subscriptions import subscriptions_section
from dissector.tables.stats import COUNT, MS_NAMES, describe, stat_label

LADDER_CONNECTIONS = 12  # ladders drawn, the busiest connections by frames
RUN_MIN = 4  # a run of at least this many alike lines is collapsed


def page(report: ReportData) -> str:
    """The whole page: every section, with its style and script inline."""
    drawn = _drawn(report)
    sections = [
        ("findings", "What went wrong", _findings_section(report, drawn)),
        ("overview", "Overview", _overview(report)),
        ("latency", "Latency", _latency_section(report)),
        (
            "subscriptions",
            "Subscriptions",
            subscriptions_section(report.subscriptions if report.journeys else None),
        ),
        ("throughput", "Throughput over time", _throughput_section(report)),
        ("ladders", "Connections (ladder diagrams)", _ladders(report, drawn)),
        ("entities", "Producers and consumers", _entities_section(report)),
        ("anomalies", "Anomalies", _anomalies_section(report)),
    ]
    nav = " ".join(f'<a href="#{key}">{title}</a>' for key, title, _ in sections)
    body = "\n".join(
        f'<section id="{key}"><h2>{title}</h2>{content}</section>'
        for key, title, content in sections
    )
    title = html.escape(", ".join(report.files[:3]) or "capture")
    return _PAGE.format(
        title=title,
        nav=nav,
        body=body,
        style=_text("report.css"),
        script=_text("report.js"),
        csp=_CSP,
    )


def _overview(report: ReportData) -> str:
    span = "no frames"
    if report.first_ts is not None and report.last_ts is not None:
        start, end = when(report.first_ts), when(report.last_ts)
        span = f"{start} to {end} ({(report.last_ts - report.first_ts) / 1e6:.3f} s)"
    facts = [
        ("Capture files", "<br>".join(html.escape(f) for f in report.files)),
        ("Time span", span),
        ("Connections", f'<span id="connection-count">{len(report.conversations)}</span>'),
        ("Frames", f'<span id="frame-count">{report.frames}</span>'),
        ("Messages", f'<span id="message-count">{report.messages}</span>'),
        ("Anomalies", f'<span id="anomaly-count">{sum(report.anomaly_codes.values())}</span>'),
    ]
    out = ["<table class=facts>"]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts]
    out.append("</table>")
    out.append(_counts("Clients and brokers (versions)", "versions", [
        (f"{html.escape(c)} / {html.escape(b)}", n) for (c, b), n in report.versions.most_common()
    ]))  # fmt: skip
    out.append(_counts("Frames by command", "commands", report.commands.most_common()))
    out.append(_counts("Checksums", "checksums", report.checksums.most_common()))
    kinds = [(f"{d} {k}", n) for (d, k), n in report.message_kinds.most_common()]
    out.append(_counts("Messages by direction and kind", "messages", kinds))
    out.append(_counts("Anomalies by code", "codes", report.anomaly_codes.most_common()))
    return "\n".join(out)


def _latency_section(report: ReportData) -> str:
    if not report.latency:
        return "<p>No answered request.</p>"
    rows = []
    values = report.latency.values()
    for command in sorted(values, key=lambda c: (-len(values[c]), c)):  # ties by name
        stats = describe(values[command])
        cells = "".join(f"<td class=n>{stats[name]:.3f}</td>" for name in MS_NAMES)
        rows.append(f"<tr><td>{command}</td><td class=n>{stats[COUNT]}</td>{cells}</tr>")
    heads = "".join(f"<th>{stat_label(name)} ms</th>" for name in MS_NAMES)
    table = (
        f"<table id=latency-table><tr><th>request</th><th>{COUNT}</th>{heads}</tr>"
        + "".join(rows)
        + "</table>"
    )
    plot = figure(lambda ax: cdf(ax, values), "latency-plot", width=9, height=4.5)
    slow = sorted(report.slowest, key=lambda item: item[:2], reverse=True)
    slow_rows = "".join(
        f"<tr><td class=n>{r['latency_us'] / 1000:.3f}</td><td>{r['request_command']}</td>"
        f"<td class=n>{r['conn_id']}</td><td>{html.escape(r['topic'] or '')}</td>"
        f"<td class=n>{r['request_packet']}</td><td class=n>{r['response_packet']}</td></tr>"
        for _, _, r in slow
    )
    slowest = (
        "<h3>Slowest requests</h3><table id=slowest><tr><th>ms</th><th>request</th>"
        "<th>conn</th><th>topic</th><th>request packet</th><th>response packet</th></tr>"
        + slow_rows
        + "</table>"
    )
    return plot + table + slowest


def _throughput_section(report: ReportData) -> str:
    if not report.throughput:
        return "<p>No application message.</p>"
    topics = [t for t, _ in report.topic_messages.most_common(TOPICS_PLOTTED)]
    plot = figure(lambda axes: io_graph(axes, report, topics), "throughput-plot",
                   width=9, height=6, rows=2)  # fmt: skip
    more = len(report.topic_messages) - len(topics)
    note = f"<p>{more} more topics not plotted.</p>" if more > 0 else ""
    losses = len(report.losses)
    marks = f"<p>{losses} gaps or drops marked (red lines).</p>" if losses else ""
    return plot + note + marks


def _drawn(report: ReportData) -> list[dict[str, Any]]:
    """The connections whose ladder is drawn: those with findings first, then the busiest."""
    found = {f["conn_id"] for f in report.findings}
    order = sorted(
        report.conversations, key=lambda c: (c["conn_id"] not in found, -c["frames"], c["conn_id"])
    )
    return [c for c in order if c["conn_id"] in report.ladder][:LADDER_CONNECTIONS]


def _findings_section(report: ReportData, drawn: list[dict[str, Any]]) -> str:
    checked = f"<p class=checked>{html.escape(bill(report.checks))}</p>"
    if not report.findings:
        return f"<p>Nothing the diagnosis rules check went wrong.</p>{checked}"
    ladders = {c["conn_id"] for c in drawn}
    items = []
    for conn_id, found in ranked(report.findings):
        where = "across connections" if conn_id == 0 else f"conn {conn_id}"
        if conn_id in ladders:
            where = f'<a href="#ladder-{conn_id}">{where}</a> (its ladder)'
        rows = "".join(
            f'<li class="{f["severity"]}"><b>{f["severity"]}</b> <code>{f["code"]}</code> '
            f"{html.escape(' '.join(x for x in (f['entity'], f['topic']) if x))}"
            f"<br>{html.escape(f['summary'])}"
            f"<br><i>why:</i> {html.escape(f['hint'])}"
            f"<br><i>evidence:</i> {html.escape(evidence_text(f))}</li>"
            for f in found
        )
        items.append(f"<h3>{where}</h3><ul class=findings>{rows}</ul>")
    shown = len(report.findings)
    note = (
        f"<p>The first {shown} of {report.finding_count}.</p>"
        if report.finding_count > shown
        else ""
    )
    return "".join(items) + note


def _ladders(report: ReportData, drawn: list[dict[str, Any]]) -> str:
    busiest = sorted(report.conversations, key=lambda c: (-c["frames"], c["conn_id"]))
    rows = "".join(
        f'<tr data-text="{html.escape(" ".join(c["topics"]))} {c["conn_id"]}">'
        f"<td class=n>{c['conn_id']}</td>"
        f"<td>{c['client_ip']}:{c['client_port']}</td><td>{c['broker_ip']}:{c['broker_port']}</td>"
        f"<td class=n>{c['frames']}</td><td class=n>{c['duration_us'] / 1e6:.3f}</td>"
        f"<td>{c['ended']}</td><td class=n>{c['anomalies']}</td>"
        f"<td>{html.escape(', '.join(c['topics'][:3]))}</td></tr>"
        for c in busiest
    )
    listing = (
        '<input class=filter placeholder="filter connections by topic or id" '
        'data-table="connections">'
        "<table id=connections><tr><th>conn</th><th>client</th><th>broker</th><th>frames</th>"
        "<th>seconds</th><th>ended</th><th>anomalies</th><th>topics</th></tr>" + rows + "</table>"
    )
    ladders = "".join(_ladder(report, c) for c in drawn)
    return listing + ladders


def _ladder(report: ReportData, conv: dict[str, Any]) -> str:
    conn = conv["conn_id"]
    frames = report.ladder[conn]
    pending = sorted(report.ladder_anomalies.get(conn, []), key=lambda a: a["packet"])
    evidence = report.evidence.get(conn, {})
    lines = []
    for f in frames:
        c2b = f["direction"] == Direction.CLIENT_TO_BROKER
        ids = " ".join(
            f"{k.split('_')[0]}={f[k]}"
            for k in ("request_id", "producer_id", "consumer_id", "sequence_id")
            if f[k] is not None
        )
        label = f"{f['command']} {ids}".strip()
        problems = []  # anomalies up to this frame's packet: marked under it
        while pending and pending[0]["packet"] <= f["last_packet"]:
            problems.append(pending.pop(0))
        for severity, code in evidence.pop(f["last_packet"], []):  # marked once per packet
            problems.append({"severity": severity, "code": code, "detail": "evidence"})
        lines.append((c2b, f["command"], label, f["last_packet"], f["ts"], problems))
    if pending and lines and len(frames) < LADDER_FRAMES:  # after the last frame
        lines[-1][5].extend(pending)
    out = [
        f'<details class=ladder id="ladder-{conn}"><summary>conn {conn}: '
        f"{conv['client_ip']}:{conv['client_port']} &rarr; {conv['broker_ip']}:"
        f"{conv['broker_port']} ({conv['frames']} frames"
        + (f", first {len(frames)} shown" if len(frames) < conv["frames"] else "")
        + ")</summary><div class=lanes><div class=lane-head><span>client</span>"
        "<span>broker</span></div>"
    ]
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and (lines[j][0], lines[j][1]) == (lines[i][0], lines[i][1]) \
                and not lines[j][5]:  # fmt: skip
            j += 1
        if j - i >= RUN_MIN:
            inner = "".join(_step(*line) for line in lines[i:j])
            out.append(
                f"<details class=run><summary>{_arrow(lines[i][0])} {lines[i][1]} x {j - i}"
                f"</summary>{inner}</details>"
            )
            i = j
        else:
            out.append(_step(*lines[i]))
            i += 1
    out.append("</div></details>")
    return "".join(out)


def _entities_section(report: ReportData) -> str:
    if not report.entities:
        return "<p>No producer or consumer.</p>"
    cols = ["conn_id", "kind", "entity_id", "topic", "name", "subscription", "sub_type",
            "state", "permits", "delivered", "sent"]  # fmt: skip
    head = "".join(f"<th>{c}</th>" for c in cols) + "<th>acked</th><th>redelivered</th>"
    body = "".join(
        "<tr>"
        + "".join(f"<td>{_cell(e.get(c))}</td>" for c in cols)
        + _consumer_cells(report, e)
        + "</tr>"
        for e in report.entities
    )
    more = report.entity_count - len(report.entities)
    note = f"<p>The first {len(report.entities)} of {report.entity_count}.</p>" if more else ""
    return f"<table id=entities-table><tr>{head}</tr>{body}</table>{note}"


def _consumer_cells(report: ReportData, e: dict[str, Any]) -> str:
    if e.get("kind") != EntityKind.CONSUMER:
        return "<td></td><td></td>"
    key = (e["conn_id"], e["entity_id"])
    return f"<td class=n>{report.acked[key]}</td><td class=n>{report.redelivered[key]}</td>"


def _anomalies_section(report: ReportData) -> str:
    if not report.anomaly_rows:
        return "<p>No anomaly.</p>"
    rows = "".join(
        f'<tr class="{a["severity"]}"><td>{a["code"]}</td><td>{a["severity"]}</td>'
        f"<td class=n>{a['conn_id']}</td><td>{a['direction'] or ''}</td>"
        f"<td class=n>{a['packet']}</td><td class=n>{_cell(a['stream_offset'])}</td>"
        f"<td>{html.escape(REGISTRY[a['code']].summary)}</td>"
        f"<td>{html.escape(a['detail'])}</td></tr>"
        for a in report.anomaly_rows
    )
    total = sum(report.anomaly_codes.values())
    note = f"<p>The first {len(report.anomaly_rows)} of {total}.</p>" if total > ROWS else ""
    return (
        '<input class=filter placeholder="filter anomalies" data-table="anomaly-rows">'
        "<table id=anomaly-rows><tr><th>code</th><th>severity</th><th>conn</th>"
        "<th>direction</th><th>packet</th><th>stream offset</th><th>meaning</th>"
        "<th>detail</th></tr>" + rows + "</table>" + note
    )


def _cell(value: Any) -> str:
    return "" if value is None else html.escape(str(value))


def _arrow(c2b: bool) -> str:
    return "&rarr;" if c2b else "&larr;"


def _step(c2b: bool, command: str, label: str, packet: int, ts: Any, problems: list[Any]) -> str:
    cls = "c2b" if c2b else "b2c"
    marks = "".join(
        f'<div class="mark {a["severity"]}">! {a["code"]}: {html.escape(a["detail"])}</div>'
        for a in problems
    )
    when = ts.strftime("%H:%M:%S.%f") if hasattr(ts, "strftime") else ""
    return (
        f'<div class="step {cls}" title="packet {packet} at {when}"><span class=pkt>{packet}'
        f"</span><span class=msg>{_arrow(c2b)} {html.escape(label)}</span></div>{marks}"
    )


def _counts(title: str, key: str, items: list[tuple[str, int]]) -> str:
    if not items:
        return f"<h3>{title}</h3><p>none</p>"
    rows = "".join(f"<tr><td>{k}</td><td class=n>{n}</td></tr>" for k, n in items)
    return f'<h3>{title}</h3><table id="count-{key}">{rows}</table>'


def _text(name: str) -> str:
    """A file of this package (its style sheet and script), as text."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


#: Nothing may be fetched: images are data: URLs, style and script are inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>pulsar-dissect report: {title}</title>
<style>
{style}</style></head>
<body><h1>Pulsar capture report</h1><p>{title}</p><nav>{nav}</nav>
{body}
<script>
{script}</script>
</body></html>
"""
