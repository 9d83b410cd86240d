"""Trace context of real messages: the official client sends messages whose properties carry
trace context in each format (ids the test makes itself), one plainly and one in a batch
whose entries carry different trace contexts, plus one malformed; the broker (pulsar-lite,
or Apache's own: the `peer` fixture) stores and delivers them, tcpdump captures lo.

The truth is the test's own: the ids it generated and wrote into each message's properties
(and the client's record that the consumer received those very properties). Every messages
row (produced and delivered) and every journey must carry exactly those ids, normalised as
docs/journeys.md says (lower case; 64-bit and short ids left-padded with zeros); the
malformed one must be an anomaly row of its SEND and of each MESSAGE of it, and have no
trace. A message the client received twice (a redelivery, seen once under load) is in its
record: it is expected twice among the deliveries, nothing else is tolerated.
"""

from __future__ import annotations

import base64
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dissector.anomalies import AnomalyCode
from dissector.read import read_capture
from tests.support.recorded import PEERS, Peer, client, peer_of, recorded, topic_name

pytestmark = [pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    """pulsar-lite (started per recording) or the session's Apache broker."""
    return peer_of(request)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _cases() -> list[tuple[dict[str, str], tuple[str, str, str] | None]]:
    """(properties, the trace they carry: trace_id, span_id, trace_format) of each message,
    with fresh ids; the last one malformed (None)."""
    t128, s64 = secrets.token_hex(16), secrets.token_hex(8)
    b3_trace, b3_span, b3_parent = secrets.token_hex(8), secrets.token_hex(8), secrets.token_hex(8)
    m_trace, m_span = secrets.token_hex(16), secrets.token_hex(8)
    j_trace = "1" + secrets.token_hex(5)  # 11 digits: a short id, no leading zeros
    j_span = "2" + secrets.token_hex(3)
    sw_trace, sw_segment = f"{secrets.token_hex(16)}.1.{secrets.randbelow(10**9)}", "seg." + t128
    return [
        (
            {"traceparent": f"00-{t128}-{s64}-01", "tracestate": "congo=t61rcWkgMzE"},
            (t128, s64, "w3c"),
        ),
        ({"b3": f"{b3_trace}-{b3_span}-1-{b3_parent}"}, ("0" * 16 + b3_trace, b3_span, "b3")),
        (
            {"X-B3-TraceId": m_trace.upper(), "X-B3-SpanId": m_span, "X-B3-Sampled": "1"},
            (m_trace, m_span, "b3multi"),
        ),
        (
            {"uber-trace-id": f"{j_trace}%3A{j_span}%3A0%3A1"},
            (j_trace.rjust(32, "0"), j_span.rjust(16, "0"), "jaeger"),
        ),
        (
            {
                "sw8": "-".join(
                    ["1", _b64(sw_trace), _b64(sw_segment), "3"]
                    + [_b64(x) for x in ("svc", "inst", "/send", "broker:6650")]
                )
            },
            (sw_trace, f"{sw_segment}-3", "sw8"),
        ),
        ({"traceparent": f"00-{'0' * 32}-{s64}-01", "other": "kept"}, None),
    ]


def _check(rows: list[dict[str, Any]], sent: dict[int, Any], what: str) -> None:
    for row in rows:
        props, trace = sent[row["sequence_id"]]
        got = (row["trace_id"], row["span_id"], row["trace_format"])
        assert got == (trace or (None, None, None)), (what, props, row)


def test_trace_context_of_real_messages(tmp_path: Path, peer: Peer) -> None:
    import pulsar

    cap = tmp_path / "trace.pcap"
    topic = topic_name("trace")
    plain, batched = _cases(), _cases()
    sent: dict[int, tuple[dict[str, str], tuple[str, str, str] | None]] = {}
    receipts: list[tuple[int, dict[str, str]]] = []  # every message received, in order
    with recorded(cap, peer) as broker, client(broker.url) as c:
        consumer = c.subscribe(topic, "traced", consumer_type=pulsar.ConsumerType.Exclusive)
        one = c.create_producer(topic, producer_name="trace-plain", batching_enabled=False)
        for seq, (props, trace) in enumerate(plain, start=100):
            one.send(f"plain-{seq}".encode(), properties=props, sequence_id=seq)
            sent[seq] = (props, trace)
        many = c.create_producer(
            topic,
            producer_name="trace-batch",
            batching_enabled=True,
            batching_max_messages=len(batched),
            batching_max_publish_delay_ms=60_000,  # the batch is sent when full
        )
        ids: dict[int, Any] = {}
        for seq, (props, trace) in enumerate(batched, start=200):
            many.send_async(
                f"batch-{seq}".encode(),
                lambda res, mid, seq=seq: ids.setdefault(seq, mid),
                properties=props,
                sequence_id=seq,
            )
            sent[seq] = (props, trace)
        many.flush()
        while {seq for seq, _ in receipts} != set(sent):  # a redelivery is received too
            got = consumer.receive(timeout_millis=10_000)
            receipts.append((int(got.data().decode().split("-")[1]), got.properties()))
            consumer.acknowledge(got)
        consumer.close()
        one.close()
        many.close()

    # the client's record: each message received with the properties it was sent with (as
    # often as the client received it: once, or again if the broker redelivered it, e.g.
    # after a reconnection under load), and the batch's entries in one entry (indexes 0-5)
    for seq, props in receipts:
        assert props == sent[seq][0], seq
    times = Counter(seq for seq, _ in receipts)
    assert len({(m.ledger_id(), m.entry_id()) for m in ids.values()}) == 1
    assert sorted(m.batch_index() for m in ids.values()) == list(range(len(batched)))

    tables = read_capture(cap, tables=["messages", "journeys", "anomalies"]).arrow
    messages = tables["messages"].to_pylist()
    produced = [r["sequence_id"] for r in messages if r["kind"] == "produced"]
    delivered = [r["sequence_id"] for r in messages if r["kind"] == "delivered"]
    assert sorted(produced) == sorted(sent) and Counter(delivered) == times
    _check(messages, sent, "messages")
    batch_rows = [r for r in messages if r["sequence_id"] >= 200]
    assert {r["batch_index"] for r in batch_rows} == set(range(len(batched)))
    for r in messages:
        state = "congo=t61rcWkgMzE" if r["trace_format"] == "w3c" else None
        assert r["trace_state"] == state
    journeys = tables["journeys"].to_pylist()
    assert sorted(r["sequence_id"] for r in journeys) == sorted(sent)
    assert {r["sequence_id"]: r["deliveries"] for r in journeys} == times
    assert all(r["subscription"] == "traced" and r["acked_ts"] is not None for r in journeys)
    _check(journeys, sent, "journeys")
    faults = [
        a
        for a in tables["anomalies"].to_pylist()
        if a["code"] == AnomalyCode.MESSAGE_TRACE_CONTEXT_INVALID
    ]
    malformed = "w3c 'traceparent': trace id is all zeros"
    heads = [a["detail"][: a["detail"].find(malformed) + len(malformed)] for a in faults]
    entry = f"batch entry {len(batched) - 1}: "
    # the plain message's SEND and each MESSAGE of it, the batch entry's SEND and MESSAGEs
    bad_plain, bad_entry = 100 + len(plain) - 1, 200 + len(batched) - 1
    assert Counter((a["direction"], h) for a, h in zip(faults, heads, strict=True)) == {
        ("client_to_broker", malformed): 1,
        ("client_to_broker", entry + malformed): 1,
        ("broker_to_client", malformed): times[bad_plain],
        ("broker_to_client", entry + malformed): times[bad_entry],
    }
