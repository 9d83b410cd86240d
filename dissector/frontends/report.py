"""EDGE: one self-contained HTML page per capture, to see it rather than read it.

Input: record batches of every table, as a read streams them (`Report.add`), and the files.
Output: an HTML document (`Report.html`): overview, a ladder diagram per connection,
latency distributions and the slowest requests, throughput over time per topic, producers
and consumers, anomalies with what each means. Styles, a few lines of script and the plots
(SVG drawn by matplotlib) are inline: opening the page fetches nothing.
Rules:
- Bounded, whatever the capture's size: counts and per-second buckets, the first
  LADDER_FRAMES frames of at most LADDER_CONNECTIONS connections (the busiest), the
  SLOWEST slowest requests, the first ROWS anomalies and entities; latency keeps one
  integer per answered request (as `summary`), plotted from at most PLOT_POINTS of them.
- Every number shown is computed from the table rows it names; nothing is estimated.
- Text from the capture is HTML-escaped; secrets never reach the tables, so not the page.
"""

from __future__ import annotations

import base64
import datetime as dt
import heapq
import html
import io
import warnings
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from dissector.anomalies import REGISTRY
from dissector.frontends.terminal import printable
from dissector.tables.columns import path_text

LADDER_CONNECTIONS = 12  # ladders drawn, the busiest connections by frames
LADDER_FRAMES = 400  # frames kept per connection for its ladder
LADDER_KEPT = 64  # connections whose first frames are kept while reading
RUN_MIN = 4  # a run of at least this many alike lines is collapsed
SLOWEST = 20
ROWS = 500
PLOT_POINTS = 4000
TOPICS_PLOTTED = 8

#: What the report reads: every table.
TABLES = ("frames", "messages", "anomalies", "conversations", "timeline", "entities")


