"""Pathological schemas and payloads hit named bounds and come back as value errors; random
bytes with every schema never raise (hypothesis)."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.values import SchemaInfo, ValueDecoder, make_schema
from dissector.values import avro as avro_module
from dissector.values.bounds import MAX_DEPTH, MAX_VALUE_JSON_BYTES
from dissector.values.model import WIRE_TYPE_NAMES
from tests.support.schema_wire import kv_halves, kv_properties
from tests.values.test_structs import EVERY_AVRO_TYPE, order_classes


def zigzag(n: int) -> bytes:
    """Avro's long: zigzag, then base-128 varint (the Avro spec, hand-rolled here)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def error_of(payload: bytes, schema: SchemaInfo) -> str:
    out = ValueDecoder().decode(payload, schema)
    assert out.value is None, out.value
    assert out.error is not None
    return out.error


def test_avro_array_of_nulls_bomb_hits_the_item_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2**40 nulls in 7 bytes: fastavro would build every one of them; 7 bytes may make
    # ITEMS_FREE + 16 per byte = 1024 + 112 = 1136 items (was MAX_ITEMS whatever the size)
    calls = []
    monkeypatch.setattr("fastavro.schemaless_reader", lambda *a, **k: calls.append(a))
    schema = make_schema("AVRO", json.dumps({"type": "array", "items": "null"}).encode())
    error = error_of(zigzag(2**40) + b"\x00", schema)
    assert error.startswith("AVRO value over 1136 items (a block of 1099511627776;")
    assert "MAX_ITEMS" in error
    assert calls == []  # fastavro was never asked


def test_avro_empty_record_map_bomb_hits_max_items() -> None:
    empty = {"type": "record", "name": "E", "fields": []}
    schema = make_schema("AVRO", json.dumps({"type": "map", "values": empty}).encode())
    # one block of 900,000 entries, then another: each entry a 0-length key and nothing else
    payload = (zigzag(900_000) + b"\x00" * 900_000) * 2 + b"\x00"
    assert "MAX_ITEMS" in error_of(payload, schema)


def test_avro_recursive_union_bomb_hits_max_depth() -> None:
    node = {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}
    schema = make_schema("AVRO", json.dumps(node).encode())
    payload = zigzag(1) * 10_000 + zigzag(0)  # 10,000 nested nodes, then null
    assert "MAX_DEPTH" in error_of(payload, schema)
    ok = zigzag(1) * 5 + zigzag(0)
    assert json.loads(ValueDecoder().decode(ok, schema).value or "") is not None


@pytest.mark.parametrize("levels", [300, 2000])
def test_avro_schema_nesting_bomb(levels: int) -> None:
    deep = '{"type": "array", "items": ' * levels + '"int"' + "}" * levels
    error = error_of(b"\x00", make_schema("AVRO", deep.encode()))
    # 300: our bound; 2000: past orjson's own nesting limit, so not JSON to us either
    assert "MAX_SCHEMA_JSON_DEPTH" in error if levels == 300 else "not JSON" in error


def test_json_nesting_and_size_bounds() -> None:
    schema = make_schema("JSON")
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    assert "MAX_DEPTH" in error_of(deep, schema)
    big = json.dumps("x" * (MAX_VALUE_JSON_BYTES + 10)).encode()
    assert "MAX_VALUE_JSON_BYTES" in error_of(big, schema)


def test_protobuf_wire_nesting_bound() -> None:
    info = json.dumps([{"number": 1, "name": "m", "type": "MESSAGE", "label": "LABEL_OPTIONAL"}])
    schema = make_schema("PROTOBUF", b"{}", (("__PARSING_INFO__", info),))
    payload = b"\x08\x01"
    for _ in range(100):  # 100 nested length-delimited fields #1
        size = len(payload)
        varint = bytearray()
        while True:
            varint.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
            size >>= 7
            if not size:
                break
        payload = b"\x0a" + bytes(varint) + payload
    assert "MAX_DEPTH" in error_of(payload, schema)


