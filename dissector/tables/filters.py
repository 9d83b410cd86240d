"""Row filters shared by the CLI's text output and its tables: topic, command, conn, time.

Input: filter settings, then frames (text mode) or an Arrow table.
Output: whether a frame passes (`Filter.frame`), or the table's passing rows (`Filter.table`).
Rule: a filter constrains only tables that have the column it names (anomalies have no topic,
for instance); an empty filter passes everything. Times are UTC microseconds.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from dissector.errors import UsageError
from dissector.events import Frame

_COMMAND_COLUMNS = ("command", "request_command", "response_command")


def parse_time(text: str) -> int:
    """ISO 8601 (naive means UTC) or Unix seconds, as microseconds since the epoch."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if seconds != seconds:
            raise UsageError(f"not a time: {text!r} (ISO 8601 or Unix seconds)")
        # beyond what a timestamp column holds (int64 µs, about ±292,000 years): the bound
        # itself, so `--since 1e20` keeps nothing and `--until inf` keeps everything
        micros = max(-(2.0**63), min(2.0**63, seconds * 1_000_000))
        return max(-(2**63), min(2**63 - 1, round(micros)))
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"not a time: {text!r} (ISO 8601 or Unix seconds)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return round(when.timestamp() * 1_000_000)


@dataclass(frozen=True, slots=True)
class Filter:
    topics: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()
    conns: frozenset[int] = frozenset()
    since: int | None = None
    until: int | None = None

    @property
    def empty(self) -> bool:
        return not (self.topics or self.commands or self.conns) and (
            self.since is None and self.until is None
        )

    def frame(self, f: Frame) -> bool:
        ts = f.last_ts
        return (
            (not self.topics or f.topic in self.topics)
            and (not self.commands or f.command_name in self.commands)
            and (not self.conns or f.conn_id in self.conns)
            and (self.since is None or ts >= self.since)
            and (self.until is None or ts < self.until)
        )

    def table(self, table: pa.Table) -> pa.Table:
        if self.empty or table.num_rows == 0:
            return table
        names = set(table.column_names)
        mask = pa.array([True] * table.num_rows)
        if self.conns and "conn_id" in names:
            mask = pc.and_(mask, pc.is_in(table["conn_id"], pa.array(sorted(self.conns))))
        if self.topics and "topic" in names:
            wanted = pa.array(sorted(self.topics))
            mask = pc.and_(mask, pc.fill_null(pc.is_in(table["topic"], wanted), False))
        if self.commands:
            columns = [c for c in _COMMAND_COLUMNS if c in names]
            if columns:
                wanted = pa.array(sorted(self.commands))
                hits = [pc.fill_null(pc.is_in(table[c], wanted), False) for c in columns]
                any_hit = hits[0]
                for hit in hits[1:]:
                    any_hit = pc.or_(any_hit, hit)
                mask = pc.and_(mask, any_hit)
        ts = pc.cast(table["ts"], pa.int64())
        if self.since is not None:
            mask = pc.and_(mask, pc.greater_equal(ts, self.since))
        if self.until is not None:
            mask = pc.and_(mask, pc.less(ts, self.until))
        return table.filter(mask)
