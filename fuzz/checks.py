"""The invariants every level checks, and the input and outcome records of the levels.

Input: Arrow tables, conversation events, or a capture path with reader settings.
Output: nothing when the invariants hold; an `InvariantError` naming the one broken.
Rules (see fuzz/README.md): every table has its schema, valid UTF-8 in every string column,
every time column a date Python can show, every anomaly code registered; for every direction
of every connection frame + skipped + gap (+ preamble) bytes = stream bytes, no more stream
bytes beyond gaps than the wire carried, every frame counted in its conversation and every
row's connection reported. `read_checked` runs the reader's own loop (iter_events into a
TableBuilder, and the text view) on a capture and checks all of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dissector.anomalies import REGISTRY
from dissector.capture._source import MAX_TS_US
from dissector.errors import InputError
from dissector.events import Anomaly, Conversation, Direction, Frame
from dissector.frontends.text import FrameLines
from dissector.read import ReaderOptions, iter_events
from dissector.read.options import PathLike, as_paths, diagnoser
from dissector.read.plan import plan_read
from dissector.tables.builders import TableBuilder
from dissector.tables.filters import Filter
from dissector.tables.schema import TABLES

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT

#: Times Python's datetime can show (year 1 to 9999), in µs since the epoch.
MIN_SHOWN_US = -62_135_596_800_000_000


class InvariantError(AssertionError):
    """An invariant that does not hold: `name` keys the failure, `detail` says how."""

    def __init__(self, name: str, detail: str, where: str = "") -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail
        self.where = where  # which column or table, when that tells failures apart


def require(ok: bool, name: str, detail: object = "", where: str = "") -> None:
    if not ok:
        raise InvariantError(name, str(detail)[:500], where)


@dataclass
class Case:
    """One input of one level."""

    level: str
    size: int  # bytes of input (capture before gzip, stream, frames)
    ops: list[str]
    data: Any  # bytes, or the records / frames of the level
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class Seen:
    """What running an input gave (for the campaign's coverage counts)."""

    codes: set[str] = field(default_factory=set)
    rejected: bool = False
    extra: float = 0.0  # seconds of cross-checks (API, command line) beyond the level's work


def check_tables(tables: dict[str, pa.Table]) -> None:
    """Strings are text, times are dates Python can show, codes are registered."""
    for name, table in tables.items():
        require(table.schema.equals(TABLES[name].schema), "schema", name)
        if not table.num_rows:
            continue
        try:
            table.validate(full=True)  # string columns hold valid UTF-8
        except pa.ArrowInvalid as exc:
            raise InvariantError("arrow_invalid", f"{name}: {exc}", name) from None
        times = [
            chunk.view(pa.int64())
            for column, f in zip(table.columns, table.schema, strict=True)
            if pa.types.is_timestamp(f.type)
            for chunk in column.chunks
        ]
        if times:
            low, high = pc.min_max(pa.concat_arrays(times)).values()
            if low.is_valid:
                ok = low.as_py() >= MIN_SHOWN_US and high.as_py() <= MAX_TS_US
                if not ok:  # name the column
                    for column, f in zip(table.columns, table.schema, strict=True):
                        if pa.types.is_timestamp(f.type):
                            lo, hi = pc.min_max(column.cast(pa.int64())).values()
                            bad = lo.is_valid and not MIN_SHOWN_US <= lo.as_py() <= MAX_TS_US
                            bad = bad or (hi.is_valid and hi.as_py() > MAX_TS_US)
                            where = f"{name}.{f.name}"
                            require(not bad, "time_not_a_date", f"{lo}..{hi}", where)
    if "anomalies" in tables:
        codes = set(tables["anomalies"].column("code").to_pylist())
        require(codes <= set(REGISTRY), "unregistered_code", codes - set(REGISTRY))


_ACCOUNTING = [
    f"{k}_bytes_{side}" for k in ("frame", "skipped", "gap", "stream") for side in ("c2b", "b2c")
] + ["preamble_bytes"]


def check_conversations(
    convs: list[Conversation],
    tables: dict[str, pa.Table],
    frames: Counter[tuple[int, Direction]] | None = None,
) -> None:
    """Byte accounting per direction (frame + skipped + gap + preamble = stream bytes; no
    more stream bytes than the wire carried, gaps aside), every frame counted in its
    conversation, and every row's connection reported.

    frames: the frame events of each direction, when the caller counted them."""
    ids = set()
    for conv in convs:
        ids.add(conv.conn_id)
        for side, stats in ((C2B, conv.c2b), (B2C, conv.b2c)):
            parts = stats.frame_bytes + stats.skipped_bytes + stats.gap_bytes
            if side is C2B:
                parts += stats.preamble_bytes
            where = f"conn {conv.conn_id} {side.value}"
            require(
                parts == stats.stream_bytes,
                "byte_accounting",
                f"{where}: {parts} != {stats.stream_bytes} ({stats})",
            )
            require(
                stats.stream_bytes - stats.gap_bytes <= stats.wire_bytes,
                "stream_beyond_wire",
                f"{where}: {stats}",
            )
            if frames is not None:
                n = frames[(conv.conn_id, side)]
                require(n == stats.frames, "frames_not_counted", f"{where}: {n} rows, {stats}")
    table = tables["conversations"]
    require(table.num_rows == len(convs), "conversation_rows", f"{table.num_rows} != {len(convs)}")
    cols = table.select(_ACCOUNTING).to_pydict()
    for i in range(table.num_rows):
        for end in ("c2b", "b2c"):
            parts = sum(cols[f"{k}_bytes_{end}"][i] for k in ("frame", "skipped", "gap"))
            parts += cols["preamble_bytes"][i] if end == "c2b" else 0
            require(parts == cols[f"stream_bytes_{end}"][i], "byte_accounting_table", cols)
    for name in ("frames", "messages", "timeline", "entities"):
        conn = set(pc.unique(tables[name].column("conn_id")).to_pylist())
        require(conn <= ids, "rows_without_conversation", f"{name}: {sorted(conn - ids)}")


def table_rows(tables: dict[str, pa.Table]) -> dict[str, int]:
    return {n: t.num_rows for n, t in tables.items()}


def read_checked(
    paths: PathLike | Iterable[PathLike], options: ReaderOptions, seen: Seen
) -> dict[str, pa.Table]:
    """Every table of the captures made by the reader's own loop (iter_events into a
    TableBuilder, and the text view of every event), with the invariants above checked;
    `seen` gets the anomaly codes, and `rejected` when the input is not a capture."""
    files = as_paths(paths)
    # the facts the read of every table makes (its plan: the findings' and journeys' facts
    # whatever `options.pairs` says), so that this loop is the reader's own
    options = replace(options, pairs=plan_read(options).pairs)
    builder = TableBuilder(
        capture=files[0] if files else "", diagnoser=diagnoser(options), values=options.values
    )
    add = builder.feeder()  # the findings' rules see every event first, as in a read
    lines = FrameLines(Filter())
    conversations: list[Conversation] = []
    frames: Counter[tuple[int, Direction]] = Counter()  # frame events per direction
    events = 0
    try:
        for _, ev in iter_events(files, options):
            events += 1
            add(ev)
            text = lines.line(ev)
            if text is not None:
                text.encode("utf-8")  # what printing it does: no lone surrogates
            if type(ev) is Frame:
                frames[(ev.conn_id, ev.direction)] += 1
            elif type(ev) is Anomaly:
                seen.codes.add(ev.code)
            elif type(ev) is Conversation:
                conversations.append(ev)
    except InputError:
        require(events == 0, "input_error_after_events", f"after {events} events")
        seen.rejected = True
    builder.finish()
    tables = builder.tables()
    check_tables(tables)
    check_conversations(conversations, tables, frames)
    return tables
