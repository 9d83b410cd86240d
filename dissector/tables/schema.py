"""The registry of tables: every table by name, declared once, in the order frontends list them.

Input: the declarations of dissector.tables.per_frame, .per_connection, .diagnoses and
.journeys.
Output: `TABLES`, table name -> `Table` (Arrow schema, row function, column descriptions);
`SCHEMAS`, table name -> pyarrow.Schema, derived from it; `describe`; which tables may be
read without payload decoding (`WITHOUT_PAYLOADS`, `needs_payloads`) and which need
pairing (`needs_pairs`).
Rules: readers, builders and every frontend take table names and schemas from here; `ts` first
(UTC, microseconds) and `conn_id` in every table; no unsigned types (Spark has none): protocol
uint64 ids are stored as int64, as Pulsar's Java implementation holds them; client/broker
naming for endpoints. One capture, one truth: payload decoding (decompression, batches,
chunks, and the anomalies they find) is skipped only for outputs whose rows cannot depend
on it; the anomalies table, conversations (their anomaly counts), messages, the text view
and summary always have it (tests/test_one_truth.py checks both sides).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from dissector.tables.columns import Table
from dissector.tables.diagnoses import FINDINGS
from dissector.tables.journeys import JOURNEYS
from dissector.tables.per_connection import CONVERSATIONS, ENTITIES, TIMELINE
from dissector.tables.per_frame import ANOMALIES, FRAMES, MESSAGES

#: Every table, in the order the frontends list them.
TABLES: dict[str, Table] = {
    t.name: t
    for t in (FRAMES, MESSAGES, ANOMALIES, CONVERSATIONS, TIMELINE, ENTITIES, FINDINGS, JOURNEYS)
}
#: Table name -> its Arrow schema (the one pandas, Parquet and Spark come from).
SCHEMAS: dict[str, pa.Schema] = {name: t.schema for name, t in TABLES.items()}


def describe(table: str) -> dict[str, str]:
    """Column name -> one-line description, for docs and `--help`."""
    return TABLES[table].describe()


#: Tables whose rows never depend on payload decoding: reading only these may skip it
#: (findings read frames' metadata, never their payloads' contents).
WITHOUT_PAYLOADS = frozenset({"frames", "timeline", "entities", "findings"})


#: Tables made from the protocol facts' completions (dissector.facts: requests answered,
#: SENDs receipted, deliveries acked): a read making one has the state machine make them.
FROM_FACTS = frozenset({"timeline", "findings"})


def needs_pairs(tables: Iterable[str]) -> bool:
    """Whether making these tables needs the protocol facts' completion facts (pairs)."""
    return not FROM_FACTS.isdisjoint(tables)


#: Tables made from frames read one by one (their rules keep state across frames): a read
#: that makes one takes no frame runs.
FRAME_BY_FRAME = frozenset({"findings", "journeys"})


def takes_frame_runs(tables: Iterable[str]) -> bool:
    """Whether a TableBuilder making these tables takes frame runs (dissector.pulsar.
    frame_runs): not when it makes findings or journeys, which read frames one by one."""
    return not FRAME_BY_FRAME & set(tables)


def needs_payloads(tables: Iterable[str]) -> bool:
    """Whether making these tables needs payload decoding (any other output always does)."""
    return not set(tables) <= WITHOUT_PAYLOADS
