"""Summaries of dissected captures: overview, busiest connections, latencies, subscriptions,
errors.

Input: the record batches of the conversations, timeline, journeys and anomalies tables (as
a streaming read hands them over, in any order), and the row counts of frames and messages;
or whole tables (`summarize`).
Output: a JSON-ready dict (`Summary.result`) and its text rendering (`render`).
Rules: every number is computed from the tables alone, so a summary can always be checked
against them; latency statistics and the counts per subscription are dissector.tables.stats'
(exact percentiles over answered pairs and over journeys, the fleet job's Spark summary
computes the same). Memory is bounded by the lists shown: the `top` busiest connections (by
frames) and counts per command, code, outcome, subscription and topic; latencies are kept as
8-byte integers per answered request and per journey's dispatch and end-to-end latency.
"""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from dissector.events import Outcome
from dissector.frontends.terminal import printable
from dissector.tables.stats import (
    COUNT,
    JOURNEY_LATENCIES,
    MS_NAMES,
    NEVER_DELIVERED,
    SUBSCRIPTION_COUNTS,
    Latencies,
    Subscriptions,
    latency_name,
    stat_label,
)

#: Connections listed by default: the busiest, by frames.
TOP = 20
#: Tables a summary reads.
SUMMARY_TABLES = ("conversations", "timeline", "journeys", "anomalies")


