"""Every column of every table holds the value its name says (dissector.tables).

Each test builds the events a table is made of with a different value in every field (so
that two columns swapped in a declaration cannot agree by chance), runs them through the
real TableBuilder into Arrow, and compares each row, column by column BY NAME, with values
written here from what was put in. The registry is checked too: every frontend lists the
same tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dissector.anomalies import Severity
from dissector.diagnose import Diagnoser
from dissector.diagnose.checks import CheckRow
from dissector.events import (
    Anomaly,
    AppMessage,
    Checksum,
    CloseReason,
    ConnectionInfo,
    Conversation,
    ConversationOpened,
    Direction,
    DirectionStats,
    Entity,
    EntityKind,
    EntityState,
    Finding,
    FlowKey,
    Frame,
    Journey,
    MessageKind,
    Outcome,
    Pair,
    TlsInfo,
    TraceFormat,
)
from dissector.pulsar.encoder import command
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES, BrokerEntryMetadata, MessageMetadata
from dissector.read import Capture
from dissector.tables.builders import TableBuilder
from dissector.tables.schema import SCHEMAS, TABLES

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
BIG = 1 << 64  # uint64 ids from 2**63 up are stored as Java's negative longs
KEY = FlowKey("1.2.3.4", 1122, "5.6.7.8", 3344)
#: The Community ID of KEY's TCP flow, from the spec's baseline table (corelight/community-id-spec,
#: baseline/README.md: TCP 1.2.3.4:1122 -> 5.6.7.8:3344, default seed).
CID = "1:wCb3OG7yAFWelaUydu0D+125CLM="


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as name -> value, timestamps as microseconds since the epoch."""
    ints = pa.schema(
        [f.with_type(pa.int64()) if pa.types.is_timestamp(f.type) else f for f in table.schema]
    )
    out: list[dict[str, Any]] = table.cast(ints).to_pylist()
    return out


def built(*events: Any) -> dict[str, list[dict[str, Any]]]:
    builder = TableBuilder(capture="cap-99")
    for ev in events:
        builder.add(ev)
    return {name: rows(table) for name, table in builder.tables().items()}


def frame(name: str, fields: dict[str, Any], **kw: Any) -> Frame:
    cmd = command(name, **fields)
    ctype = COMMAND_TYPES[name]
    base: dict[str, Any] = {
        "conn_id": 25,
        "direction": C2B,
        "stream_offset": 26,
        "total_size": 27,
        "command_size": 0,
        "command_type": ctype,
        "command_name": name,
        "command": cmd,
        "body": getattr(cmd, BODY_FIELDS[ctype]),
        "checksum": None,
    }
    return Frame(**{**base, **kw})


