"""EDGE: what the HTML report shows, gathered from the tables' record batches as they come.

Input: record batches of every table (`ReportData.add`), as a read streams them.
Output: counts, per-second buckets, the first frames of the busiest connections, the
slowest requests, the first anomalies, entities and findings (with the packets each is
evidence of, to mark them in the ladders), per subscription its journeys' counts and
latencies (dissector.tables.stats.Subscriptions, as `summary`): what `html.page` renders.
Rules:
- Bounded, whatever the capture's size: counts and per-second buckets, the first
  LADDER_FRAMES frames of at most LADDER_KEPT connections, the SLOWEST slowest requests, the
  first ROWS anomalies, entities and findings, the checks added up (one row per check);
  latency keeps one integer per answered request
  and per journey's dispatch and end-to-end latency (dissector.tables.stats, as `summary`).
- Every number kept is computed from the table rows it names; nothing is estimated.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from dissector.anomalies import AnomalyCode
from dissector.events import Outcome
from dissector.frontends.diagnoses import added_up
from dissector.tables.columns import path_text
from dissector.tables.stats import Latencies, Subscriptions

LADDER_FRAMES = 400  # frames kept per connection for its ladder
LADDER_KEPT = 64  # connections whose first frames are kept while reading
SLOWEST = 20
ROWS = 500

#: What the report reads: every table.
REPORT_TABLES = (
    "frames", "messages", "anomalies", "conversations", "timeline", "entities", "findings",
    "checks", "journeys",
)  # fmt: skip
_LADDER_COLUMNS = [
    "ts", "conn_id", "direction", "command", "request_id", "producer_id", "consumer_id",
    "sequence_id", "topic", "last_packet", "checksum", "complete",
]  # fmt: skip


class ReportData:
    """Aggregates made from record batches as they come (the page: `html.page`)."""

    def __init__(self, files: list[str], journeys: bool = True) -> None:
        """journeys: whether the journeys table is read (the Subscriptions section)."""
        self.files = [path_text(f) for f in files]  # names that are not UTF-8 as \xNN
        self.journeys = journeys
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.commands: Counter[str] = Counter()
        self.checksums: Counter[str] = Counter()
        self.message_kinds: Counter[tuple[str, str]] = Counter()
        self.anomaly_codes: Counter[str] = Counter()
        self.anomaly_rows: list[dict[str, Any]] = []
        self.conversations: list[dict[str, Any]] = []
        self.versions: Counter[tuple[str, str]] = Counter()
        self.latency = Latencies()
        self.subscriptions = Subscriptions()
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
        self.findings: list[dict[str, Any]] = []  # the first ROWS (ranked when shown)
        self.finding_count = 0
        #: what the rules checked: the checks rows added up as they come, one per check
        self.checks: list[dict[str, Any]] = []
        #: conn_id -> packet -> (severity, code) of the findings it is evidence of
        self.evidence: dict[int, dict[int, list[tuple[str, str]]]] = defaultdict(dict)

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
            if r["code"] in (
                AnomalyCode.TCP_GAP,
                AnomalyCode.CAPTURE_KERNEL_DROPS,
                AnomalyCode.CAPTURE_NOT_DISSECTED,
            ):
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
            if r["outcome"] == Outcome.REDELIVERED:
                self.redelivered[key] += 1
            elif r["response_command"] == "ACK" and r["outcome"] == Outcome.SUCCESS:
                self.acked[key] += 1
        answered, latency = self.latency.add(batch)
        if not answered.any():
            return
        rows_at = np.flatnonzero(answered)[np.argsort(-latency, kind="stable")[:SLOWEST]]
        for r in batch.take(pa.array(rows_at)).to_pylist():
            self._seq += 1
            item = (int(r["latency_us"]), -self._seq, r)
            if len(self.slowest) < SLOWEST:
                heapq.heappush(self.slowest, item)
            elif item[:2] > self.slowest[0][:2]:
                heapq.heapreplace(self.slowest, item)

    def _journeys(self, batch: pa.RecordBatch) -> None:
        self.subscriptions.add(batch)

    def _checks(self, batch: pa.RecordBatch) -> None:
        self.checks = [
            {"check": name, **added}
            for name, added in added_up([*self.checks, *batch.to_pylist()], sketches=True).items()
        ]

    def _findings(self, batch: pa.RecordBatch) -> None:
        self.finding_count += batch.num_rows
        for r in batch.to_pylist():
            if len(self.findings) < ROWS:
                self.findings.append(r)
            marks = self.evidence[r["conn_id"]]
            for packet in r["evidence"] or []:
                marks.setdefault(packet, []).append((r["severity"], r["code"]))

    def _entities(self, batch: pa.RecordBatch) -> None:
        self.entity_count += batch.num_rows
        room = ROWS - len(self.entities)
        if room > 0:
            self.entities.extend(batch.slice(0, room).to_pylist())


def when(us: int) -> str:
    """A table timestamp (microseconds since the epoch) as the page shows it: ISO 8601, UTC."""
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).isoformat(timespec="microseconds")
