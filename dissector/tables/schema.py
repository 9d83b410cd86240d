"""The registry of tables: every table by name, declared once, in the order frontends list them.

Input: the declarations of dissector.tables.per_frame, .per_connection, .diagnoses and
.journeys.
Output: `TABLES`, table name -> `Table` (Arrow schema, row function, column descriptions);
`SCHEMAS`, table name -> pyarrow.Schema, derived from it; `describe`. Which stages each
table needs (payload decoding, pairing, frames one by one) is said in dissector.read.plan.
Rules: readers, builders and every frontend take table names and schemas from here; `ts` first
(UTC, microseconds) and `conn_id` in every table; no unsigned types (Spark has none): protocol
uint64 ids are stored as int64, as Pulsar's Java implementation holds them; client/broker
naming for endpoints. One capture, one truth: payload decoding (decompression, batches,
chunks, and the anomalies they find) is skipped only for outputs whose rows cannot depend
on it; the anomalies table, conversations (their anomaly counts), messages, the text view
and summary always have it (tests/test_one_truth.py checks both sides).
"""

from __future__ import annotations

import pyarrow as pa

from dissector.tables.columns import Table
from dissector.tables.diagnoses import CHECKS, FINDINGS
from dissector.tables.journeys import JOURNEYS
from dissector.tables.per_connection import CONVERSATIONS, ENTITIES, TIMELINE
from dissector.tables.per_frame import ANOMALIES, FRAMES, MESSAGES

#: Every table, in the order the frontends list them.
TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        FRAMES,
        MESSAGES,
        ANOMALIES,
        CONVERSATIONS,
        TIMELINE,
        ENTITIES,
        FINDINGS,
        CHECKS,
        JOURNEYS,
    )
}
#: Table name -> its Arrow schema (the one pandas, Parquet and Spark come from).
SCHEMAS: dict[str, pa.Schema] = {name: t.schema for name, t in TABLES.items()}


def describe(table: str) -> dict[str, str]:
    """Column name -> one-line description, for docs and `--help`."""
    return TABLES[table].describe()
