"""Trace context of real messages: the official client sends messages whose properties carry
trace context in each format (ids the test makes itself), one plainly and one in a batch
whose entries carry different trace contexts, plus one malformed; pulsar-lite stores and
delivers them, tcpdump captures lo.

The truth is the test's own: the ids it generated and wrote into each message's properties
(and the client's record that the consumer received those very properties). Every messages
row (produced and delivered) and every journey must carry exactly those ids, normalised as
docs/journeys.md says (lower case; 64-bit and short ids left-padded with zeros); the
malformed one must be an anomaly row of its SEND and of its MESSAGE, and have no trace.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from typing import Any

import pytest

from dissector.anomalies import AnomalyCode
from dissector.read import read_capture
from tests.support.recorded import client, recorded, topic_name

pytestmark = [pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]


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


def test_trace_context_of_real_messages(tmp_path: Path) -> None:
    import pulsar

    cap = tmp_path / "trace.pcap"
    topic = topic_name("trace")
    plain, batched = _cases(), _cases()
    sent: dict[int, tuple[dict[str, str], tuple[str, str, str] | None]] = {}
    received: dict[int, dict[str, str]] = {}
    with recorded(cap) as lite, client(lite.url) as c:
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
        for _ in sent:
            got = consumer.receive(timeout_millis=10_000)
            received[int(got.data().decode().split("-")[1])] = got.properties()
            consumer.acknowledge(got)
        consumer.close()
        one.close()
        many.close()

    # the client's record: each message received with the properties it was sent with, and
    # the batch's entries in one entry (batch indexes 0-5)
    assert received == {seq: props for seq, (props, _) in sent.items()}
    assert len({(m.ledger_id(), m.entry_id()) for m in ids.values()}) == 1
    assert sorted(m.batch_index() for m in ids.values()) == list(range(len(batched)))

    tables = read_capture(cap, tables=["messages", "journeys", "anomalies"]).arrow
    messages = tables["messages"].to_pylist()
    assert sorted(r["sequence_id"] for r in messages) == sorted([*sent, *sent])  # sent, got
    _check(messages, sent, "messages")
    batch_rows = [r for r in messages if r["sequence_id"] >= 200]
    assert {r["batch_index"] for r in batch_rows} == set(range(len(batched)))
    for r in messages:
        state = "congo=t61rcWkgMzE" if r["trace_format"] == "w3c" else None
        assert r["trace_state"] == state
    journeys = tables["journeys"].to_pylist()
    assert sorted(r["sequence_id"] for r in journeys) == sorted(sent)
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
    # the plain message's SEND and MESSAGE, the batch entry's SEND and MESSAGE
    assert sorted(heads) == sorted([malformed, malformed, entry + malformed, entry + malformed])
    assert sorted(a["direction"] for a in faults) == sorted(
        ["client_to_broker", "broker_to_client"] * 2
    )