class Report:
    """Aggregates made from record batches as they come; `html()` renders the page."""

    def __init__(self, files: list[str]) -> None:
        self.files = [path_text(f) for f in files]  # names that are not UTF-8 as \xNN
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.commands: Counter[str] = Counter()
        self.checksums: Counter[str] = Counter()
        self.message_kinds: Counter[tuple[str, str]] = Counter()
        self.anomaly_codes: Counter[str] = Counter()
        self.anomaly_rows: list[dict[str, Any]] = []
        self.conversations: list[dict[str, Any]] = []
        self.versions: Counter[tuple[str, str]] = Counter()
        self.latency: dict[str, list[np.ndarray]] = defaultdict(list)
        self.slowest: list[tuple[int, int, dict[str, Any]]] = []
        self.throughput: Counter[tuple[int, str, str]] = Counter()  # (second, topic, dir)
        self.throughput_bytes: Counter[tuple[int, str, str]] = Counter()
        self.topic_messages: Counter[str] = Counter()
        self.losses: list[tuple[int, str]] = []  # (ts, code) of gaps and kernel drops
        self.entities: list[dict[str, Any]] = []
        # per (conn_id, consumer_id): deliveries acked (ACK answers them) and redelivered
        self.acked: Counter[tuple[int, int]] = Counter()
        self.redelivered: Counter[tuple[int, int]] = Counter()
        self.entity_count = 0
        self.ladder: dict[int, list[dict[str, Any]]] = {}
        self.ladder_anomalies: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.frames = self.messages = 0
        self._seq = 0

    # ------------------------------------------------------------------ reading

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        getattr(self, "_" + table)(batch)

    def _span(self, ts: pa.Array) -> None:
        values = ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
        lo, hi = int(values.min()), int(values.max())
        self.first_ts = lo if self.first_ts is None else min(self.first_ts, lo)
        self.last_ts = hi if self.last_ts is None else max(self.last_ts, hi)

    def _frames(self, batch: pa.RecordBatch) -> None:
        self.frames += batch.num_rows
        self._span(batch.column("ts"))
        self.commands.update(batch.column("command").to_pylist())
        self.checksums.update(c or "none" for c in batch.column("checksum").to_pylist())
        for row in batch.select(_LADDER_COLUMNS).to_pylist():
            conn = row["conn_id"]
            frames = self.ladder.get(conn)
            if frames is None:
                if len(self.ladder) >= LADDER_KEPT:
                    continue
                frames = self.ladder[conn] = []
            if len(frames) < LADDER_FRAMES:
                frames.append(row)

    def _messages(self, batch: pa.RecordBatch) -> None:
        self.messages += batch.num_rows
        rows = batch.select(["ts", "direction", "kind", "topic", "payload_size"]).to_pylist()
        for r in rows:
            topic = r["topic"] or "?"
            second = int(r["ts"].timestamp())
            self.message_kinds[(r["direction"], r["kind"])] += 1
            self.throughput[(second, topic, r["direction"])] += 1
            self.throughput_bytes[(second, topic, r["direction"])] += r["payload_size"] or 0
            self.topic_messages[topic] += 1

    def _anomalies(self, batch: pa.RecordBatch) -> None:
        rows = batch.to_pylist()
        for r in rows:
            self.anomaly_codes[r["code"]] += 1
            if r["code"] in ("tcp.gap", "capture.kernel_drops", "capture.not_dissected"):
                self.losses.append((int(r["ts"].timestamp() * 1e6), r["code"]))
            if len(self.anomaly_rows) < ROWS:
                self.anomaly_rows.append(r)
            marks = self.ladder_anomalies[r["conn_id"]]
            if len(marks) < LADDER_FRAMES:
                marks.append(r)

    def _conversations(self, batch: pa.RecordBatch) -> None:
        for r in batch.to_pylist():
            frames = int(r["frames_c2b"]) + int(r["frames_b2c"])
            self.versions[(r["client_version"] or "?", r["server_version"] or "?")] += 1
            self.conversations.append(
                {
                    k: r[k]
                    for k in (
                        "conn_id",
                        "client_ip",
                        "client_port",
                        "broker_ip",
                        "broker_port",
                        "ts",
                        "duration_us",
                        "ended",
                        "encrypted",
                        "client_version",
                        "server_version",
                        "anomalies",
                        "gap_bytes_c2b",
                        "gap_bytes_b2c",
                    )
                }
                | {"frames": frames, "topics": list(r["topics"] or [])}
            )

    def _timeline(self, batch: pa.RecordBatch) -> None:
        for r in batch.select(
            ["conn_id", "consumer_id", "response_command", "outcome"]
        ).to_pylist():
            if r["consumer_id"] is None:
                continue
            key = (r["conn_id"], r["consumer_id"])
            if r["outcome"] == "redelivered":
                self.redelivered[key] += 1
            elif r["response_command"] == "ACK" and r["outcome"] == "success":
                self.acked[key] += 1
        outcome = np.asarray(batch.column("outcome").to_pylist(), dtype=object)
        answered = (outcome == "success") | (outcome == "error")
        if not answered.any():
            return
        latency = batch.column("latency_us").to_numpy(zero_copy_only=False)[answered]
        latency = latency.astype(np.int64)
        request = np.asarray(batch.column("request_command").to_pylist(), dtype=object)
        request = request[answered]
        for command in set(request.tolist()):
            self.latency[str(command)].append(latency[request == command])
        rows_at = np.flatnonzero(answered)[np.argsort(-latency, kind="stable")[:SLOWEST]]
        for r in batch.take(pa.array(rows_at)).to_pylist():
            self._seq += 1
            item = (int(r["latency_us"]), -self._seq, r)
            if len(self.slowest) < SLOWEST:
                heapq.heappush(self.slowest, item)
            elif item[:2] > self.slowest[0][:2]:
                heapq.heapreplace(self.slowest, item)

    def _entities(self, batch: pa.RecordBatch) -> None:
        self.entity_count += batch.num_rows
        room = ROWS - len(self.entities)
        if room > 0:
            self.entities.extend(batch.slice(0, room).to_pylist())

    # ------------------------------------------------------------------ rendering

    def html(self) -> str:
        sections = [
            ("overview", "Overview", self._overview()),
            ("latency", "Latency", self._latency_section()),
            ("throughput", "Throughput over time", self._throughput_section()),
            ("ladders", "Connections (ladder diagrams)", self._ladders()),
            ("entities", "Producers and consumers", self._entities_section()),
            ("anomalies", "Anomalies", self._anomalies_section()),
        ]
        nav = " ".join(f'<a href="#{key}">{title}</a>' for key, title, _ in sections)
        body = "\n".join(
            f'<section id="{key}"><h2>{title}</h2>{content}</section>'
            for key, title, content in sections
        )
        title = html.escape(", ".join(self.files[:3]) or "capture")
        return _PAGE.format(title=title, nav=nav, body=body, style=_STYLE, script=_SCRIPT, csp=_CSP)

    def _overview(self) -> str:
        span = "no frames"
        if self.first_ts is not None and self.last_ts is not None:
            start, end = _when(self.first_ts), _when(self.last_ts)
            span = f"{start} to {end} ({(self.last_ts - self.first_ts) / 1e6:.3f} s)"
        facts = [
            ("Capture files", "<br>".join(html.escape(f) for f in self.files)),
            ("Time span", span),
            ("Connections", f'<span id="connection-count">{len(self.conversations)}</span>'),
            ("Frames", f'<span id="frame-count">{self.frames}</span>'),
            ("Messages", f'<span id="message-count">{self.messages}</span>'),
            ("Anomalies", f'<span id="anomaly-count">{sum(self.anomaly_codes.values())}</span>'),
        ]
        out = ["<table class=facts>"]
        out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts]
        out.append("</table>")
        out.append(_counts("Clients and brokers (versions)", "versions", [
            (f"{html.escape(c)} / {html.escape(b)}", n) for (c, b), n in self.versions.most_common()
        ]))  # fmt: skip
        out.append(_counts("Frames by command", "commands", self.commands.most_common()))
        out.append(_counts("Checksums", "checksums", self.checksums.most_common()))
        kinds = [(f"{d} {k}", n) for (d, k), n in self.message_kinds.most_common()]
        out.append(_counts("Messages by direction and kind", "messages", kinds))
        out.append(_counts("Anomalies by code", "codes", self.anomaly_codes.most_common()))
        return "\n".join(out)

    def _latency_section(self) -> str:
        if not self.latency:
            return "<p>No answered request.</p>"
        rows = []
        values = {c: np.concatenate(v) for c, v in self.latency.items()}
        for command in sorted(values, key=lambda c: -len(values[c])):
            us = values[command]
            p50, p90, p99 = (float(np.quantile(us, q)) / 1000 for q in (0.5, 0.9, 0.99))
            rows.append(
                f"<tr><td>{command}</td><td class=n>{len(us)}</td><td class=n>{p50:.3f}</td>"
                f"<td class=n>{p90:.3f}</td><td class=n>{p99:.3f}</td>"
                f"<td class=n>{us.max() / 1000:.3f}</td></tr>"
            )
        table = (
            "<table id=latency-table><tr><th>request</th><th>count</th><th>p50 ms</th>"
            "<th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>" + "".join(rows) + "</table>"
        )
        plot = _figure(lambda ax: _cdf(ax, values), "latency-plot", width=9, height=4.5)
        slow = sorted(self.slowest, key=lambda item: item[:2], reverse=True)
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

    def _throughput_section(self) -> str:
        if not self.throughput:
            return "<p>No application message.</p>"
        topics = [t for t, _ in self.topic_messages.most_common(TOPICS_PLOTTED)]
        plot = _figure(lambda axes: _io_graph(axes, self, topics), "throughput-plot",
                       width=9, height=6, rows=2)  # fmt: skip
        more = len(self.topic_messages) - len(topics)
        note = f"<p>{more} more topics not plotted.</p>" if more > 0 else ""
        losses = len(self.losses)
        marks = f"<p>{losses} gaps or drops marked (red lines).</p>" if losses else ""
        return plot + note + marks

    def _ladders(self) -> str:
        busiest = sorted(self.conversations, key=lambda c: (-c["frames"], c["conn_id"]))
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
            "<th>seconds</th><th>ended</th><th>anomalies</th><th>topics</th></tr>"
            + rows
            + "</table>"
        )
        drawn = [c for c in busiest if c["conn_id"] in self.ladder][:LADDER_CONNECTIONS]
        ladders = "".join(self._ladder(c) for c in drawn)
        return listing + ladders

    def _ladder(self, conv: dict[str, Any]) -> str:
        conn = conv["conn_id"]
        frames = self.ladder[conn]
        pending = sorted(self.ladder_anomalies.get(conn, []), key=lambda a: a["packet"])
        lines = []
        for f in frames:
            c2b = f["direction"] == "client_to_broker"
            ids = " ".join(
                f"{k.split('_')[0]}={f[k]}"
                for k in ("request_id", "producer_id", "consumer_id", "sequence_id")
                if f[k] is not None
            )
            label = f"{f['command']} {ids}".strip()
            problems = []  # anomalies up to this frame's packet: marked under it
            while pending and pending[0]["packet"] <= f["last_packet"]:
                problems.append(pending.pop(0))
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

    def _entities_section(self) -> str:
        if not self.entities:
            return "<p>No producer or consumer.</p>"
        cols = ["conn_id", "kind", "entity_id", "topic", "name", "subscription", "sub_type",
                "state", "permits", "delivered", "sent"]  # fmt: skip
        head = "".join(f"<th>{c}</th>" for c in cols) + "<th>acked</th><th>redelivered</th>"
        body = "".join(
            "<tr>"
            + "".join(f"<td>{_cell(e.get(c))}</td>" for c in cols)
            + self._consumer_cells(e)
            + "</tr>"
            for e in self.entities
        )
        more = self.entity_count - len(self.entities)
        note = f"<p>The first {len(self.entities)} of {self.entity_count}.</p>" if more else ""
        return f"<table id=entities-table><tr>{head}</tr>{body}</table>{note}"

    def _consumer_cells(self, e: dict[str, Any]) -> str:
        if e.get("kind") != "consumer":
            return "<td></td><td></td>"
        key = (e["conn_id"], e["entity_id"])
        return f"<td class=n>{self.acked[key]}</td><td class=n>{self.redelivered[key]}</td>"

    def _anomalies_section(self) -> str:
        if not self.anomaly_rows:
            return "<p>No anomaly.</p>"
        rows = "".join(
            f'<tr class="{a["severity"]}"><td>{a["code"]}</td><td>{a["severity"]}</td>'
            f"<td class=n>{a['conn_id']}</td><td>{a['direction'] or ''}</td>"
            f"<td class=n>{a['packet']}</td><td class=n>{_cell(a['stream_offset'])}</td>"
            f"<td>{html.escape(REGISTRY[a['code']].summary)}</td>"
            f"<td>{html.escape(a['detail'])}</td></tr>"
            for a in self.anomaly_rows
        )
        total = sum(self.anomaly_codes.values())
        note = f"<p>The first {len(self.anomaly_rows)} of {total}.</p>" if total > ROWS else ""
        return (
            '<input class=filter placeholder="filter anomalies" data-table="anomaly-rows">'
            "<table id=anomaly-rows><tr><th>code</th><th>severity</th><th>conn</th>"
            "<th>direction</th><th>packet</th><th>stream offset</th><th>meaning</th>"
            "<th>detail</th></tr>" + rows + "</table>" + note
        )