def test_frames_columns_by_name() -> None:
    meta = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    send = frame(
        "SEND",
        {
            "producer_id": BIG - 11,
            "sequence_id": 12,
            "num_messages": 13,
            "message_id": {"ledgerId": 14, "entryId": BIG - 15},
        },
        checksum=Checksum.VALID,
        checksum_expected=19,
        checksum_computed=20,
        broker_entry=BrokerEntryMetadata(broker_timestamp=17, index=18),
        metadata=meta,
        payload=memoryview(b"x" * 16),
        complete=False,
        first_packet=21,
        last_packet=22,
        first_ts=23,
        last_ts=24,
        topic="topic-28",
    )
    subscribe = frame(
        "SUBSCRIBE",
        {"topic": "t", "subscription": "s", "subType": 0, "consumer_id": 31, "request_id": 32},
        conn_id=41,
        direction=B2C,
    )
    ack = frame(
        "ACK",
        {"consumer_id": 51, "ack_type": 0, "message_id": [{"ledgerId": 52, "entryId": 53}] * 3},
    )
    opened = ConversationOpened(conn_id=25, key=KEY, ts=0, packet=0)
    got = built(opened, send, subscribe, ack)["frames"]
    assert got[0] == {
        "ts": 24,
        "conn_id": 25,
        "direction": "client_to_broker",
        "client_ip": "1.2.3.4",
        "client_port": 1122,
        "broker_ip": "5.6.7.8",
        "broker_port": 3344,
        "community_id": CID,
        "first_packet": 21,
        "last_packet": 22,
        "stream_offset": 26,
        "frame_size": 31,
        "command": "SEND",
        "request_id": None,
        "producer_id": -11,
        "consumer_id": None,
        "sequence_id": 12,
        "topic": "topic-28",
        "ledger_id": 14,
        "entry_id": -15,
        "checksum": "valid",
        "checksum_expected": 19,
        "checksum_computed": 20,
        "broker_entry_timestamp": 17_000,
        "broker_entry_index": 18,
        "num_messages": 13,
        "payload_size": 16,
        "complete": False,
        "fields": None,  # made on request only
    }
    sub = got[1]
    assert (sub["conn_id"], sub["direction"], sub["client_ip"]) == (41, "broker_to_client", None)
    assert sub["community_id"] is None  # no ConversationOpened for connection 41
    assert (sub["request_id"], sub["producer_id"], sub["consumer_id"]) == (32, None, 31)
    assert (sub["sequence_id"], sub["ledger_id"], sub["num_messages"]) == (None, None, None)
    assert {k: got[2][k] for k in ("consumer_id", "ledger_id", "entry_id", "num_messages")} == {
        "consumer_id": 51,
        "ledger_id": 52,
        "entry_id": 53,
        "num_messages": 3,
    }


def test_messages_columns_by_name() -> None:
    m = AppMessage(
        ts=1,
        conn_id=2,
        direction=B2C,
        kind=MessageKind.DELIVERED,
        topic="topic-3",
        producer_id=4,
        consumer_id=BIG - 5,
        producer_name="name-6",
        sequence_id=7,
        batch_index=8,
        batch_size=9,
        publish_time=10,
        event_time=11,
        key="key-12",
        key_base64=True,
        ordering_key=b"ok-13",
        properties=[("p", "14")],
        compression="ZSTD",
        compressed_size=15,
        payload_size=16,
        payload_sha256="sha-17",
        chunked=False,
        num_chunks=18,
        encrypted=True,
        encryption_keys=["k-19"],
        schema_version=b"sv-20",
        ledger_id=21,
        entry_id=22,
        partition=23,
        redelivery_count=24,
        broker_entry_timestamp=25,
        broker_entry_index=26,
        null_value=True,
        null_key=False,
        compacted_out=True,
        complete=False,
        first_packet=27,
        last_packet=28,
        stream_offset=29,
        preview="preview-30",
        problem="problem-31",
        trace_id="trace-32",
        span_id="span-33",
        trace_format=TraceFormat.JAEGER,
        trace_state="state-34",
        value='{"v": 35}',
        value_schema="schema-36",
        value_error="error-37",
    )
    opened = ConversationOpened(conn_id=2, key=KEY, ts=0, packet=0)
    assert built(opened, m)["messages"] == [
        {
            "ts": 1,
            "conn_id": 2,
            "community_id": CID,
            "direction": "broker_to_client",
            "kind": "delivered",
            "topic": "topic-3",
            "producer_id": 4,
            "consumer_id": -5,
            "producer_name": "name-6",
            "sequence_id": 7,
            "batch_index": 8,
            "batch_size": 9,
            "publish_time": 10_000,
            "event_time": 11_000,
            "key": "key-12",
            "key_base64": True,
            "ordering_key": b"ok-13",
            "properties": [("p", "14")],
            "trace_id": "trace-32",
            "span_id": "span-33",
            "trace_format": "jaeger",
            "trace_state": "state-34",
            "compression": "ZSTD",
            "compressed_size": 15,
            "payload_size": 16,
            "payload_sha256": "sha-17",
            "chunked": False,
            "num_chunks": 18,
            "encrypted": True,
            "encryption_keys": ["k-19"],
            "schema_version": b"sv-20",
            "ledger_id": 21,
            "entry_id": 22,
            "partition": 23,
            "redelivery_count": 24,
            "broker_entry_timestamp": 25_000,
            "broker_entry_index": 26,
            "null_value": True,
            "null_key": False,
            "compacted_out": True,
            "complete": False,
            "problem": "problem-31",
            "first_packet": 27,
            "last_packet": 28,
            "stream_offset": 29,
            "payload_preview": "preview-30",
            "value": '{"v": 35}',
            "value_schema": "schema-36",
            "value_error": "error-37",
        }
    ]


