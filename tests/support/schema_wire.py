"""Schema-bearing commands built as the Java client and the broker fill them (the wire's
Schema message, PRODUCER / SUBSCRIBE / GET_SCHEMA / GET_OR_CREATE_SCHEMA and their answers),
and KeyValue schema data as Pulsar's KeyValueSchemaInfo encodes it."""

from __future__ import annotations

import json
import struct
from typing import Any

from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES, BaseCommand
from dissector.values.model import WIRE_TYPE_NAMES

WIRE_NUMBERS = {name: number for number, name in WIRE_TYPE_NAMES.items()}


def version(n: int) -> bytes:
    """A schema version as Pulsar writes it: an 8-byte big-endian long."""
    return struct.pack(">q", n)


def fill_schema(target: Any, type_name: str, data: bytes = b"", **props: str) -> None:
    target.name = "test"
    target.type = WIRE_NUMBERS[type_name]
    target.schema_data = data
    for k, v in props.items():
        p = target.properties.add()
        p.key, p.value = k, v


def command(
    name: str, schema: tuple[str, bytes, dict[str, str]] | None = None, **fields: Any
) -> Any:
    """A BaseCommand of type `name`, its sub-message's fields set (and its schema if given)."""
    cmd = BaseCommand()
    cmd.type = COMMAND_TYPES[name]  # type: ignore[assignment]
    body = getattr(cmd, BODY_FIELDS[cmd.type])
    for k, v in fields.items():
        setattr(body, k, v)
    if schema is not None:
        type_name, data, props = schema
        fill_schema(body.schema, type_name, data, **props)
    return cmd


def kv_halves(key: bytes | None, value: bytes | None) -> bytes:
    """[INT32 len][key][INT32 len][value], -1 for null: pulsar KeyValue.encode."""
    out = b""
    for half in (key, value):
        out += struct.pack(">i", -1) if half is None else struct.pack(">i", len(half)) + half
    return out


def kv_properties(
    key_type: str, value_type: str, encoding: str, value_props: dict[str, str] | None = None
) -> dict[str, str]:
    """The properties KeyValueSchemaInfo.encodeKeyValueSchemaInfo writes."""
    return {
        "key.schema.name": "k",
        "key.schema.type": key_type,
        "key.schema.properties": "{}",
        "value.schema.name": "v",
        "value.schema.type": value_type,
        "value.schema.properties": json.dumps(value_props or {}),
        "kv.encoding.type": encoding,
    }
