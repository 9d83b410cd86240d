"""AVRO, JSON, PROTOBUF_NATIVE and PROTOBUF values: payloads made by fastavro's writer and
protobuf's own serializer; the expected values are the records those writers were given."""

from __future__ import annotations

import base64
import io
import json
from decimal import Decimal
from typing import Any

import fastavro
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from dissector.values import ValueDecoder, make_schema


def decoded(payload: bytes, schema: Any) -> tuple[Any, str | None]:
    out = ValueDecoder().decode(payload, schema)
    return (json.loads(out.value) if out.value is not None else None), out.error


EVERY_AVRO_TYPE = {
    "type": "record",
    "name": "All",
    "namespace": "t",
    "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "a", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "u", "type": ["null", "string", "t.Color"]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "dec",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
        },
        {"name": "next", "type": ["null", "t.All"], "default": None},
    ],
}
RECORD: dict[str, Any] = {
    "n": None,
    "b": True,
    "i": -7,
    "l": 2**40,
    "f": 0.5,
    "d": -1.25,
    "by": b"\x00\x01",
    "s": "é",
    "e": "GREEN",
    "fx": b"abcd",
    "a": [1, 2, 3],
    "m": {"x": "y"},
    "u": "RED",
    "ts": 1_600_000_000_123,
    "dec": Decimal("123.45"),
    "next": None,
}