def test_anomalies_columns_by_name() -> None:
    a = Anomaly(
        code="code-1",
        severity=Severity.WARNING,
        conn_id=2,
        direction=C2B,
        stream_offset=3,
        detail="detail-4",
        length=5,
        packet=6,
        ts=7,
    )
    opened = ConversationOpened(conn_id=2, key=KEY, ts=0, packet=0)
    unowned = a._replace(conn_id=0)  # tied to no connection: no Community ID
    got = built(opened, a, unowned)["anomalies"]
    assert (got[1]["conn_id"], got[1]["community_id"]) == (0, None)
    assert got[:1] == [
        {
            "ts": 7,
            "conn_id": 2,
            "community_id": CID,
            "direction": "client_to_broker",
            "stream_offset": 3,
            "code": "code-1",
            "severity": "warning",
            "detail": "detail-4",
            "length": 5,
            "packet": 6,
        }
    ]


def _stats(base: int) -> DirectionStats:
    return DirectionStats(
        packets=base + 1,
        wire_bytes=base + 2,
        stream_bytes=base + 3,
        preamble_bytes=base + 4,
        frames=base + 5,
        frame_bytes=base + 6,
        skipped_bytes=base + 7,
        gap_bytes=base + 8,
    )


def test_conversations_and_entities_columns_by_name() -> None:
    producer = Entity(
        kind=EntityKind.PRODUCER,
        entity_id=BIG - 1,
        topic="topic-b",
        created_ts=2,
        name="name-3",
        access_mode="Exclusive",
        state=EntityState.CREATED,
        sent=4,
    )
    consumer = Entity(
        kind=EntityKind.CONSUMER,
        entity_id=5,
        topic="topic-a",
        created_ts=6,
        name="name-7",
        subscription="sub-8",
        sub_type="Shared",
        state=EntityState.CLOSED_BY_BROKER,
        closed_ts=9,
        permits=10,
        delivered=11,
    )
    info = ConnectionInfo(
        client_version="cv",
        server_version="sv",
        client_protocol=12,
        server_protocol=13,
        auth_method="token",
        proxy_to_broker_url="pulsar://b:14",
        original_principal="principal",
        max_message_size=15,
        feature_flags=["flag"],
        entities=[producer, consumer],
    )
    c = Conversation(
        conn_id=20,
        key=KEY,
        start_ts=21,
        end_ts=121,
        first_packet=22,
        last_packet=23,
        ended=CloseReason.RST,
        syn_seen=True,
        encrypted=False,
        proxied_client=("10.0.0.24", 25),
        c2b=_stats(100),
        b2c=_stats(200),
        info=info,
        anomalies=26,
        tls=TlsInfo(
            version="TLS 1.2",
            cipher="TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            sni="sni-27",
            alpn="alpn-28",
            cert_subject="CN=subject-29",
            cert_issuer="CN=issuer-30",
            cert_not_after=31,
            decrypted=True,
        ),
    )
    got = built(c)
    assert got["conversations"] == [
        {
            "ts": 21,
            "conn_id": 20,
            "client_ip": "1.2.3.4",
            "client_port": 1122,
            "broker_ip": "5.6.7.8",
            "broker_port": 3344,
            "community_id": CID,
            "end_ts": 121,
            "duration_us": 100,
            "ended": "rst",
            "syn_seen": True,
            "encrypted": False,
            "proxied_client_ip": "10.0.0.24",
            "proxied_client_port": 25,
            "first_packet": 22,
            "last_packet": 23,
            "packets_c2b": 101,
            "packets_b2c": 201,
            "bytes_c2b": 102,
            "bytes_b2c": 202,
            "stream_bytes_c2b": 103,
            "stream_bytes_b2c": 203,
            "frames_c2b": 105,
            "frames_b2c": 205,
            "frame_bytes_c2b": 106,
            "frame_bytes_b2c": 206,
            "skipped_bytes_c2b": 107,
            "skipped_bytes_b2c": 207,
            "gap_bytes_c2b": 108,
            "gap_bytes_b2c": 208,
            "preamble_bytes": 104,
            "client_version": "cv",
            "server_version": "sv",
            "client_protocol": 12,
            "server_protocol": 13,
            "auth_method": "token",
            "proxy_to_broker_url": "pulsar://b:14",
            "original_principal": "principal",
            "max_message_size": 15,
            "feature_flags": ["flag"],
            "producers": 1,
            "consumers": 1,
            "topics": ["topic-a", "topic-b"],
            "anomalies": 26,
            "capture": "cap-99",
            "tls_version": "TLS 1.2",
            "tls_cipher": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "tls_sni": "sni-27",
            "tls_alpn": "alpn-28",
            "tls_cert_subject": "CN=subject-29",
            "tls_cert_issuer": "CN=issuer-30",
            "tls_cert_not_after": 31,
            "tls_decrypted": True,
        }
    ]
    assert got["entities"] == [
        {
            "ts": 2,
            "conn_id": 20,
            "community_id": CID,
            "kind": "producer",
            "entity_id": -1,
            "topic": "topic-b",
            "name": "name-3",
            "subscription": None,
            "sub_type": None,
            "access_mode": "Exclusive",
            "state": "created",
            "closed_ts": None,
            "permits": 0,
            "delivered": 0,
            "sent": 4,
        },
        {
            "ts": 6,
            "conn_id": 20,
            "community_id": CID,
            "kind": "consumer",
            "entity_id": 5,
            "topic": "topic-a",
            "name": "name-7",
            "subscription": "sub-8",
            "sub_type": "Shared",
            "access_mode": None,
            "state": "closed_by_broker",
            "closed_ts": 9,
            "permits": 10,
            "delivered": 11,
            "sent": 0,
        },
    ]


