"""A schema as schema.incompatible shows it: its type, name and fields, and how two differ.

Input: a wire `Schema` (protobuf: type, name, schema_data, properties) from a PRODUCER,
SUBSCRIBE, GET_OR_CREATE_SCHEMA or GET_SCHEMA_RESPONSE; a schema version's bytes.
Output: `Shape` (`shape`): the type by Pulsar's SchemaType name (STRING, AVRO, KEY_VALUE...;
the wire's None is BYTES), the name, and for AVRO, JSON and PROTOBUF (their definition is an
Avro record in JSON) the top-level fields as (name, type) pairs; `describe` (one line),
`differences` (what differs, in words), `version_label` and `version_order`.
Rules: a schema definition is metadata (never a message payload) and may be shown. Parsing is
bounded: a definition over MAX_DEFINITION_BYTES, one that is not JSON or not a record has no
fields (None); at most MAX_FIELDS fields are kept, type names nested MAX_DEPTH deep and cut
at MAX_TYPE_CHARS; a line names at most MAX_SHOWN fields and MAX_DIFFERENCES differences.
Any bytes give a Shape, never an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from dissector.pulsar.wire import enum_name

#: Definitions parsed for their fields: Pulsar's own are kilobytes; a frame is at most 5 MiB.
MAX_DEFINITION_BYTES = 1 << 20
#: Fields kept per schema (a record of hundreds of fields is rare; the line names fewer).
MAX_FIELDS = 256
#: Nesting of a field's type spelled out (deeper: "...").
MAX_DEPTH = 3
#: Characters of one field type kept.
MAX_TYPE_CHARS = 60
#: Fields a line names, and differences it lists; the rest are counted.
MAX_SHOWN = 12
MAX_DIFFERENCES = 8
#: Types whose definition is an Avro record in JSON (the Java client's JSON and PROTOBUF
#: schemas are written as Avro schemas too).
WITH_FIELDS = frozenset({"AVRO", "JSON", "PROTOBUF"})
_SPECIAL = {"None": "BYTES", "Bool": "BOOLEAN"}
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True, slots=True)
class Shape:
    """What a line says of one schema (see the module docstring)."""

    type: str
    name: str
    #: (field name, its type) in definition order; None: no field list (not a record type,
    #: a definition that does not parse, or none)
    fields: tuple[tuple[str, str], ...] | None


def type_name(schema: Any) -> str:
    """Pulsar's SchemaType name of a wire Schema's type ("Int64" -> "INT64")."""
    wire = enum_name(schema, "type")
    return _SPECIAL.get(wire) or _WORD.sub("_", wire).upper()


def shape(schema: Any) -> Shape:
    """The Shape of a wire Schema (None: a producer of plain bytes, which declares none)."""
    if schema is None:
        return Shape("BYTES", "", None)
    kind = type_name(schema)
    fields = None
    data = bytes(schema.schema_data)
    if kind in WITH_FIELDS and 0 < len(data) <= MAX_DEFINITION_BYTES:
        fields = _fields(data)
    return Shape(kind, schema.name, fields)


def _fields(data: bytes) -> tuple[tuple[str, str], ...] | None:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("fields"), list):
        return None
    out: list[tuple[str, str]] = []
    for item in doc["fields"][:MAX_FIELDS]:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            out.append((item["name"], _type(item.get("type"), 0)[:MAX_TYPE_CHARS]))
    return tuple(out)


def _type(t: Any, depth: int) -> str:
    """An Avro type in a few characters: "int", "null|string", "array<long>", "Address"."""
    if depth > MAX_DEPTH:
        return "..."
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        return "|".join(_type(u, depth + 1) for u in t[:8])
    if not isinstance(t, dict):
        return "?"
    kind = t.get("type")
    logical = t.get("logicalType")
    if kind in ("record", "enum", "fixed") and isinstance(t.get("name"), str):
        return f"{kind} {t['name']}" if kind != "record" else t["name"]
    if kind == "array":
        return f"array<{_type(t.get('items'), depth + 1)}>"
    if kind == "map":
        return f"map<{_type(t.get('values'), depth + 1)}>"
    base = _type(kind, depth + 1)
    return f"{base}({logical})" if isinstance(logical, str) else base


def describe(s: Shape, *, fields: bool) -> str:
    """One schema in words: `AVRO "User" {id:int, name:string}` (fields: with its fields)."""
    text = s.type + (f' "{s.name}"' if s.name else "")
    if fields and s.fields is not None:
        shown = [f"{n}:{t}" for n, t in s.fields[:MAX_SHOWN]]
        more = len(s.fields) - MAX_SHOWN
        text += " {" + ", ".join(shown) + (f", and {more} more" if more > 0 else "") + "}"
    return text


def differences(offered: Shape, topic: Shape) -> list[str]:
    """What differs between the schema offered and the topic's, in words ([]: nothing seen)."""
    found: list[str] = []
    if offered.type != topic.type:
        found.append(f"type {offered.type} vs {topic.type}")
    if offered.name and topic.name and offered.name != topic.name:
        found.append(f"name {offered.name} vs {topic.name}")
    if offered.fields is not None and topic.fields is not None:
        # a name given twice (an invalid schema, yet bytes on the wire) counts once: its first
        theirs = _first(topic.fields)
        mine = _first(offered.fields)
        for name, kind in mine.items():
            if name not in theirs:
                found.append(f"field {name} added")
            elif theirs[name] != kind:
                found.append(f"field {name} {kind} vs {theirs[name]}")
        found.extend(f"field {name} removed" for name in theirs if name not in mine)
    if len(found) > MAX_DIFFERENCES:
        more = len(found) - MAX_DIFFERENCES
        found = [*found[:MAX_DIFFERENCES], f"and {more} more"]
    return found


def _first(fields: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Each field name's kind, as its first occurrence says (names in their order)."""
    out: dict[str, str] = {}
    for name, kind in fields:
        out.setdefault(name, kind)
    return out


def version_label(version: bytes | None) -> str:
    """A schema version as people read it: an 8-byte big-endian long, else hex."""
    if version is None:
        return "?"
    if len(version) == 8:
        return str(int.from_bytes(version, "big", signed=True))
    return version[:16].hex()


def version_order(version: bytes | None) -> tuple[int, int, bytes]:
    """A key ordering versions (none first, then by size, then by value: numeric for longs)."""
    if version is None:
        return (0, 0, b"")
    return (1, len(version), version)
