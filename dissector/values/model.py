"""What a schema is, as the values stage sees it: one frozen record per schema seen.

Input: a `Schema` protobuf message of the wire (PRODUCER, SUBSCRIBE, GET_SCHEMA_RESPONSE,
GET_OR_CREATE_SCHEMA), or the parts of a KeyValue schema.
Output: `SchemaInfo` (type by Pulsar's own name, name, definition bytes, properties) and
`DecodedValue` (the JSON text of a value, or the reason it has none).
Rule: type names are Pulsar's `SchemaType` names (STRING, AVRO, KEY_VALUE, ...), because a
KeyValue schema names its key and value types that way in its properties; the wire's
`None` (0) is BYTES, as the Java client sends no other number for it. A definition over
MAX_DEFINITION_BYTES is kept as its size only, and says so when used; so does a schema the
tracker forgot (`forgotten`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dissector.pulsar.field_values import short_hex

#: A schema definition bigger than this is not kept (its size is): Pulsar's own schemas are
#: kilobytes (an Avro record of hundreds of fields is ~50 KiB); a frame is at most 5 MiB.
MAX_DEFINITION_BYTES = 1 << 20

#: Wire enum Schema.Type number -> Pulsar's SchemaType name (the client API's spelling).
WIRE_TYPE_NAMES: dict[int, str] = {
    0: "BYTES",
    1: "STRING",
    2: "JSON",
    3: "PROTOBUF",
    4: "AVRO",
    5: "BOOLEAN",
    6: "INT8",
    7: "INT16",
    8: "INT32",
    9: "INT64",
    10: "FLOAT",
    11: "DOUBLE",
    12: "DATE",
    13: "TIME",
    14: "TIMESTAMP",
    15: "KEY_VALUE",
    16: "INSTANT",
    17: "LOCAL_DATE",
    18: "LOCAL_TIME",
    19: "LOCAL_DATE_TIME",
    20: "PROTOBUF_NATIVE",
    21: "AUTO_CONSUME",
    22: "EXTERNAL",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaInfo:
    """One schema as carried on the wire (or inside a KeyValue schema)."""

    type: str  # Pulsar SchemaType name, e.g. "AVRO"; "UNKNOWN_<n>" for a number we lack
    name: str = ""
    definition: bytes = b""  # empty when over MAX_DEFINITION_BYTES (see definition_size)
    definition_size: int = 0
    properties: tuple[tuple[str, str], ...] = ()
    #: the tracker let it go at MAX_HELD_SCHEMA_BYTES (held.py): type and size only remain
    forgotten: bool = False

    @property
    def too_large(self) -> bool:
        return self.definition_size > MAX_DEFINITION_BYTES

    def prop(self, key: str) -> str | None:
        for k, v in self.properties:
            if k == key:
                return v
        return None


def make_schema(
    type_name: str,
    definition: bytes = b"",
    properties: tuple[tuple[str, str], ...] = (),
    name: str = "",
) -> SchemaInfo:
    """A SchemaInfo, its definition dropped (its size kept) when over MAX_DEFINITION_BYTES."""
    return SchemaInfo(
        type=type_name,
        name=name,
        definition=definition if len(definition) <= MAX_DEFINITION_BYTES else b"",
        definition_size=len(definition),
        properties=properties,
    )


def schema_info(msg: Any) -> SchemaInfo:
    """A SchemaInfo from a wire `Schema` message (type number, name, data, properties)."""
    return make_schema(
        WIRE_TYPE_NAMES.get(msg.type) or f"UNKNOWN_{msg.type}",
        bytes(msg.schema_data),
        tuple((kv.key, kv.value) for kv in msg.properties),
        msg.name,
    )


def version_label(version: bytes | None) -> str:
    """A schema version as people read it: Pulsar's versions are 8-byte big-endian longs;
    any other size as the text view shows bytes (short_hex: a label stays short)."""
    if version is None:
        return "?"
    if len(version) == 8:
        return str(int.from_bytes(version, "big", signed=True))
    return short_hex(version)


class BadValue(Exception):
    """The payload (or schema) cannot give a value; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodedValue:
    """The outcome of decoding one payload: JSON text, or an error saying why not."""

    value: str | None = None  # JSON text
    error: str | None = None