def test_timeline_columns_by_name() -> None:
    req = frame("SEND", {"producer_id": 1}, last_ts=2, last_packet=3, stream_offset=4)
    resp = frame(
        "SEND_ERROR", {"producer_id": 1}, direction=B2C, last_ts=7, last_packet=5, stream_offset=6
    )
    p = Pair(
        conn_id=8,
        request=req,
        response=resp,
        outcome=Outcome.ERROR,
        request_id=9,
        producer_id=10,
        consumer_id=11,
        sequence_id=12,
        ledger_id=BIG - 13,
        entry_id=14,
        topic="topic-15",
        error_code="code-16",
        error_message="message-17",
        first_ack_packet=18,
    )
    unmatched = p._replace(request=None, outcome=Outcome.UNMATCHED)
    opened = ConversationOpened(conn_id=8, key=KEY, ts=0, packet=0)
    got = built(opened, p, unmatched)["timeline"]
    assert got[0] == {
        "ts": 2,
        "conn_id": 8,
        "community_id": CID,
        "request_command": "SEND",
        "response_command": "SEND_ERROR",
        "request_direction": "client_to_broker",
        "request_packet": 3,
        "response_packet": 5,
        "request_ts": 2,
        "response_ts": 7,
        "latency_us": 5,
        "request_id": 9,
        "producer_id": 10,
        "consumer_id": 11,
        "sequence_id": 12,
        "ledger_id": -13,
        "entry_id": 14,
        "topic": "topic-15",
        "outcome": "error",
        "error_code": "code-16",
        "error_message": "message-17",
        "request_offset": 4,
        "response_offset": 6,
        "first_ack_packet": 18,
    }
    none = ("request_command", "request_direction", "request_packet", "request_ts")
    assert got[1]["ts"] == 7 and all(got[1][k] is None for k in none)
    assert (got[1]["latency_us"], got[1]["request_offset"], got[1]["response_offset"]) == (
        None,
        None,
        6,
    )


