"""The findings table: diagnoses made from many frames, declared once.

Input: nothing (the declaration below). Output: `FINDINGS` (row function findings_row(f,
community_id): a Finding of dissector.diagnose and its connection's Community ID), a
`Table` of dissector.tables.columns; endpoints come from the Finding's connection key.
Rule: as every table: each column names the expression that gives its value; codes,
severities and hints come from the registry (dissector.findings) through the Finding.
"""

from __future__ import annotations

import pyarrow as pa

from dissector.anomalies import Severity
from dissector.findings import REGISTRY
from dissector.tables.columns import (
    I64,
    STR,
    TS,
    Table,
    col,
    community_id_column,
    endpoints,
    one_of,
)

#: Packet numbers, as a list column (Parquet's "element" item name, as STRINGS).
PACKETS = pa.list_(pa.field("element", I64))
_CODES = ", ".join(REGISTRY)

FINDINGS = Table(
    "findings",
    "f, community_id",
    [
        col("ts", TS, "f.ts", "when it was established (threshold passed, proof seen)", False),
        col(
            "conn_id",
            I64,
            "f.conn_id",
            "connection id, joins every table (of the last evidence when it spans several)",
            False,
        ),
        col("first_ts", TS, "f.first_ts", "time of the first frame of the evidence"),
        col("last_ts", TS, "f.last_ts", "time of the last frame of the evidence"),
        *endpoints(),
        community_id_column(),
        col("code", STR, "f.code", f"finding code (docs/tables.md#finding-codes): {_CODES}", False),
        col("severity", STR, "f.severity", one_of(Severity), False),
        col("topic", STR, "f.topic", "topic concerned, when one is"),
        col(
            "entity",
            STR,
            "f.entity",
            "producer or consumer (id, name, subscription), subscription or hop concerned",
        ),
        col("summary", STR, "f.summary", "what happened, in one sentence with the numbers"),
        col("hint", STR, "f.hint", "what usually causes it and what to check"),
        col("count", I64, "f.count", "how many times it happened (frames, messages, requests)"),
        col("value", pa.float64(), "f.value", "the measured quantity (see unit)"),
        col("unit", STR, "f.unit", "unit of value: s, permits, redeliveries, bytes, ..."),
        col(
            "evidence",
            PACKETS,
            "list(f.evidence)",
            "capture packet numbers that prove it (the first ones and the last)",
        ),
    ],
    prelude="""
    client_ip, client_port, broker_ip, broker_port = f.key or _NO_KEY
    """,
    env={"_NO_KEY": (None, None, None, None)},
)
