"""Schema tracking: each message gets the schema of its version, else its producer's or
consumer's declared one, else none with the reason; payloads written by fastavro's own writer."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
from hypothesis import given, settings
from hypothesis import strategies as st

from dissector.pulsar.wire import COMMAND_TYPES
from dissector.values import KeyFields, SchemaTracker, ValueDecoder, make_schema
from dissector.values import decode as decode_module
from dissector.values import schemas as schemas_module
from dissector.values.model import version_label
from tests.support.schema_facts import feed
from tests.support.schema_wire import command, version

NAMES = {
    "PRODUCER",
    "PRODUCER_SUCCESS",
    "SUBSCRIBE",
    "GET_SCHEMA",
    "GET_SCHEMA_RESPONSE",
    "GET_OR_CREATE_SCHEMA",
    "GET_OR_CREATE_SCHEMA_RESPONSE",
}
SEND = COMMAND_TYPES["SEND"]
MESSAGE = COMMAND_TYPES["MESSAGE"]
TOPIC = "persistent://public/default/orders"
P, C = 1, 2  # the producers' and the consumers' connections

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"], "default": None},
    ],
}


def avro_bytes(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def avro_schema(schema: dict[str, Any]) -> tuple[str, bytes, dict[str, str]]:
    return ("AVRO", json.dumps(schema).encode(), {})


def value_of(
    tracker: SchemaTracker, conn: int, ctype: int, handle: int, ver: bytes | None, payload: bytes
) -> tuple[str, Any, str | None]:
    res = tracker.resolve(conn, ctype, handle, ver)
    if res.schema is None:
        return res.label, None, None
    out = ValueDecoder().decode(payload, res.schema)
    return res.label, (json.loads(out.value) if out.value else None), out.error


def two_versions() -> SchemaTracker:
    t = SchemaTracker()
    feed(
        t,
        P,
        command("PRODUCER", avro_schema(V1), topic=TOPIC, producer_id=1, request_id=10),
        command("PRODUCER_SUCCESS", request_id=10, producer_name="a", schema_version=version(0)),
        command("PRODUCER", avro_schema(V2), topic=TOPIC, producer_id=2, request_id=11),
        command("PRODUCER_SUCCESS", request_id=11, producer_name="b", schema_version=version(1)),
    )
    feed(t, C, command("SUBSCRIBE", topic=TOPIC, subscription="s", consumer_id=7, request_id=1))
    return t


def test_schema_change_mid_topic_each_message_by_its_version() -> None:
    t = two_versions()
    m1 = avro_bytes(V1, {"id": 5})
    m2 = avro_bytes(V2, {"id": 6, "customer": "x"})
    assert value_of(t, P, SEND, 1, version(0), m1) == ("AVRO v0", {"id": 5}, None)
    assert value_of(t, P, SEND, 2, version(1), m2) == (
        "AVRO v1",
        {"id": 6, "customer": "x"},
        None,
    )
    # the consumer on another connection, declaring no schema, reads both by version
    assert value_of(t, C, MESSAGE, 7, version(0), m1) == ("AVRO v0", {"id": 5}, None)
    assert value_of(t, C, MESSAGE, 7, version(1), m2)[1] == {"id": 6, "customer": "x"}
    assert [s.command for s in t.history(TOPIC)] == [
        "PRODUCER",
        "PRODUCER_SUCCESS",
        "PRODUCER",
        "PRODUCER_SUCCESS",
    ]
    assert set(t.versions(TOPIC)) == {version(0), version(1)}


def test_unknown_version_is_undecoded_and_says_why() -> None:
    t = two_versions()
    label, value, _ = value_of(t, C, MESSAGE, 7, version(9), b"\x02")
    assert value is None
    assert label == "no schema: version 9 not seen for the topic"


def test_unknown_version_falls_back_to_the_declared_schema() -> None:
    t = SchemaTracker()
    feed(t, P, command("PRODUCER", ("STRING", b"", {}), topic=TOPIC, producer_id=1, request_id=1))
    assert value_of(t, P, SEND, 1, version(3), b"hi") == ("STRING (declared)", "hi", None)


def test_no_schema_anywhere_is_bytes_not_declared() -> None:
    """A topic without a schema is a BYTES topic (Pulsar's SchemaType.NONE is BYTES): the
    payload is its value, base64, as a declared BYTES schema gives it."""
    t = SchemaTracker()
    feed(t, P, command("PRODUCER", topic=TOPIC, producer_id=1, request_id=1))
    payload = b"plain \xff\x00 bytes"
    assert value_of(t, P, SEND, 1, None, payload) == (
        "BYTES (not declared)",
        base64.b64encode(payload).decode("ascii"),
        None,
    )
    feed(t, C, command("SUBSCRIBE", topic=TOPIC, subscription="s", consumer_id=3, request_id=2))
    assert value_of(t, C, MESSAGE, 3, None, b"hi")[:2] == ("BYTES (not declared)", "aGk=")
    # a version the capture did not teach, or a producer never seen, is still no schema
    assert t.resolve(C, MESSAGE, 3, version(4)).label == (
        "no schema: version 4 not seen for the topic"
    )
    assert (
        t.resolve(P, SEND, 99, None).label == "no schema: the producer was not seen being created"
    )


def test_mismatched_payload_is_an_error_row() -> None:
    t = two_versions()
    label, value, error = value_of(t, P, SEND, 2, version(1), avro_bytes(V1, {"id": 5}))
    # V1's record is one long; V2 then wants a union index: the bytes run out
    assert (label, value) == ("AVRO v1", None)
    assert error is not None and error.startswith("AVRO payload too short")
    label, value, error = value_of(
        t, P, SEND, 1, version(0), avro_bytes(V2, {"id": 5, "customer": "x"})
    )
    assert value is None and error == "AVRO value ends at byte 1, the payload has 4"


def test_schemas_learned_only_from_get_schema() -> None:
    t = SchemaTracker()
    feed(
        t,
        C,
        command(
            "SUBSCRIBE", topic=TOPIC + "-partition-3", subscription="s", consumer_id=1, request_id=1
        ),
        command("GET_SCHEMA", request_id=2, topic=TOPIC, schema_version=version(4)),
        command("GET_SCHEMA_RESPONSE", avro_schema(V1), request_id=2),  # version from the request
        command("GET_SCHEMA", request_id=3, topic=TOPIC),
        command("GET_SCHEMA_RESPONSE", avro_schema(V2), request_id=3, schema_version=version(5)),
    )
    m = avro_bytes(V1, {"id": 1})
    assert value_of(t, C, MESSAGE, 1, version(4), m) == ("AVRO v4", {"id": 1}, None)
    m = avro_bytes(V2, {"id": 2, "customer": None})
    assert value_of(t, C, MESSAGE, 1, version(5), m) == (
        "AVRO v5",
        {"id": 2, "customer": None},
        None,
    )


def test_get_or_create_schema_binds_its_version() -> None:
    t = SchemaTracker()
    feed(
        t,
        P,
        command("GET_OR_CREATE_SCHEMA", ("INT32", b"", {}), request_id=1, topic=TOPIC),
        command("GET_OR_CREATE_SCHEMA_RESPONSE", request_id=1, schema_version=version(2)),
        command("PRODUCER", topic=TOPIC, producer_id=1, request_id=2),
    )
    assert value_of(t, P, SEND, 1, version(2), b"\x00\x00\x00\x07") == ("INT32 v2", 7, None)


AUTO_CONSUMER = command(
    "SUBSCRIBE",
    ("AUTO_CONSUME", b"", {}),
    topic=TOPIC,
    subscription="s",
    consumer_id=8,
    request_id=2,
)


def test_auto_consume_resolves_to_the_real_schema() -> None:
    t = two_versions()
    feed(t, C, AUTO_CONSUMER)
    # with its version: that schema; without: the newest version the capture showed
    assert t.resolve(C, MESSAGE, 8, version(0)).label == "AVRO v0"
    res = t.resolve(C, MESSAGE, 8, None)
    assert (res.label, res.schema) == ("AVRO v1", t.versions(TOPIC)[version(1)])
    alone = SchemaTracker()
    feed(alone, C, AUTO_CONSUMER)
    # not BYTES: an AUTO_CONSUME consumer reads a message without a version by the topic's
    # schema (fetched when it subscribed), which this capture did not show
    assert alone.resolve(C, MESSAGE, 8, None).label == (
        "no schema: AUTO_CONSUME and no schema of the topic seen"
    )


def test_versions_per_topic_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(schemas_module, "MAX_SCHEMAS_PER_TOPIC", 3)
    t = SchemaTracker()
    for n in range(10):
        feed(
            t,
            P,
            command(
                "GET_OR_CREATE_SCHEMA", ("STRING", str(n).encode(), {}), request_id=n, topic=TOPIC
            ),
            command("GET_OR_CREATE_SCHEMA_RESPONSE", request_id=n, schema_version=version(n)),
        )
    assert sorted(t.versions(TOPIC)) == [version(7), version(8), version(9)]
    assert len(t.history(TOPIC)) == 3
    assert t.dropped["MAX_SCHEMAS_PER_TOPIC"] > 0


def test_topics_are_bounded(monkeypatch: Any) -> None:
    """(Schema requests in flight are the facts layer's: bounded there, bounds.MAX_PENDING.)"""
    monkeypatch.setattr(schemas_module, "MAX_TOPICS", 2)
    t = SchemaTracker()
    for n in range(20):
        feed(t, P, command("GET_SCHEMA", request_id=n, topic=f"t{n}"))
        feed(
            t,
            P,
            command(
                "SUBSCRIBE",
                ("STRING", b"", {}),
                topic=f"t{n}",
                subscription="s",
                consumer_id=n,
                request_id=100 + n,
            ),
        )
    assert len(t._topics) == 2
    assert t.dropped["MAX_TOPICS"] == 18


def test_the_decoder_parses_each_schema_once() -> None:
    decoder = ValueDecoder()
    schema = make_schema("AVRO", json.dumps(V1).encode())
    for n in range(50):
        assert decoder.decode(avro_bytes(V1, {"id": n}), schema, key=KeyFields()).value == (
            json.dumps({"id": n}, separators=(",", ":"))
        )
    assert decoder.parses == 1


def test_a_producer_waiting_for_exclusive_access_learns_from_the_second_success() -> None:
    t = SchemaTracker()
    feed(
        t,
        P,
        command("PRODUCER", ("INT8", b"", {}), topic=TOPIC, producer_id=1, request_id=1),
        command("PRODUCER_SUCCESS", request_id=1, producer_name="p", producer_ready=False),
        command("PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=version(4)),
    )
    assert set(t.versions(TOPIC)) == {version(4)}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(NAMES)),
            st.integers(0, 3),
            st.sampled_from([TOPIC, TOPIC + "-partition-1", "", "x"]),
            st.binary(max_size=9),
            st.sampled_from(
                [None, ("AVRO", b"{", {}), ("AUTO_CONSUME", b"", {}), ("INT8", b"", {})]
            ),
        ),
        max_size=30,
    ),
    st.integers(0, 3),
    st.binary(max_size=9),
)
def test_any_command_sequence_resolves_without_raising(
    steps: list[tuple[str, int, str, bytes, Any]], handle: int, ver: bytes
) -> None:
    t = SchemaTracker()
    for name, n, topic, v, schema in steps:
        fields: dict[str, Any] = {"request_id": n}
        if name in ("PRODUCER", "SUBSCRIBE", "GET_SCHEMA", "GET_OR_CREATE_SCHEMA"):
            fields["topic"] = topic
        if name == "PRODUCER":
            fields["producer_id"] = n
        if name == "SUBSCRIBE":
            fields["consumer_id"] = n
        if name in ("PRODUCER_SUCCESS", "GET_SCHEMA_RESPONSE", "GET_OR_CREATE_SCHEMA_RESPONSE"):
            fields["schema_version"] = v
        takes_schema = name in (
            "PRODUCER",
            "SUBSCRIBE",
            "GET_SCHEMA_RESPONSE",
            "GET_OR_CREATE_SCHEMA",
        )
        feed(t, C, command(name, schema if takes_schema else None, **fields))
    for ctype in (SEND, MESSAGE):
        res = t.resolve(C, ctype, handle, ver or None)
        if res.schema is not None:
            ValueDecoder().decode(b"\x01", res.schema)


