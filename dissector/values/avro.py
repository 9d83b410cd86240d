"""AVRO values: Pulsar's Avro payload (plain Avro binary, no container header) -> a value.

Input: an AVRO schema's definition (the Avro schema as JSON) and payloads written with it.
Output: `parse_avro` -> `AvroSchema` (parsed once by fastavro; reused for every payload,
marked as parsed as fastavro marks it, so that its reader does not parse it again per
payload: 12 ms a payload for a record of 18,000 fields);
`decode_avro` -> the decoded value as Python objects; `BadValue` when it cannot be.
Rule: fastavro decodes, but only a payload that a bounded walk over the same schema found
whole, within MAX_DEPTH and within `item_budget` of its size (an array of nulls or of empty
records costs no bytes per item, a recursive schema can nest without end: fastavro would
build them all; a block's count is refused before any of its items is walked), whose
decimals fit their declared precision (and MAX_DECIMAL_DIGITS: fastavro would convert any
length to an int and a Decimal, quadratic in the digits), and with no byte left over (bytes
left over mean the payload was not written with this schema).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

from dissector.values.bounds import MAX_DECIMAL_DIGITS, MAX_DEPTH, item_budget
from dissector.values.model import BadValue

#: Nesting of the schema's own JSON: Avro schemas nest a few levels per record level; this
#: keeps fastavro's recursive schema parser far from Python's recursion limit.
MAX_SCHEMA_JSON_DEPTH = 4 * MAX_DEPTH

_FIXED_SIZES = {"null": 0, "boolean": 1, "float": 4, "double": 8}


@dataclass(frozen=True, slots=True)
class AvroSchema:
    parsed: Any  # fastavro's parsed schema
    named: dict[str, Any]  # full name -> parsed named type


def json_depth(obj: Any, limit: int) -> int:
    """Nesting depth of a loaded JSON document, walked without recursion, capped at limit."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def load_json_schema(definition: bytes, what: str) -> Any:
    """The schema JSON, within MAX_SCHEMA_JSON_DEPTH."""
    try:
        doc = orjson.loads(definition)
    except orjson.JSONDecodeError as e:
        raise BadValue(f"{what} schema is not JSON: {e}") from None
    if json_depth(doc, MAX_SCHEMA_JSON_DEPTH) > MAX_SCHEMA_JSON_DEPTH:
        raise BadValue(f"{what} schema nested deeper than MAX_SCHEMA_JSON_DEPTH")
    return doc


def parse_avro(definition: bytes) -> AvroSchema:
    """Parse an Avro schema definition once (fastavro), or say why it is not one."""
    from fastavro import parse_schema  # imported only when values are asked for

    doc = load_json_schema(definition, "AVRO")
    named: dict[str, Any] = {}
    try:
        parsed = parse_schema(doc, named_schemas=named, _write_hint=False)
    except Exception as e:  # fastavro raises many kinds on a bad schema: all are data here
        raise BadValue(f"AVRO schema does not parse: {type(e).__name__}: {e}") from None
    return AvroSchema(parsed=_hinted(parsed, named), named=named)


def _hinted(parsed: Any, named: dict[str, Any]) -> Any:
    """The parsed schema marked as parse_schema's hint marks a record (a copy of the top,
    or of a top union's items: `named` holds the originals, so no cycle keeps a schema
    evicted from the decoder's cache alive): schemaless_reader then takes it as parsed."""
    if isinstance(parsed, dict):
        return {**parsed, "__fastavro_parsed": True, "__named_schemas": named}
    if isinstance(parsed, list):
        return [_hinted(node, named) if isinstance(node, dict) else node for node in parsed]
    return parsed


def decode_avro(schema: AvroSchema, data: bytes) -> Any:
    """The value of an Avro binary payload, after the bounded walk accepted it."""
    from fastavro import schemaless_reader

    walk = _Walk(data, schema.named)
    walk.value(schema.parsed, 0)
    if walk.pos != len(data):
        raise BadValue(f"AVRO value ends at byte {walk.pos}, the payload has {len(data)}")
    try:
        return schemaless_reader(io.BytesIO(data), schema.parsed, None)
    except Exception as e:  # the walk accepted it; a logical type may still refuse
        raise BadValue(f"AVRO value does not decode: {type(e).__name__}: {e}") from None