def avro_bytes(schema: Any, record: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_avro_every_type_round_trips() -> None:
    nested = dict(RECORD, next=dict(RECORD, i=8))
    schema = make_schema("AVRO", json.dumps(EVERY_AVRO_TYPE).encode())
    value, error = decoded(avro_bytes(EVERY_AVRO_TYPE, nested), schema)
    assert error is None
    expected = {
        **RECORD,
        "by": base64.b64encode(b"\x00\x01").decode(),
        "fx": base64.b64encode(b"abcd").decode(),
        "ts": "2020-09-13T12:26:40.123000Z",
        "dec": "123.45",
    }
    expected["next"] = dict(expected, i=8, next=None)
    assert value == expected


def test_json_payload_is_checked_and_normalised() -> None:
    schema = make_schema("JSON", json.dumps(EVERY_AVRO_TYPE).encode())
    assert decoded(b'{ "a" : [1, 2.5, "x", null, true] }', schema) == (
        {"a": [1, 2.5, "x", None, True]},
        None,
    )
    assert ValueDecoder().decode(b'{ "a" : 1 }', schema).value == '{"a":1}'
    value, error = decoded(b'{"a": ', schema)
    assert value is None and error is not None and error.startswith("JSON payload is not JSON")


def order_classes() -> tuple[Any, bytes]:
    """An Order message importing google/protobuf/timestamp.proto, built in its own pool;
    returns the class and Pulsar's ProtobufNativeSchemaData JSON for it."""
    f = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    f.dependency.append("google/protobuf/timestamp.proto")
    enum = f.enum_type.add(name="State")
    enum.value.add(name="NEW", number=0)
    enum.value.add(name="PAID", number=1)
    order = f.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    T = descriptor_pb2.FieldDescriptorProto
    line.field.add(name="sku", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    order.field.add(name="id", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    order.field.add(name="customer", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    order.field.add(
        name="lines",
        number=3,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_REPEATED,
        type_name=".shop.Order.Line",
    )
    order.field.add(
        name="state", number=4, type=T.TYPE_ENUM, label=T.LABEL_OPTIONAL, type_name=".shop.State"
    )
    order.field.add(
        name="at",
        number=5,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_OPTIONAL,
        type_name=".google.protobuf.Timestamp",
    )
    ts = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(ts)
    pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    fds = descriptor_pb2.FileDescriptorSet(file=[f, ts])  # root first: the order must not matter
    data = json.dumps(
        {
            "fileDescriptorSet": base64.b64encode(fds.SerializeToString()).decode(),
            "rootMessageTypeName": "shop.Order",
            "rootFileDescriptorName": "shop/order.proto",
        }
    ).encode()
    return cls, data


def test_protobuf_native_round_trips() -> None:
    cls, definition = order_classes()
    msg = cls(id=12, customer="ann", state=1)
    msg.lines.add(sku="a", qty=2)
    msg.at.seconds = 1_600_000_000
    schema = make_schema("PROTOBUF_NATIVE", definition)
    value, error = decoded(msg.SerializeToString(), schema)
    assert error is None
    assert value == {
        "id": "12",  # protobuf's JSON mapping writes 64-bit integers as strings
        "customer": "ann",
        "lines": [{"sku": "a", "qty": 2}],
        "state": "PAID",
        "at": "2020-09-13T12:26:40Z",
    }


def test_protobuf_native_uses_a_private_pool() -> None:
    _, definition = order_classes()
    ValueDecoder().decode(b"", make_schema("PROTOBUF_NATIVE", definition))
    default = descriptor_pool.Default()
    try:
        default.FindMessageTypeByName("shop.Order")
    except KeyError:
        pass
    else:
        raise AssertionError("the capture's message type leaked into the default pool")


def test_protobuf_native_bad_schema_and_bad_payload_are_errors() -> None:
    _, definition = order_classes()
    schema = make_schema("PROTOBUF_NATIVE", definition)
    value, error = decoded(b"\x0a\xff", schema)
    assert (
        value is None
        and error is not None
        and error.startswith("PROTOBUF_NATIVE value does not decode")
    )
    doc = json.loads(definition)
    fds = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(doc["fileDescriptorSet"]))
    del fds.file[1]  # the timestamp import is gone
    doc["fileDescriptorSet"] = base64.b64encode(fds.SerializeToString()).decode()
    broken = make_schema("PROTOBUF_NATIVE", json.dumps(doc).encode())
    assert decoded(b"", broken)[1] == (
        "PROTOBUF_NATIVE descriptor set lacks the import 'google/protobuf/timestamp.proto'"
    )
    assert decoded(b"", make_schema("PROTOBUF_NATIVE", b"{}"))[1] == (
        "PROTOBUF_NATIVE schema lacks fileDescriptorSet or rootMessageTypeName"
    )


def test_protobuf_by_parsing_info() -> None:
    cls, _ = order_classes()
    msg = cls(id=-3, customer="bo", state=1)
    msg.lines.add(sku="z", qty=1)
    info = [  # as Pulsar's ProtobufSchema.getParsingInfo writes it (Jackson, field order)
        {"number": 1, "name": "id", "type": "INT64", "label": "LABEL_OPTIONAL", "definition": None},
        {
            "number": 2,
            "name": "customer",
            "type": "STRING",
            "label": "LABEL_OPTIONAL",
            "definition": None,
        },
        {
            "number": 3,
            "name": "lines",
            "type": "MESSAGE",
            "label": "LABEL_REPEATED",
            "definition": None,
        },
        {
            "number": 4,
            "name": "state",
            "type": "ENUM",
            "label": "LABEL_OPTIONAL",
            "definition": None,
        },
    ]
    schema = make_schema(
        "PROTOBUF",
        b'{"type":"record","name":"Order","fields":[]}',
        (("__PARSING_INFO__", json.dumps(info)),),
    )
    assert decoded(msg.SerializeToString(), schema) == (
        {"id": -3, "customer": "bo", "lines": [{"#1": "z", "#2": 1}], "state": 1},
        None,
    )


def test_json_integers_past_64_bits_keep_every_digit() -> None:
    # Jackson writes a BigInteger whole; orjson alone would read it as a float
    payload = b'{"big": 123456789012345678901234567890, "small": -9223372036854775808}'
    out = ValueDecoder().decode(payload, make_schema("JSON"))
    assert out.value == '{"big":123456789012345678901234567890,"small":-9223372036854775808}'