def test_a_consumers_schema_decodes_only_messages_without_a_version() -> None:
    t = SchemaTracker()
    feed(
        t,
        C,
        command(
            "SUBSCRIBE",
            ("STRING", b"", {}),
            topic=TOPIC,
            subscription="s",
            consumer_id=1,
            request_id=1,
        ),
    )
    assert value_of(t, C, MESSAGE, 1, None, b"hi") == ("STRING (declared)", "hi", None)
    # written with version 2, never seen: the reader's schema may not be the writer's
    assert t.resolve(C, MESSAGE, 1, version(2)).label == (
        "no schema: version 2 not seen for the topic"
    )


def test_odd_sized_version_label_is_shortened_as_the_text_view_shows_bytes() -> None:
    # issue 42 item 14: a 1,000-byte version made a 2,000-character label on every row
    odd = bytes(range(250)) * 4
    t = SchemaTracker()
    feed(
        t,
        P,
        command("PRODUCER", avro_schema(V1), topic=TOPIC, producer_id=1, request_id=10),
        command("PRODUCER_SUCCESS", request_id=10, producer_name="a", schema_version=odd),
    )
    # the first 40 bytes (00 01 .. 27) as hex, then "...": hand-written, not computed by us
    first40 = "".join(f"{i:02x}" for i in range(40))
    assert t.resolve(P, SEND, 1, odd).label == f"AVRO v0x{first40}..."
    # a short odd version is shown whole, as before; the 8-byte ones as numbers
    assert version_label(b"\x01\x02") == "0x0102"
    assert version_label(b"\x00" * 7 + b"\x05") == "5"