class _Walk:
    """Skips one Avro value, checking it is whole and within the bounds."""

    def __init__(self, data: bytes, named: dict[str, Any]) -> None:
        self.data = data
        self.pos = 0
        self.budget = self.items = item_budget(len(data))
        self.named = named

    def take(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise BadValue(f"AVRO payload too short: needs {n} bytes at byte {self.pos}")
        self.pos += n

    def long(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise BadValue(f"AVRO payload too short: varint at byte {self.pos}")
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise BadValue(f"AVRO varint longer than 10 bytes at byte {self.pos}")

    def value(self, schema: Any, depth: int) -> None:
        self.items -= 1
        if self.items < 0:
            raise self.over(f"{self.budget + 1} items")
        if depth > MAX_DEPTH:
            raise BadValue(f"AVRO value nested deeper than MAX_DEPTH ({MAX_DEPTH})")
        if isinstance(schema, list):  # a union: the branch index, then its value
            index = self.long()
            if not 0 <= index < len(schema):
                raise BadValue(f"AVRO union index {index} out of range ({len(schema)})")
            self.value(schema[index], depth + 1)
            return
        if isinstance(schema, str):
            self.named_or_primitive(schema, depth)
            return
        kind = schema.get("type")
        if kind in ("record", "error"):
            for field in schema.get("fields", ()):
                self.value(field["type"], depth + 1)
        elif kind == "enum":
            index = self.long()
            if not 0 <= index < len(schema.get("symbols", ())):
                raise BadValue(f"AVRO enum index {index} out of range")
        elif kind == "fixed":
            self.take(int(schema.get("size", 0)))
            if schema.get("logicalType") == "decimal":
                self.decimal(schema, int(schema.get("size", 0)))
        elif kind == "array":
            self.blocks(lambda: self.value(schema["items"], depth + 1))
        elif kind == "map":
            self.blocks(lambda: self.entry(schema["values"], depth + 1))
        elif kind == "bytes" and schema.get("logicalType") == "decimal":
            size = self.long()
            self.take(size)
            self.decimal(schema, size)
        else:  # {"type": "long", "logicalType": ...} and the like
            self.value(kind, depth)

    def decimal(self, schema: Any, size: int) -> None:
        """The decimal just taken (its last `size` bytes): refused when its unscaled value,
        sign padding apart, has more bytes than its precision (or MAX_DECIMAL_DIGITS) needs."""
        precision = schema.get("precision")
        digits = MAX_DECIMAL_DIGITS
        if isinstance(precision, int) and 0 < precision < MAX_DECIMAL_DIGITS:
            digits = precision
        used = significant_bytes(self.data[self.pos - size : self.pos])
        if used > decimal_bytes(digits):
            bound = "" if digits == precision else f", MAX_DECIMAL_DIGITS {MAX_DECIMAL_DIGITS}"
            raise BadValue(
                f"AVRO decimal of {used} bytes cannot fit precision {precision}{bound} "
                f"(at most {decimal_bytes(digits)} bytes) at byte {self.pos - size}"
            )

    def over(self, what: str) -> BadValue:
        return BadValue(
            f"AVRO value over {self.budget} items ({what}; ITEMS_PER_BYTE per byte of its "
            f"{len(self.data)} bytes + ITEMS_FREE, at most MAX_ITEMS)"
        )

    def entry(self, values: Any, depth: int) -> None:
        self.take(self.long())  # the key, a string
        self.value(values, depth)

    def named_or_primitive(self, name: str, depth: int) -> None:
        if name in _FIXED_SIZES:
            self.take(_FIXED_SIZES[name])
        elif name in ("int", "long"):
            self.long()
        elif name in ("bytes", "string"):
            self.take(self.long())
        elif name in self.named:
            self.value(self.named[name], depth + 1)
        else:
            raise BadValue(f"AVRO schema names an unknown type {name!r}")

    def blocks(self, item: Any) -> None:
        while True:
            count = self.long()
            if count == 0:
                return
            if count < 0:
                count = -count
                self.long()  # the block's size in bytes: the items are walked anyway
            if count > self.items:
                raise self.over(f"a block of {count}")
            for _ in range(count):
                item()


def significant_bytes(data: bytes) -> int:
    """Bytes of a big-endian two's complement integer without its redundant sign padding
    (leading 00 before a byte under 80, FF before one from 80), at least 1."""
    if not data:
        return 0
    lead = data[0]
    if lead not in (0x00, 0xFF):
        return len(data)
    pad = len(data) - len(data.lstrip(bytes((lead,))))
    if pad == len(data):
        return 1
    if (data[pad] ^ lead) & 0x80:  # the next byte's top bit is not the sign: keep one pad
        pad -= 1
    return len(data) - pad


@cache
def decimal_bytes(digits: int) -> int:
    """Bytes of the two's complement of the largest unscaled value of `digits` digits."""
    bits: int = (10**digits - 1).bit_length()
    return (bits + 1 + 7) // 8
