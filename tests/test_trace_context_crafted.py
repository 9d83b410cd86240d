"""Trace context on the messages and journeys tables, from crafted captures read as users
read them: each message's ids are those its properties carry (written here, in each
format's own syntax), a batch entry's its own; a malformed value is an anomaly row.

Expected ids are the ones the scene wrote, normalised as docs/journeys.md says (the W3C ids
as they are; a 64-bit B3 trace id left-padded with zeros to 32 digits).
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector import FrameDecoder, command, encode_frame
from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    AppMessage,
    ConversationOpened,
    Direction,
    FlowKey,
    Frame,
    TraceFormat,
)
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.trace_context import KEYS
from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from dissector.read import read_capture
from dissector.tables.builders import TableBuilder
from dissector.tables.schema import TABLES
from tests.support.crafted import T0_US, Conn
from tests.support.scenes import TOPIC, Scene, ack, message, producer, receipt, send, subscribe

PUBLISH_MS = T0_US // 1000
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
W3C_VALUE = f"00-{TRACE}-{SPAN}-01"
JAEGER_VALUE = "deadbeef:deadbef0:0:1"  # ids without their leading zeros
B3_64 = "a3ce929d0e0e4736-00f067aa0ba902b7-1"  # a 64-bit trace id


def _props(**kv: str) -> list[dict[str, str]]:
    return [{"key": k.replace("_", "-"), "value": v} for k, v in kv.items()]


def _meta(seq: int, props: list[dict[str, str]] | None = None, **kw: Any) -> MessageMetadata:
    return MessageMetadata(
        producer_name="p", sequence_id=seq, publish_time=PUBLISH_MS, properties=props or [], **kw
    )


def _batch(entries: list[list[dict[str, str]]]) -> bytes:
    """A batch payload: entry i has sequence id 10 + i and the properties given."""
    out = b""
    for i, props in enumerate(entries):
        single = SingleMessageMetadata(payload_size=1, sequence_id=10 + i, properties=props)
        raw = single.SerializeToString()
        out += struct.pack(">I", len(raw)) + raw + b"x"
    return out


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _read(path: Path) -> dict[str, list[dict[str, Any]]]:
    cap = read_capture(path, tables=["messages", "journeys", "anomalies"])
    return {name: cap.arrow[name].to_pylist() for name in ("messages", "journeys", "anomalies")}


def _trace(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    return row["trace_id"], row["span_id"], row["trace_format"]


def test_a_message_and_a_batch_carry_their_own_trace_context(tmp_path: Path) -> None:
    """A plain message with traceparent and tracestate; a batch of three entries with a
    Jaeger id, a 64-bit B3 id and a malformed traceparent. Each messages row (produced and
    delivered) and each journey has its own message's ids; the malformed value is an
    anomaly of the SEND and one of the MESSAGE, naming its batch entry."""
    s = Scene()
    p, c = s.open(Conn(client_port=40001)), s.open(Conn(client_port=40002))
    for m in producer():
        s.at(0, m, p)
    for m in subscribe():
        s.at(0, m, c)
    plain = _meta(1, _props(traceparent=W3C_VALUE, tracestate="rojo=00f067aa0ba902b7"))
    entries = [
        _props(uber_trace_id=JAEGER_VALUE),
        _props(b3=B3_64),
        _props(traceparent=f"00-{'0' * 32}-{SPAN}-01"),
    ]
    batched = _meta(10, num_messages_in_batch=3)
    s.at(1.0, send(1, metadata=plain), p).at(1.001, receipt(1, entry=0), p)
    s.at(1.002, message(0, metadata=plain), c).at(1.003, ack(0), c)
    s.at(2.0, send(10, payload=_batch(entries), metadata=batched, num_messages=3), p)
    s.at(2.001, receipt(10, entry=1), p)
    s.at(2.002, message(1, payload=_batch(entries), metadata=batched), c).at(2.003, ack(1), c)
    tables = _read(s.write(tmp_path / "trace.pcap"))

    expected = {
        (0, None): (TRACE, SPAN, "w3c"),
        (1, 0): ("000000000000000000000000deadbeef", "00000000deadbef0", "jaeger"),
        (1, 1): ("0000000000000000a3ce929d0e0e4736", SPAN, "b3"),
        (1, 2): (None, None, None),
    }
    messages = tables["messages"]
    assert len(messages) == 8
    for row in messages:
        entry = 0 if row["sequence_id"] == 1 else 1
        assert _trace(row) == expected[(entry, row["batch_index"])], row
        state = "rojo=00f067aa0ba902b7" if row["sequence_id"] == 1 else None
        assert row["trace_state"] == state
    journeys = tables["journeys"]
    assert len(journeys) == 4
    for row in journeys:
        assert _trace(row) == expected[(row["entry_id"], row["batch_index"])], row
    faults = [
        a for a in tables["anomalies"] if a["code"] == AnomalyCode.MESSAGE_TRACE_CONTEXT_INVALID
    ]
    assert [(a["direction"], a["severity"]) for a in faults] == [
        (Direction.CLIENT_TO_BROKER, "warning"),
        (Direction.BROKER_TO_CLIENT, "warning"),
    ]
    for a in faults:
        assert a["detail"].startswith("batch entry 2: w3c 'traceparent': trace id is all zeros")


def test_a_capture_of_the_consumer_only_takes_the_delivered_message_s(tmp_path: Path) -> None:
    s = Scene()
    c = s.open()
    for m in subscribe():
        s.at(0, m, c)
    meta = _meta(5, _props(X_B3_TraceId=TRACE, X_B3_SpanId=SPAN, X_B3_Sampled="1"))
    s.at(1.0, message(3, metadata=meta), c).at(1.1, ack(3), c)
    tables = _read(s.write(tmp_path / "consumer.pcap"))
    (row,) = tables["journeys"]
    assert _trace(row) == (TRACE, SPAN, "b3multi") and row["send_ts"] is None
    assert [_trace(m) for m in tables["messages"]] == [(TRACE, SPAN, "b3multi")]


def test_a_delivery_seen_before_the_receipt_of_an_uncaptured_send(tmp_path: Path) -> None:
    """The capture began after the SEND; the MESSAGE precedes the receipt: the receipt's id
    joins them into one journey, which keeps the MESSAGE's trace context."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p, connect=False)
    s.open(c)
    for m in subscribe():
        s.at(0, m, c)
    meta = _meta(0, _props(uber_trace_id=JAEGER_VALUE))
    s.at(1.001, message(4, metadata=meta), c).at(1.003, receipt(0, entry=4), p)
    s.at(1.2, ack(4), c)
    (row,) = _read(s.write(tmp_path / "late.pcap"))["journeys"]
    assert row["receipt_ts"] is not None and row["delivered_ts"] is not None
    assert _trace(row) == ("000000000000000000000000deadbeef", "00000000deadbef0", "jaeger")


