"""EDGE: one read plan, decided once from what was asked: which stages a read runs.

Input: the read's settings (`ReaderOptions`), the tables asked for, and the front end that
consumes the events (`TABLES`: a TableBuilder; `TEXT`: the one-line-per-frame view, live or
not; `EVENTS`: a caller of the event API; `SPANS`: `read -w`, which reads connections' ends
and packet ranges only).
Output: `ReadPlan` (frozen): the tables made and by whom, payload decoding, pairing (and the
journeys' and lifecycle facts), frame runs, frame bytes, the frames' `fields` column, the
findings and journeys consumers;
`plan_read` makes it; `plan_rows()` / `plan_table()`: asked -> stages, as docs/architecture.md
shows it (generated).
Rules:
- What each table needs is said here once: payload decoding (decompression, batches, chunks,
  and the anomalies they find) by every table but `WITHOUT_PAYLOADS`; the checks table (what
  the findings' rules checked) needs what the findings need, its Diagnoser being theirs
  (`DIAGNOSED`); the facts' completions
  (`WITH_PAIRS`) by the timeline, the findings and the journeys; frames one by one (no frame
  runs) by the findings and journeys (`FRAME_BY_FRAME`); the facts of what each MESSAGE and
  ACK says of its consumer's messages (`consumed`: dissector.facts.consumed) by the journeys
  alone, and by a caller of the event API whenever it has pairs (it may feed a joiner of its
  own); the facts of each producer's and consumer's steps (`lifecycles`:
  dissector.facts.lifecycles) by the findings and journeys, and by the event API with pairs;
  the schema facts as events (`schemas`: dissector.facts.schemas) by the findings when values
  are asked for (`diagnose --values`: schema.incompatible then compares the schemas), with no
  payload decoding.
  A read does only what its tables need: `read_tables(path, tables=["frames"])` decodes no
  payload and pairs nothing.
- `ReaderOptions.messages` and `.pairs` can turn a stage off, never on: a table that needs it
  is then made without it (the event API takes them as they are); except the facts the
  findings' rules and the journeys read (`FACTS_READ`: requests answered, SENDs receipted),
  made whenever those tables are (a timeline made beside them then has its rows).
- Frame runs (dissector.pulsar.frame_runs: no object per frame) are taken by a TableBuilder
  only, and only when nothing reads frames one by one: no payloads, pairs, frame bytes,
  `fields` column, findings or journeys.
- The text view decodes payloads (its `!` lines) and pairs only for a timeline made beside
  it (live); it never takes frame runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dissector.read.options import ReaderOptions

#: Front ends, by what consumes the events (see the module docstring).
TABLES, TEXT, EVENTS, SPANS = "tables", "text", "events", "spans"
FRONTS = (TABLES, TEXT, EVENTS, SPANS)

#: Tables whose rows never depend on payload decoding: reading only these skips it
#: (findings read frames' metadata, never their payloads' contents).
WITHOUT_PAYLOADS = frozenset({"frames", "timeline", "entities", "findings", "checks"})
#: Tables made from the protocol facts' completions (dissector.facts: requests answered,
#: SENDs receipted, deliveries acked): a read making one has the state machine make them
#: (the journeys read which SEND each receipt answers from them).
WITH_PAIRS = frozenset({"timeline", "findings", "checks", "journeys"})
#: Tables whose rules read the facts' completions whatever `ReaderOptions.pairs` says (the
#: findings' request and producer rules and the journeys' SEND side keep no matching of
#: their own).
FACTS_READ = frozenset({"findings", "checks", "journeys"})
#: Tables made from frames read one by one (their rules keep state across frames): a read
#: that makes one takes no frame runs.
FRAME_BY_FRAME = frozenset({"findings", "checks", "journeys"})
#: Tables made by the findings' Diagnoser (the checks: what its rules checked).
DIAGNOSED = frozenset({"findings", "checks"})


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """Which stages a read runs and which consumers see its events (see the module rules)."""

    front: str  # who consumes the events: TABLES, TEXT, EVENTS or SPANS
    tables: tuple[str, ...]  # the tables a TableBuilder makes, as asked (empty: none)
    payloads: bool  # payload decoding: a MessageExtractor (messages, their anomalies)
    values: bool  # values asked for (decoded by their schemas when payloads are decoded)
    pairs: bool  # the facts' completions: Pair events (the timeline, findings, journeys)
    frame_runs: bool  # frames of the commonest commands may come as FrameRun columns
    frame_bytes: bool  # frames carry their bytes as on the wire (the hex view)
    fields: bool  # the frames table's on-request `fields` column
    findings: bool  # a Diagnoser sees every event (the findings or checks table)
    journeys: bool  # a Joiner sees every event (the journeys table)
    #: with pairs, the facts of each MESSAGE and ACK for the journeys (dissector.facts.consumed)
    consumed: bool = False
    #: with pairs, each producer's and consumer's steps (dissector.facts.lifecycles)
    lifecycles: bool = False
    #: the schema facts follow their frame as events: the findings with values asked for
    #: (schema.incompatible compares the schema offered with the topic's)
    schemas: bool = False


def plan_read(
    options: ReaderOptions, tables: Iterable[str] | None = None, front: str = TABLES
) -> ReadPlan:
    """The plan of a read with these settings, making `tables` (TABLES front: every table
    when None; other fronts: none when None), its events consumed by `front`."""
    if front not in FRONTS:
        raise ValueError(f"unknown front end {front!r}; choose from {FRONTS}")
    if tables is None:
        names: tuple[str, ...] = _every_table() if front == TABLES else ()
    else:
        names = tuple(tables)
    asked = set(names)
    if front == EVENTS:
        payloads, pairs = options.messages, options.pairs
    elif front == SPANS:
        payloads = pairs = False
    else:
        payloads = options.messages and (front == TEXT or not asked <= WITHOUT_PAYLOADS)
        pairs = bool(asked & FACTS_READ) or (options.pairs and bool(asked & WITH_PAIRS))
    fields = options.fields and "frames" in asked
    findings, journeys = bool(asked & DIAGNOSED), "journeys" in asked
    consumed = pairs and (journeys or front == EVENTS)
    lifecycles = pairs and (findings or journeys or front == EVENTS)
    schemas = pairs and findings and options.values
    runs = front in (TABLES, SPANS) and not (
        payloads or pairs or options.frame_bytes or fields or asked & FRAME_BY_FRAME
    )
    return ReadPlan(
        front=front,
        tables=names,
        payloads=payloads,
        values=options.values,
        pairs=pairs,
        frame_runs=runs,
        frame_bytes=options.frame_bytes,
        fields=fields,
        findings=findings,
        journeys=journeys,
        consumed=consumed,
        lifecycles=lifecycles,
        schemas=schemas,
    )


def _every_table() -> tuple[str, ...]:
    """The registry's table names (imported here: the registry brings pyarrow, which a read
    of events alone does not load)."""
    from dissector.tables.schema import TABLES as REGISTRY

    return tuple(REGISTRY)


#: The stages shown in the docs' table, in its column order.
STAGES = ("payloads", "pairs", "frame_runs", "findings", "journeys")
#: One row of the docs' table: (what is asked, front, tables).
PlanRow = tuple[str, str, tuple[str, ...] | None]


def plan_rows() -> list[PlanRow]:
    """The rows of the docs' table: each table alone, then what the commands ask for."""
    return [
        *((f"`{name}`", TABLES, (name,)) for name in _every_table()),
        ("every table (`read -o`, `read_tables`)", TABLES, None),
        ("`frames`, `entities`", TABLES, ("frames", "entities")),
        ("`frames`, `timeline`", TABLES, ("frames", "timeline")),
        ("text view (`read`)", TEXT, None),
        ("event API (`iter_events`)", EVENTS, None),
        ("`read -w` (connections' packets)", SPANS, ("frames", "conversations")),
    ]


def plan_table() -> str:
    """The plan of each row of `plan_rows()` with the default settings, as a Markdown table
    (docs/architecture.md)."""
    head = "| asked | " + " | ".join(f"`{s}`" for s in STAGES) + " |"
    lines = [head, "|" + " --- |" * (len(STAGES) + 1)]
    for asked, front, tables in plan_rows():
        plan = plan_read(ReaderOptions(), tables, front)
        cells = " | ".join("yes" if getattr(plan, s) else "-" for s in STAGES)
        lines.append(f"| {asked} | {cells} |")
    return "\n".join(lines)