def test_community_id_is_made_once_per_connection() -> None:
    """Every row of a connection, in every table, holds the very string made when it opened;
    the other direction of the same flow has the same id (the spec's "... and back" row)."""
    back = FlowKey("5.6.7.8", 3344, "1.2.3.4", 1122)
    no_ids = dict.fromkeys(Pair._fields[4:])  # request_id ... error_message
    builder = TableBuilder()
    for conn, key in ((3, KEY), (4, back)):
        send = frame("SEND", {"producer_id": 1, "sequence_id": 2}, conn_id=conn)
        gap = Anomaly.of(
            "tcp.gap", conn_id=conn, direction=C2B, stream_offset=0, detail="d", packet=1, ts=1
        )
        pair = Pair(conn_id=conn, request=send, response=None, outcome=Outcome.UNANSWERED, **no_ids)
        for ev in (ConversationOpened(conn, key, 0, 0), send, send, pair, gap):
            builder.add(ev)
    for conn in (3, 4):
        cids = []
        for name in ("frames", "timeline", "anomalies"):
            batches = builder.batches[name]
            at = batches.schema.names.index("community_id")
            cids += [row[at] for row in batches.rows if row[1] == conn]  # conn_id is 2nd
        assert len(cids) == 4 and all(c is cids[0] for c in cids), cids
        assert cids[0] == CID


class _OneFinding(Diagnoser):
    """A diagnoser that finds `found` at the first event and nothing at the end."""

    def __init__(self, found: Finding) -> None:
        super().__init__()
        self.found: list[Finding] = [found]

    def feed(self, ev: object) -> list[Finding]:
        out, self.found = self.found, []
        return out

    def finish(self) -> list[Finding]:
        return []


def test_findings_columns_by_name() -> None:
    f = Finding(
        code="code-1",
        severity=Severity.ERROR,
        ts=2,
        first_ts=3,
        last_ts=4,
        conn_id=5,
        key=KEY,
        topic="topic-6",
        entity="entity-7",
        summary="summary-8",
        hint="hint-9",
        count=10,
        value=11.5,
        unit="unit-12",
        evidence=(13, 14),
    )
    builder = TableBuilder(capture="cap-99", diagnoser=_OneFinding(f))
    builder.feeder()(ConversationOpened(conn_id=5, key=KEY, ts=0, packet=0))
    builder.finish()
    assert rows(builder.tables()["findings"]) == [
        {
            "ts": 2,
            "conn_id": 5,
            "first_ts": 3,
            "last_ts": 4,
            "client_ip": "1.2.3.4",
            "client_port": 1122,
            "broker_ip": "5.6.7.8",
            "broker_port": 3344,
            "community_id": CID,
            "code": "code-1",
            "severity": "error",
            "topic": "topic-6",
            "entity": "entity-7",
            "summary": "summary-8",
            "hint": "hint-9",
            "count": 10,
            "value": 11.5,
            "unit": "unit-12",
            "evidence": [13, 14],
        }
    ]