def wide_avro(k: int, fields: int) -> bytes:
    names = [{"name": f"f{k:02d}_{i:04d}", "type": "long"} for i in range(fields)]
    return json.dumps({"type": "record", "name": f"W{k:02d}", "fields": names}).encode()


def test_parsed_schemas_are_bounded_in_bytes_least_recently_used_out(monkeypatch: Any) -> None:
    # issue 42 item 5: 40 wide schemas kept 490 MB parsed under a count bound of 1,024
    monkeypatch.setattr(decode_module, "MAX_PARSED_BYTES", 1 << 20)
    defs = [wide_avro(k, 400) for k in range(12)]
    size = len(defs[0])
    assert all(len(d) == size for d in defs) and 12_000 < size < 16_000
    cost = 4096 + 16 * size  # PARSED_SCHEMA_OVERHEAD + 16 per definition byte, by hand
    fit = (1 << 20) // cost  # schemas kept at once: 4 here
    decoder = ValueDecoder()
    payload = b"\x02" * 400  # 400 longs, each 1 (zigzag 2)
    for i, d in enumerate(defs):
        assert decoder.decode(payload, make_schema("AVRO", d)).error is None
        if i == 0:  # the first is used on and on: it stays, the others go in turn
            first = make_schema("AVRO", d)
        assert decoder.decode(payload, first).error is None
        assert decoder.parsed_bytes <= 1 << 20
        assert decoder.parsed_bytes == cost * min(i + 1, fit)
    assert decoder.parses == len(defs)  # the first was never parsed again
