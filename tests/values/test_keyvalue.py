"""KEY_VALUE: schema data and payloads laid out as Pulsar's KeyValue.encode and
KeyValueSchemaInfo write them (hand-built here), both encodings, null keys and values."""

from __future__ import annotations

import base64
import io
import json
import struct

import fastavro

from dissector.values import KeyFields, ValueDecoder, make_schema
from dissector.values.decode import NO_KEY
from tests.support.schema_wire import kv_halves, kv_properties

AVRO = {"type": "record", "name": "V", "fields": [{"name": "n", "type": "int"}]}


def kv_schema(key_type: str, key_def: bytes, value_type: str, value_def: bytes, enc: str):
    props = tuple(kv_properties(key_type, value_type, enc).items())
    return make_schema("KEY_VALUE", kv_halves(key_def, value_def), props)


def decoded(payload: bytes | None, schema, key: KeyFields = NO_KEY):
    out = ValueDecoder().decode(payload, schema, key=key)
    return (json.loads(out.value) if out.value is not None else None), out.error


def avro(n: int) -> bytes:
    b = io.BytesIO()
    fastavro.schemaless_writer(b, fastavro.parse_schema(AVRO), {"n": n})
    return b.getvalue()


def test_inline_key_and_value() -> None:
    schema = kv_schema("STRING", b"", "INT32", b"", "INLINE")
    payload = kv_halves(b"order-1", struct.pack(">i", 42))
    assert decoded(payload, schema) == ({"key": "order-1", "value": 42}, None)


def test_inline_null_key_and_null_value() -> None:
    schema = kv_schema("STRING", b"", "INT32", b"", "INLINE")
    assert decoded(kv_halves(None, struct.pack(">i", 1)), schema) == (
        {"key": None, "value": 1},
        None,
    )
    assert decoded(kv_halves(b"k", None), schema) == ({"key": "k", "value": None}, None)


def test_inline_with_an_avro_value_schema_inside_the_kv_schema_data() -> None:
    schema = kv_schema("STRING", b"", "AVRO", json.dumps(AVRO).encode(), "INLINE")
    assert decoded(kv_halves(b"k", avro(7)), schema) == ({"key": "k", "value": {"n": 7}}, None)


def test_missing_encoding_property_means_inline() -> None:
    props = tuple(
        (k, v)
        for k, v in kv_properties("STRING", "STRING", "INLINE").items()
        if k != "kv.encoding.type"
    )
    schema = make_schema("KEY_VALUE", kv_halves(b"", b""), props)
    assert decoded(kv_halves(b"a", b"b"), schema) == ({"key": "a", "value": "b"}, None)


def test_separated_key_is_the_partition_key() -> None:
    schema = kv_schema("STRING", b"", "AVRO", json.dumps(AVRO).encode(), "SEPARATED")
    key = KeyFields(partition_key="order-9")
    assert decoded(avro(3), schema, key) == ({"key": "order-9", "value": {"n": 3}}, None)


def test_separated_key_base64_when_flagged() -> None:
    schema = kv_schema("INT64", b"", "STRING", b"", "SEPARATED")
    b64 = base64.b64encode(struct.pack(">q", -5)).decode()
    key = KeyFields(partition_key=b64, partition_key_b64_encoded=True)
    assert decoded(b"v", schema, key) == ({"key": -5, "value": "v"}, None)


def test_separated_null_key() -> None:
    schema = kv_schema("STRING", b"", "STRING", b"", "SEPARATED")
    key = KeyFields(partition_key="", null_partition_key=True)
    assert decoded(b"v", schema, key) == ({"key": None, "value": "v"}, None)
    assert decoded(b"v", schema) == ({"key": None, "value": "v"}, None)


def test_bad_kv_bytes_are_errors() -> None:
    schema = kv_schema("STRING", b"", "STRING", b"", "INLINE")
    assert (
        decoded(b"\x00\x00", schema)[1]
        == "KEY_VALUE payload too short for its 4-byte length at byte 0"
    )
    assert decoded(struct.pack(">i", 100) + b"x", schema)[1] == (
        "KEY_VALUE payload length 100 at byte 0 runs past its end"
    )
    assert (
        decoded(kv_halves(b"a", b"b") + b"!", schema)[1]
        == "KEY_VALUE payload has 1 bytes after its value"
    )
    bad = make_schema("KEY_VALUE", b"\x00", ())
    assert decoded(b"", bad)[1].startswith("KEY_VALUE schema data too short")
    odd = make_schema("KEY_VALUE", kv_halves(b"", b""), (("key.schema.type", "NOPE"),))
    assert decoded(kv_halves(b"a", b"b"), odd)[1] == "KEY_VALUE key schema type 'NOPE' is unknown"