# --------------------------------------------------------------------------- pieces


def _when(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat(timespec="microseconds")


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


def _figure(draw: Any, key: str, *, width: float, height: float, rows: int = 1) -> str:
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


def _cdf(ax: Any, values: dict[str, np.ndarray]) -> None:
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


def _io_graph(axes: list[Any], report: Report, topics: list[str]) -> None:
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
    axes[1].set_xlabel(f"seconds since {_when(start * 1_000_000)}")
    axes[0].legend(fontsize=7, loc="upper right")


#: Nothing may be fetched: images are data: URLs, style and script are inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
_LADDER_COLUMNS = [
    "ts", "conn_id", "direction", "command", "request_id", "producer_id", "consumer_id",
    "sequence_id", "topic", "last_packet", "checksum", "complete",
]  # fmt: skip

_STYLE = """
body{font:14px system-ui,sans-serif;margin:0 2em 4em;color:#222}
nav{position:sticky;top:0;background:#fff;padding:.6em 0;border-bottom:1px solid #ddd}
nav a{margin-right:1.2em}
h2{margin-top:2em;border-bottom:2px solid #446;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.error td:first-child{color:#b00}
tr.warning td:first-child{color:#a60}
.facts th{background:#f4f4f8}
.plot{max-width:100%;display:block;margin:1em 0}
.ladder{margin:.4em 0;border:1px solid #ccd;padding:.3em .6em}
.lanes{font:12px ui-monospace,monospace;max-width:60em}
.lane-head{display:flex;justify-content:space-between;font-weight:bold;border-bottom:1px solid #999}
.step{display:flex;gap:1em;padding:1px 0}
.step.b2c{flex-direction:row-reverse;text-align:right;background:#f6f9ff}
.pkt{color:#888;min-width:4em}
.mark{color:#b00;padding-left:2em}
.mark.warning{color:#a60}.mark.info{color:#558}
.run>summary{color:#446;cursor:pointer}
input.filter{margin:.5em 0;padding:3px 6px;width:24em}
"""

_SCRIPT = """
document.querySelectorAll('input.filter').forEach(function (box) {
  box.addEventListener('input', function () {
    var want = box.value.toLowerCase();
    var rows = document.getElementById(box.dataset.table).querySelectorAll('tr');
    rows.forEach(function (row, i) {
      if (i === 0) { return; }
      var text = (row.dataset.text || '') + ' ' + row.textContent;
      row.style.display = text.toLowerCase().indexOf(want) >= 0 ? '' : 'none';
    });
  });
});
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>pulsar-dissect report: {title}</title>
<style>{style}</style></head>
<body><h1>Pulsar capture report</h1><p>{title}</p><nav>{nav}</nav>
{body}
<script>{script}</script>
</body></html>
"""
