"""The official client's own schemas (pulsar-client: its AvroSchema, JsonSchema, StringSchema,
BytesSchema and ProtobufNativeSchema encoders, no broker): our values equal the records it was
given; its C++ core's SchemaType numbers are the wire numbers our names come from."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

import _pulsar
import pulsar.schema as ps

from dissector.values import ValueDecoder, make_schema
from dissector.values.model import WIRE_TYPE_NAMES
from tests.values.test_structs import order_classes


class Color(Enum):
    RED = 0
    GREEN = 1


class Line(ps.Record):  # type: ignore[misc]
    sku = ps.String()
    qty = ps.Integer()


class Order(ps.Record):  # type: ignore[misc]
    id = ps.Long()
    paid = ps.Boolean()
    total = ps.Double()
    ratio = ps.Float()
    note = ps.String()
    raw = ps.Bytes()
    tags = ps.Array(ps.String())
    attrs = ps.Map(ps.String())
    line = Line()
    color = Color


ORDER = Order(
    id=2**40,
    paid=True,
    total=12.5,
    ratio=0.25,
    note="é",
    raw=b"\x00\x01",
    tags=["a", "b"],
    attrs={"k": "v"},
    line=Line(sku="s", qty=3),
    color=Color.GREEN,
)
EXPECTED = {
    "id": 2**40,
    "paid": True,
    "total": 12.5,
    "ratio": 0.25,
    "note": "é",
    "tags": ["a", "b"],
    "attrs": {"k": "v"},
    "line": {"sku": "s", "qty": 3},
    "color": "GREEN",
}


def value_with(schema: Any, payload: bytes) -> Any:
    info = schema.schema_info()
    ours = make_schema(info.schema_type().name, info.schema().encode())
    out = ValueDecoder().decode(payload, ours)
    assert out.error is None, out.error
    return json.loads(out.value or "")


def test_avro_as_the_client_writes_it() -> None:
    schema = ps.AvroSchema(Order)
    value = value_with(schema, schema.encode(ORDER))
    assert value == {**EXPECTED, "raw": "AAE="}  # base64 of 00 01


def test_json_as_the_client_writes_it() -> None:
    schema = ps.JsonSchema(Order)
    value = value_with(schema, schema.encode(ORDER))
    # this client's JSON writes an enum as its number
    assert {k: value[k] for k in EXPECTED} == {**EXPECTED, "color": 1}


def test_string_and_bytes_as_the_client_writes_them() -> None:
    assert value_with(ps.StringSchema(), ps.StringSchema().encode("hé €")) == "hé €"
    info = ps.BytesSchema().schema_info()
    assert info.schema_type().name == "BYTES"
    out = ValueDecoder().decode(ps.BytesSchema().encode(b"\xff"), make_schema("BYTES"))
    assert out.value == '"/w=="'


def test_protobuf_native_as_the_client_describes_it() -> None:
    cls, _ = order_classes()
    schema = ps.ProtobufNativeSchema(cls)
    msg = cls(id=7, customer="c")
    msg.lines.add(sku="x", qty=1)
    assert value_with(schema, schema.encode(msg)) == {
        "id": "7",
        "customer": "c",
        "lines": [{"sku": "x", "qty": 1}],
        "state": "NEW",
    }


def test_wire_type_numbers_match_the_clients() -> None:
    numbers = {
        n: int(getattr(_pulsar.SchemaType, n)) for n in dir(_pulsar.SchemaType) if n.isupper()
    }
    for name, number in numbers.items():
        if number > 0:  # NONE is 0 (our BYTES); BYTES and AUTO_* are client-side negatives
            assert WIRE_TYPE_NAMES[number] == name
