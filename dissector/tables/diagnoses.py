"""The findings and checks tables: diagnoses made from many frames, and what the rules
checked, declared once.

Input: nothing (the declarations below). Output: `FINDINGS` (row function findings_row(f,
community_id): a Finding of dissector.diagnose and its connection's Community ID) and
`CHECKS` (row function checks_row(c): a CheckRow of dissector.diagnose.checks), `Table`s of
dissector.tables.columns; endpoints come from the Finding's connection key.
Rule: as every table: each column names the expression that gives its value; codes,
severities and hints come from the registry (dissector.findings) through the Finding; the
checks' names and words come from dissector.diagnose.checks through the CheckRow.
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
#: The checks, as dissector.diagnose.checks.CHECKS names them (a test keeps them the same:
#: the table module does not import the rules, which cost start-up time).
_CHECKS = ("sends", "requests", "pings", "permits", "connections", "bytes")

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

CHECKS = Table(
    "checks",
    "c",
    [
        col("ts", TS, "c.ts", "the end of the capture (or group of captures) checked", False),
        col("conn_id", I64, "0", "0: a check spans every connection of the capture", False),
        col(
            "check",
            STR,
            "c.check",
            f"what was checked ({one_of(_CHECKS)}): SENDs answered, requests answered, "
            "PINGs answered, consumers' permits followed, connections from their CONNECT, "
            "connections with every byte",
            False,
        ),
        col(
            "count",
            I64,
            "c.counted",
            "how many were checked: answered (SENDs, requests, PINGs), followed (consumers), "
            "captured from their CONNECT (connections), with no byte missing (bytes)",
            False,
        ),
        col(
            "entities",
            I64,
            "c.entities",
            "what they belong to: producers (sends), connections (requests, pings, "
            "connections, bytes), consumers (permits)",
            False,
        ),
        col(
            "failed", I64, "c.failed", "of count, answered with an error (SEND_ERROR, ERROR)", False
        ),
        col(
            "unknown",
            I64,
            "c.unknown",
            "what the capture could not tell: no answer in it, permits granted before it, "
            "connections started before it (no CONNECT), connections that lost bytes",
            False,
        ),
        col("worst_us", I64, "c.worst_us", "the longest answer, in microseconds"),
        col(
            "p99_us",
            I64,
            "c.p99_us",
            "99% of the answers took at most this (µs; the sketch's bound, at most worst_us)",
        ),
        col(
            "latency_buckets",
            PACKETS,
            "list(c.sketch)",
            "answers per latency bucket (exact below 16 µs, then 16 buckets a doubling: "
            "dissector.diagnose.checks.bucket); rows add up bucket by bucket",
        ),
        col(
            "detail",
            STR,
            "c.detail",
            "the check in words: what was checked, what could not be known",
        ),
    ],
)
