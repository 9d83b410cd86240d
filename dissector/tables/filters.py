"""Row filters shared by the CLI's text output and its tables: topic, command, conn, time.

Input: filter settings (the read options --topic, --command, --conn, --since, --until), then
frames and anomalies (text mode) or Arrow tables and record batches.
Output: the settings' predicate (`Filter.predicate`, dissector.tables.predicates: what every
engine compiles), whether a frame or an anomaly line passes (`Filter.frame`,
`Filter.anomaly`), or the table's passing rows (`Filter.table`).
Rule: a filter constrains only tables that have the column it names (anomalies have no topic,
for instance); an empty filter passes everything. Times are UTC microseconds; a command is
looked for in every command column a table has (command, request_command, response_command).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from dissector.errors import UsageError
from dissector.events import Anomaly, Frame
from dissector.tables.predicates import (
    AllOf,
    AnyOf,
    Data,
    Predicate,
    RowCheck,
    Term,
    apply,
    row_check,
)

#: The columns a command filter looks in, in the tables that have them.
COMMAND_COLUMNS = ("command", "request_command", "response_command")
#: What the text view's lines are checked on: a frame's frames-table columns (from the
#: Frame), an anomaly's conn_id only (its lines are not filtered by time).
FRAME_LINE = ("ts", "conn_id", "topic", "command")
ANOMALY_LINE = ("conn_id",)


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
    #: The settings as one predicate, built once (every engine compiles this).
    predicate: AllOf = field(init=False, repr=False, compare=False)
    _frame: RowCheck = field(init=False, repr=False, compare=False)
    _anomaly: RowCheck = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        predicate = self._predicate()
        object.__setattr__(self, "predicate", predicate)
        object.__setattr__(self, "_frame", row_check(predicate, FRAME_LINE))
        object.__setattr__(self, "_anomaly", row_check(predicate, ANOMALY_LINE))

    def __reduce__(self) -> tuple[type[Filter], tuple[object, ...]]:
        """Pickled as its settings (the compiled checks are made again)."""
        return Filter, (self.topics, self.commands, self.conns, self.since, self.until)

    def _predicate(self) -> AllOf:
        parts: list[Predicate] = []
        if self.conns:
            parts.append(Term("conn_id", "in", tuple(sorted(self.conns))))
        if self.topics:
            parts.append(Term("topic", "in", tuple(sorted(self.topics))))
        if self.commands:
            wanted = tuple(sorted(self.commands))
            parts.append(AnyOf(tuple(Term(c, "in", wanted) for c in COMMAND_COLUMNS)))
        if self.since is not None:
            parts.append(Term("ts", "ge", self.since))
        if self.until is not None:
            parts.append(Term("ts", "lt", self.until))
        return AllOf(tuple(parts))

    @property
    def empty(self) -> bool:
        return not self.predicate.parts

    def frame(self, f: Frame) -> bool:
        """Whether a frame's line is shown: the predicate on its frames-table row."""
        return self._frame((f.last_ts, f.conn_id, f.topic, f.command_name))  # FRAME_LINE

    def anomaly(self, a: Anomaly) -> bool:
        """Whether an anomaly's line is shown (the text view filters them by conn only)."""
        return self._anomaly((a.conn_id,))  # ANOMALY_LINE

    def table(self, table: Data) -> Data:
        """The rows of a table or record batch that the filter keeps."""
        return table if self.empty else apply(self.predicate, table)