def test_a_chunked_message_takes_its_first_chunk_s_properties(tmp_path: Path) -> None:
    """The chunks of one message (each stored as an entry) carry its properties: one
    message, one journey, with the sw8 trace context of the properties."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p)
    s.open(c)
    for m in producer():
        s.at(0, m, p)
    for m in subscribe():
        s.at(0, m, c)
    trace, segment = "t.1.2", "seg.3"
    fields = ["1", _b64(trace), _b64(segment), "7", *(_b64(x) for x in "sipe")]
    props = _props(sw8="-".join(fields))

    def chunk(i: int) -> MessageMetadata:
        return _meta(0, props, uuid="u-1", chunk_id=i, num_chunks_from_msg=3,
                     total_chunk_msg_size=12)  # fmt: skip

    for i in range(3):
        sent = send(0, payload=b"part", metadata=chunk(i), is_chunk=True)
        s.at(1 + i / 10, sent, p).at(1.05 + i / 10, receipt(0, entry=20 + i), p)
    for i in range(3):
        s.at(2 + i / 10, message(20 + i, payload=b"part", metadata=chunk(i)), c)
    s.at(3, ack(20, 21, 22), c)
    tables = _read(s.write(tmp_path / "chunked.pcap"))
    (row,) = tables["journeys"]
    assert row["chunks"] == 3 and row["acked_ts"] is not None
    assert _trace(row) == (trace, f"{segment}-7", "sw8")
    assert [_trace(m) for m in tables["messages"]] == [(trace, f"{segment}-7", "sw8")] * 2


def test_no_trace_properties_no_trace(tmp_path: Path) -> None:
    s = Scene()
    p = s.open()
    for m in producer():
        s.at(0, m, p)
    s.at(1.0, send(1, metadata=_meta(1, _props(b3="1", key="value"))), p)
    tables = _read(s.write(tmp_path / "none.pcap"))
    assert [_trace(r) for r in tables["messages"] + tables["journeys"]] == [(None,) * 3] * 2
    assert not [a for a in tables["anomalies"] if a["code"].startswith("message.")]


# ------------------------------------------------- any properties: rows that fit the schema

_KEY = st.one_of(
    st.sampled_from(sorted(KEYS)).flatmap(lambda k: st.sampled_from([k, k.upper()])),
    st.text(st.characters(codec="utf-8"), max_size=12),
)
_VALUE = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=60),
    st.text(alphabet="0123456789abcdef-:%3A=,", max_size=70),
    st.just(W3C_VALUE),
    st.just(JAEGER_VALUE),
)
_PROPS = st.lists(st.fixed_dictionaries({"key": _KEY, "value": _VALUE}), max_size=6)
_KEY_FLOW = FlowKey("10.0.0.1", 40000, "10.0.0.2", 6650)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PROPS, min_size=1, max_size=3), _PROPS)
def test_any_properties_give_rows_that_fit_the_schema(
    entries: list[list[dict[str, str]]], outer: list[dict[str, str]]
) -> None:
    """A batch whose entries carry any properties, and a plain message: the messages,
    anomalies and journeys tables build (each row fits its schema), every trace anomaly
    is the registered code, and each message's trace is its own properties' verdict."""
    meta = _meta(10, num_messages_in_batch=len(entries))
    raw = encode_frame(
        command("SEND", producer_id=1, sequence_id=10), metadata=meta, payload=_batch(entries)
    ) + encode_frame(command("SEND", producer_id=1, sequence_id=20), metadata=_meta(20, outer),
                     payload=b"x")  # fmt: skip
    decoded = FrameDecoder().feed(raw)
    frames = [f._replace(conn_id=1, topic=TOPIC) for f in decoded if isinstance(f, Frame)]
    assert len(frames) == 2
    extractor = MessageExtractor()
    builder = TableBuilder(capture="c", tables=["messages", "anomalies", "journeys"])
    feed = builder.feeder()
    feed(ConversationOpened(conn_id=1, key=_KEY_FLOW, ts=0, packet=0))
    events: list[AppMessage | Anomaly] = []
    for f in frames:
        feed(f)
        for ev in extractor.feed(f):
            events.append(ev)
            feed(ev)
    builder.finish()
    tables = builder.tables()
    for name in ("messages", "anomalies", "journeys"):
        assert tables[name].schema == TABLES[name].schema
    apps = [e for e in events if isinstance(e, AppMessage)]
    assert len(apps) == len(entries) + 1 == tables["messages"].num_rows
    assert tables["journeys"].num_rows == len(entries) + 1
    for e in events:
        if isinstance(e, Anomaly):
            assert e.code in (AnomalyCode.MESSAGE_TRACE_CONTEXT_INVALID,) and len(e.detail) < 300
    journeys = {r["sequence_id"]: r for r in tables["journeys"].to_pylist()}
    for m in apps:
        assert m.trace_format is None or m.trace_format in TraceFormat
        assert (m.trace_id is None) == (m.trace_format is None)
        row = journeys[m.sequence_id]
        assert (row["trace_id"], row["span_id"], row["trace_format"]) == (
            m.trace_id,
            m.span_id,
            m.trace_format,
        )