def test_journeys_columns_by_name() -> None:
    j = Journey(
        ts=2,
        conn_id=3,
        topic="topic-4",
        ledger_id=BIG - 5,
        entry_id=6,
        partition=7,
        batch_index=8,
        batch_size=9,
        chunks=10,
        producer_name="producer-11",
        sequence_id=12,
        publish_time=13,  # ms
        producer_conn_id=14,
        producer_id=15,
        send_ts=1_000,
        send_packet=16,
        receipt_ts=1_300,
        receipt_packet=17,
        error="error-18",
        subscription="sub-19",
        sub_type="Shared",
        consumer_conn_id=20,
        consumer_id=21,
        consumer_name="consumer-22",
        delivered_ts=1_700,
        delivered_packet=23,
        acked_ts=2_500,
        acked_packet=24,
        deliveries=25,
        redeliveries=26,
        broker_entry_ts=27,  # ms
        trace_id="trace-28",
        span_id="span-29",
        trace_format=TraceFormat.W3C,
        evicted=True,
        value='{"v": 30}',
        value_schema="schema-31",
        value_error="error-32",
    )
    builder = TableBuilder(capture="cap-99", tables=["journeys"])
    # the journey as the joiner hands its rows over (the joiner is compiled: no stand-in)
    builder.feeder()(ConversationOpened(conn_id=3, key=KEY, ts=0, packet=0))
    builder._joined([j])
    builder.finish()
    assert rows(builder.tables()["journeys"]) == [
        {
            "ts": 2,
            "conn_id": 3,
            "topic": "topic-4",
            "ledger_id": -5,
            "entry_id": 6,
            "partition": 7,
            "batch_index": 8,
            "batch_size": 9,
            "chunks": 10,
            "producer_name": "producer-11",
            "sequence_id": 12,
            "publish_time": 13_000,
            "producer_conn_id": 14,
            "producer_id": 15,
            "send_ts": 1_000,
            "send_packet": 16,
            "receipt_ts": 1_300,
            "receipt_packet": 17,
            "persist_us": 300,
            "error": "error-18",
            "subscription": "sub-19",
            "sub_type": "Shared",
            "consumer_conn_id": 20,
            "consumer_id": 21,
            "consumer_name": "consumer-22",
            "delivered_ts": 1_700,
            "delivered_packet": 23,
            "dispatch_us": 400,
            "acked_ts": 2_500,
            "acked_packet": 24,
            "consume_us": 800,
            "end_to_end_us": 1_500,
            "deliveries": 25,
            "redeliveries": 26,
            "broker_entry_ts": 27_000,
            "broker_skew_us": 14_000,
            "trace_id": "trace-28",
            "span_id": "span-29",
            "trace_format": "w3c",
            "evicted": True,
            "value": '{"v": 30}',
            "value_schema": "schema-31",
            "value_error": "error-32",
        }
    ]


class _OneCheck(Diagnoser):
    """A diagnoser whose checks are `made`."""

    def __init__(self, made: CheckRow) -> None:
        super().__init__()
        self.made = made

    def checked(self) -> list[CheckRow]:
        return [self.made]


def test_checks_columns_by_name() -> None:
    made = CheckRow(
        ts=2,
        check="check-3",
        counted=4,
        entities=5,
        failed=6,
        unknown=7,
        worst_us=8,
        p99_us=9,
        sketch=(10, 11),
        detail="detail-12",
    )
    builder = TableBuilder(capture="cap-99", tables=["checks"], diagnoser=_OneCheck(made))
    builder.finish()
    assert rows(builder.tables()["checks"]) == [
        {
            "ts": 2,
            "conn_id": 0,
            "check": "check-3",
            "count": 4,
            "entities": 5,
            "failed": 6,
            "unknown": 7,
            "worst_us": 8,
            "p99_us": 9,
            "latency_buckets": [10, 11],
            "detail": "detail-12",
        }
    ]


def test_every_column_is_checked_above() -> None:
    """The tests above name every column of every table (a new column needs a value there)."""
    source = Path(__file__).read_text()
    missing = [f"{t}.{c}" for t in TABLES for c in TABLES[t].names if f'"{c}":' not in source]
    assert not missing, missing


@pytest.mark.parametrize("name", list(TABLES))
def test_registry(name: str) -> None:
    table = TABLES[name]
    assert table.name == name and SCHEMAS[name] is table.schema
    assert table.schema.names == table.names and table.names[:2] == ["ts", "conn_id"]
    assert isinstance(getattr(Capture, name), property)  # read_capture(...).<table>
    assert f"{name}_row" in table.source


def test_builder_attributes_are_the_registry_tables() -> None:
    builder = TableBuilder()
    assert list(builder.batches) == list(TABLES)
    for name, batches in builder.batches.items():
        assert getattr(builder, name) is batches
        assert batches.schema is TABLES[name].schema