class Summary:
    """A summary made from record batches as they come; see the module docstring."""

    def __init__(self, top: int | None = TOP, journeys: bool = True) -> None:
        """top: connections listed (the busiest, by frames); None: every one. journeys:
        whether the journeys table is read (else `result` says None of subscriptions)."""
        self.top = top
        self.journeys = journeys
        self.connections = 0
        self.frames = self.messages = 0
        self._busiest: list[tuple[int, int, dict[str, Any]]] = []  # heap (frames, -id, row)
        self._latency = Latencies()
        self._subscriptions = Subscriptions()
        self._errors: Counter[str] = Counter()
        self._unanswered: Counter[str] = Counter()
        self._unmatched: Counter[str] = Counter()
        self._repeated: Counter[str] = Counter()  # acks of what was already acknowledged
        self._anomalies: Counter[str] = Counter()

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        if table == "conversations":
            self._conversations(batch)
        elif table == "timeline":
            self._timeline(batch)
        elif table == "journeys":
            self._subscriptions.add(batch)
        elif table == "anomalies":
            self._anomalies.update(batch.column("code").to_pylist())

    def _conversations(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            self.connections += 1
            frames = int(row["frames_c2b"]) + int(row["frames_b2c"])
            item = (frames, -int(row["conn_id"]), row)
            if self.top is None or len(self._busiest) < self.top:
                heapq.heappush(self._busiest, item)
            elif self.top and item[:2] > self._busiest[0][:2]:
                heapq.heapreplace(self._busiest, item)

    def _timeline(self, batch: pa.RecordBatch) -> None:
        outcome = np.asarray(batch.column("outcome").to_pylist(), dtype=object)
        request = np.asarray(batch.column("request_command").to_pylist(), dtype=object)
        self._latency.add(batch, outcome)
        codes = batch.column("error_code").to_pylist()
        self._errors.update(
            "?" if c is None else c
            for c, o in zip(codes, outcome, strict=True)
            if o == Outcome.ERROR
        )
        self._unanswered.update(
            str(r) for r, o in zip(request, outcome, strict=True) if o == Outcome.UNANSWERED
        )
        responses = batch.column("response_command").to_pylist()
        first_ack = batch.column("first_ack_packet").to_pylist()
        for r, o, first in zip(responses, outcome, first_ack, strict=True):
            if o != Outcome.UNMATCHED:
                continue
            if first is not None:  # a client's repeated ack: no fault
                self._repeated[str(r)] += 1
            else:
                self._unmatched[str(r)] += 1

    def result(self) -> dict[str, Any]:
        busiest = sorted(self._busiest, key=lambda item: -item[1])  # by conn_id
        return {
            "connection_count": self.connections,
            "connections": [_connection(row) for _, _, row in busiest],
            "latency": self._latency.stats(),
            "journeys": self._subscriptions.result() if self.journeys else None,
            "errors": dict(self._errors),
            "unanswered": dict(self._unanswered),
            "unmatched": dict(self._unmatched),
            "repeated_acks": dict(self._repeated),
            "anomalies": dict(self._anomalies),
            "frames": self.frames,
            "messages": self.messages,
        }


def _connection(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "conn_id": int(row["conn_id"]),
        "client": f"{row['client_ip']}:{row['client_port']}",
        "broker": f"{row['broker_ip']}:{row['broker_port']}",
        "start": row["ts"].isoformat(),
        "duration_s": round(int(row["duration_us"]) / 1e6, 6),
        "ended": row["ended"],
        "encrypted": bool(row["encrypted"]),
        "client_version": _opt(row["client_version"]),
        "server_version": _opt(row["server_version"]),
        "frames": [int(row["frames_c2b"]), int(row["frames_b2c"])],
        "bytes": [int(row["stream_bytes_c2b"]), int(row["stream_bytes_b2c"])],
        "gap_bytes": int(row["gap_bytes_c2b"]) + int(row["gap_bytes_b2c"]),
        "producers": _int(row["producers"]),
        "consumers": _int(row["consumers"]),
        "topics": list(row["topics"]) if row["topics"] is not None else [],
        "anomalies": int(row["anomalies"]),
    }


def summarize(tables: dict[str, pa.Table], top: int = TOP) -> dict[str, Any]:
    """The summary of whole tables (those of `read_tables`; without journeys, no
    subscriptions)."""
    summary = Summary(top, journeys="journeys" in tables)
    for name in SUMMARY_TABLES:
        for batch in tables[name].to_batches() if name in tables else []:
            summary.add(name, batch)
    summary.frames = int(tables["frames"].num_rows)
    summary.messages = int(tables["messages"].num_rows)
    return summary.result()


def _opt(value: Any) -> Any:
    return None if value is None or value != value else value  # NaN -> None


def _int(value: Any) -> int | None:
    return None if value is None or value != value else int(value)


#: Width of the name column of the latency tables: lines of 100 characters (the longest
#: request command has 25).
NAME_WIDTH = 30


def _latency(summary: dict[str, Any]) -> list[str]:
    lines = ["", "Latency per request (ms)"]
    heads = "".join(f" {stat_label(name):>9}" for name in MS_NAMES)  # p50 ... max
    lines.append(f"  {'request':<{NAME_WIDTH}} {COUNT:>7}{heads}")
    for command, s in sorted(summary["latency"].items()):
        values = "".join(f" {s[name]:>9.3f}" for name in MS_NAMES)
        lines.append(f"  {command:<{NAME_WIDTH}} {s[COUNT]:>7}{values}")
    return lines


#: What each journey latency measures, as the summary's headings say it.
JOURNEY_HEADINGS = {
    "dispatch_us": "Dispatch latency per subscription (ms: SEND_RECEIPT to first MESSAGE)",
    "end_to_end_us": "End-to-end latency per subscription (ms: SEND to the subscription's ACK)",
}


def _subscription_name(name: str | None) -> str:
    return "? (SUBSCRIBE not captured)" if name is None else name


def _by_topic(subscriptions: list[dict[str, Any]], cells: Any, width: int = 30) -> list[str]:
    """One line per subscription under a line naming its topic (subscriptions sorted by
    topic); cells(s): the text after its name (`width` characters, or more)."""
    lines, topic = [], object()
    for s in subscriptions:
        if s["topic"] != topic:
            topic = s["topic"]
            lines.append(f"  {topic or '? (topic unknown)'}")
        lines.append(f"    {_subscription_name(s['subscription']):<{width}}{cells(s)}")
    return lines


def _journeys(summary: dict[str, Any]) -> list[str]:
    if summary["journeys"] is None:
        return ["", "Subscriptions: not read (--no-journeys)"]
    subscriptions = summary["journeys"]["subscriptions"]
    never = summary["journeys"][NEVER_DELIVERED]
    lines = ["", "Subscriptions (from journeys; twice: delivered more than once, redeliveries > 0)"]
    if not subscriptions and not never:
        return [lines[-1].split(" (")[0] + ": none"]
    names = [n.replace("delivered_twice", "twice").replace("_", " ") for n in SUBSCRIPTION_COUNTS]
    lines.append(f"  {'topic, subscription':<32}" + "".join(f" {n:>10}" for n in names))
    lines += _by_topic(
        subscriptions, lambda s: "".join(f" {s[n]:>10}" for n in SUBSCRIPTION_COUNTS)
    )
    for item in never:
        lines.append(f"  never delivered (no delivery seen): {item[NEVER_DELIVERED]} of "
                     f"{item['topic'] or '? (topic unknown)'}")  # fmt: skip
    heads = "".join(f" {stat_label(name):>9}" for name in MS_NAMES)
    for column in JOURNEY_LATENCIES:
        key = latency_name(column)
        measured = [s for s in subscriptions if s[key][COUNT]]
        lines += ["", JOURNEY_HEADINGS[column] + ("" if measured else ": none")]
        if measured:
            lines.append(f"  {'topic, subscription':<{NAME_WIDTH}} {COUNT:>7}{heads}")
            lines += _by_topic(measured, lambda s, k=key: _stats_cells(s[k]), NAME_WIDTH - 2)
    return lines


def _stats_cells(stats: dict[str, Any]) -> str:
    return f" {stats[COUNT]:>7}" + "".join(f" {stats[name]:>9.3f}" for name in MS_NAMES)


def render(summary: dict[str, Any]) -> str:
    """The summary as text, one section per heading."""
    count, shown = summary["connection_count"], len(summary["connections"])
    lines = [f"{summary['frames']} frames, {summary['messages']} messages, {count} connections"]
    lines += _latency(summary)
    lines += _journeys(summary)
    lines.append("")
    more = f" (the {shown} busiest, by frames; --all lists every one)" if shown < count else ""
    lines.append("Connections" + more)
    for c in summary["connections"]:
        versions = f"{c['client_version'] or '?'} / {c['server_version'] or '?'}"
        lines.append(
            f"  #{c['conn_id']} {c['client']} -> {c['broker']} {c['duration_s']:.3f}s "
            f"ended={c['ended']} frames={c['frames'][0]}/{c['frames'][1]} "
            f"bytes={c['bytes'][0]}/{c['bytes'][1]} gaps={c['gap_bytes']} "
            f"producers={c['producers']} consumers={c['consumers']} "
            f"anomalies={c['anomalies']}{' TLS' if c['encrypted'] else ''} ({versions})"
        )
        for topic in c["topics"]:
            lines.append(f"      {topic}")
    for title, key in (
        ("Errors by code", "errors"),
        ("Unanswered requests", "unanswered"),
        ("Unmatched responses (answers to no request seen)", "unmatched"),
        ("Repeated acks (of messages already acknowledged: not a fault)", "repeated_acks"),
        ("Anomalies by code", "anomalies"),
    ):
        lines.append("")
        lines.append(title + ("" if summary[key] else ": none"))
        for name, count in sorted(summary[key].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {name:<40} {count:>7}")
    return "\n".join(printable(line) for line in lines) + "\n"