def test_protobuf_native_recursion_is_an_error() -> None:
    _, definition = order_classes()
    schema = make_schema("PROTOBUF_NATIVE", definition)
    # field 3 (lines, a message) nested inside itself 200 times: not an Order.Line
    payload = b""
    for _ in range(200):
        payload = b"\x1a" + bytes([min(len(payload), 127)]) + payload[:127]
    out = ValueDecoder().decode(payload, schema)
    assert (out.value is None) != (out.error is None)  # either way, no exception
    assert not (out.error or "").startswith("internal error")


def every_schema() -> list[SchemaInfo]:
    _, pb_native = order_classes()
    info = json.dumps(
        [
            {"number": 1, "name": "id", "type": "INT64", "label": "LABEL_OPTIONAL"},
            {"number": 2, "name": "xs", "type": "DOUBLE", "label": "LABEL_REPEATED"},
            {"number": 3, "name": "m", "type": "MESSAGE", "label": "LABEL_OPTIONAL"},
        ]
    )
    node = {"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}
    kv = kv_properties("STRING", "AVRO", "INLINE")
    kv_sep = kv_properties("INT32", "JSON", "SEPARATED")
    out = [make_schema(name) for name in WIRE_TYPE_NAMES.values() if name != "KEY_VALUE"]
    out += [
        make_schema("AVRO", json.dumps(EVERY_AVRO_TYPE).encode()),
        make_schema("AVRO", json.dumps(node).encode()),
        make_schema(
            "AVRO",
            json.dumps({"type": "map", "values": {"type": "array", "items": "null"}}).encode(),
        ),
        make_schema("PROTOBUF_NATIVE", pb_native),
        make_schema("PROTOBUF", b"{}", (("__PARSING_INFO__", info),)),
        make_schema("PROTOBUF", b"{}"),
        make_schema(
            "KEY_VALUE", kv_halves(b"", json.dumps(EVERY_AVRO_TYPE).encode()), tuple(kv.items())
        ),
        make_schema("KEY_VALUE", kv_halves(b"", b""), tuple(kv_sep.items())),
        make_schema("STRING", properties=(("__charset", "no-such-charset"),)),
    ]
    return out


SCHEMAS = every_schema()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SCHEMAS), st.binary(max_size=200), st.text(max_size=20), st.booleans())
def test_random_bytes_with_every_schema_never_raise(
    schema: SchemaInfo, payload: bytes, partition_key: str, b64: bool
) -> None:
    from dissector.values import KeyFields

    key = KeyFields(partition_key=partition_key, partition_key_b64_encoded=b64)
    out = ValueDecoder().decode(payload, schema, key=key)
    assert (out.value is None) != (out.error is None)
    assert not (out.error or "").startswith("internal error"), out.error
    if out.value is not None:
        json.loads(out.value)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["AVRO", "PROTOBUF_NATIVE", "KEY_VALUE", "PROTOBUF", "JSON"]),
    st.binary(max_size=120) | st.sampled_from([b"{}", b"[]", b'"x"', b'{"type": "record"}']),
    st.binary(max_size=40),
)
def test_random_schema_definitions_never_raise(
    kind: str, definition: bytes, payload: bytes
) -> None:
    props = (
        tuple(kv_properties("AVRO", "PROTOBUF_NATIVE", "INLINE").items())
        if kind == "KEY_VALUE"
        else ()
    )
    if kind == "PROTOBUF_NATIVE" and definition[:1] == b"{":
        definition = json.dumps(
            {
                "fileDescriptorSet": base64.b64encode(definition).decode(),
                "rootMessageTypeName": "a.B",
                "rootFileDescriptorName": "a.proto",
            }
        ).encode()
    out = ValueDecoder().decode(payload, make_schema(kind, definition, props))
    assert not (out.error or "").startswith("internal error"), out.error


def test_payload_size_bound() -> None:
    big = b"x" * ((4 << 20) + 1)
    assert error_of(big, make_schema("BYTES")).startswith("payload over MAX_PAYLOAD_BYTES")


def test_schema_definition_size_bound() -> None:
    schema = make_schema("AVRO", b" " * ((1 << 20) + 1))
    assert schema.definition == b""
    assert error_of(struct.pack(">i", 1), schema).startswith(
        "AVRO schema over MAX_DEFINITION_BYTES"
    )


def test_avro_module_bound_is_named() -> None:
    assert avro_module.MAX_SCHEMA_JSON_DEPTH == 4 * MAX_DEPTH
