"""PROTOBUF values (Pulsar's older protobuf schema): protobuf binary, read by field number.

Input: a PROTOBUF schema (its definition is an Avro schema made from the message class by
avro-protobuf; its property `__PARSING_INFO__` lists the top-level fields as JSON objects
with `number`, `name`, `type` (protobuf's type names, e.g. INT64, STRING, MESSAGE) and
`label`) and a payload written by the class's own protobuf serializer.
Output: `parse_parsing_info` -> field number -> (name, type, repeated); `decode_protobuf_wire`
-> a dict: named top-level fields decoded by their type; fields the info does not name,
and the inside of nested messages, by field number ("#3") with varints and fixed-width
numbers as unsigned integers and length-delimited fields as a nested message when they
parse as one whole, else as UTF-8 text, else base64. `BadValue` when the bytes are not
protobuf. What cannot be done: the Avro definition has no field numbers, so nested messages
and a schema without `__PARSING_INFO__` keep numbers instead of names.
Rule: one pass over the bytes, every nesting within MAX_DEPTH and MAX_ITEMS.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import orjson

from dissector.values.bounds import MAX_DEPTH, MAX_ITEMS
from dissector.values.model import BadValue, SchemaInfo
from dissector.values.primitives import shortest_float32

PARSING_INFO = "__PARSING_INFO__"

_SIGNED_VARINT = {"INT32", "INT64", "ENUM"}
_UNSIGNED_VARINT = {"UINT32", "UINT64"}
_ZIGZAG = {"SINT32", "SINT64"}
_FIXED = {"FIXED32": "<I", "FIXED64": "<Q", "SFIXED32": "<i", "SFIXED64": "<q"}
_FLOATS = {"FLOAT": "<f", "DOUBLE": "<d"}
_WIDTH = {1: 8, 5: 4}  # wire type -> bytes of a fixed-width value

Field = tuple[str, str, bool]  # name, protobuf type name, repeated


def parse_parsing_info(schema: SchemaInfo) -> dict[int, Field]:
    """Top-level field number -> (name, type, repeated), from `__PARSING_INFO__` if any."""
    text = schema.prop(PARSING_INFO)
    if not text:
        return {}
    try:
        infos = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadValue(f"PROTOBUF {PARSING_INFO} is not JSON") from None
    out: dict[int, Field] = {}
    for info in infos if isinstance(infos, list) else ():
        if isinstance(info, dict) and isinstance(info.get("number"), int):
            repeated = info.get("label") == "LABEL_REPEATED"
            out[info["number"]] = (str(info.get("name")), str(info.get("type")), repeated)
    return out


def decode_protobuf_wire(fields: dict[int, Field], data: bytes) -> dict[str, Any]:
    reader = _Reader()
    out: dict[str, Any] = {}
    for number, wire_type, raw in reader.fields(data, 0):
        known = fields.get(number)
        if known is None:
            _put(out, f"#{number}", reader.generic(wire_type, raw, 1), repeated=True)
            continue
        name, type_name, repeated = known
        for value in reader.typed(type_name, wire_type, raw):
            _put(out, name, value, repeated=repeated)
    return {k: _single(v) if k.startswith("#") else v for k, v in out.items()}


def _single(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else values


def _put(out: dict[str, Any], key: str, value: Any, *, repeated: bool) -> None:
    if not repeated:
        out[key] = value  # the last occurrence wins, as protobuf parsers do
    elif key in out:
        existing = out[key]
        if isinstance(existing, list) and not isinstance(value, list):
            existing.append(value)
        else:
            out[key] = [existing, value]
    else:
        out[key] = [value] if not isinstance(value, list) else value


class _Reader:
    def __init__(self) -> None:
        self.items = MAX_ITEMS

    def count(self) -> None:
        self.items -= 1
        if self.items < 0:
            raise BadValue(f"PROTOBUF value over MAX_ITEMS ({MAX_ITEMS} items)")

    def fields(self, data: bytes, depth: int) -> list[tuple[int, int, Any]]:
        if depth > MAX_DEPTH:
            raise BadValue(f"PROTOBUF value nested deeper than MAX_DEPTH ({MAX_DEPTH})")
        out = []
        pos = 0
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if number == 0:
                raise BadValue("PROTOBUF field number 0")
            raw: Any
            if wire_type == 0:
                raw, pos = _varint(data, pos)
            elif wire_type in _WIDTH:
                end = pos + _WIDTH[wire_type]
                if end > len(data):
                    raise BadValue("PROTOBUF payload too short for a fixed-width field")
                raw, pos = data[pos:end], end
            elif wire_type == 2:
                size, pos = _varint(data, pos)
                if pos + size > len(data):
                    raise BadValue("PROTOBUF length-delimited field runs past the payload")
                raw, pos = data[pos : pos + size], pos + size
            else:
                raise BadValue(f"PROTOBUF wire type {wire_type} is not supported")
            self.count()
            out.append((number, wire_type, raw))
        return out

    def generic(self, wire_type: int, raw: Any, depth: int) -> Any:
        if wire_type == 0:
            return raw
        if wire_type in _WIDTH:
            return int.from_bytes(raw, "little")
        try:
            nested = self.fields(raw, depth) if raw else None
        except BadValue as e:
            if "MAX_" in str(e):
                raise
            nested = None
        if nested:
            out: dict[str, Any] = {}
            for number, wt, inner in nested:
                _put(out, f"#{number}", self.generic(wt, inner, depth + 1), repeated=True)
            return {k: _single(v) for k, v in out.items()}
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(raw).decode("ascii")

    def typed(self, type_name: str, wire_type: int, raw: Any) -> list[Any]:
        if wire_type == 2 and type_name not in ("STRING", "BYTES", "MESSAGE", "GROUP"):
            return self.packed(type_name, raw)  # a packed repeated scalar
        if type_name == "STRING" and wire_type == 2:
            try:
                return [raw.decode("utf-8")]
            except UnicodeDecodeError:
                raise BadValue("PROTOBUF string field is not UTF-8") from None
        if type_name == "BYTES" and wire_type == 2:
            return [base64.b64encode(raw).decode("ascii")]
        return [self.scalar(type_name, wire_type, raw)]

    def scalar(self, type_name: str, wire_type: int, raw: Any) -> Any:
        if wire_type == 0:
            if type_name == "BOOL":
                return raw != 0
            if type_name in _ZIGZAG:
                return (raw >> 1) ^ -(raw & 1)
            if type_name in _SIGNED_VARINT:
                return raw - (1 << 64) if raw >= 1 << 63 else raw
            return raw
        if wire_type in _WIDTH and type_name in _FIXED | _FLOATS:
            fmt = (_FIXED | _FLOATS)[type_name]
            if struct.calcsize(fmt) == len(raw):
                return _number(type_name, struct.unpack(fmt, raw)[0])
        return self.generic(wire_type, raw, 1)

    def packed(self, type_name: str, raw: bytes) -> list[Any]:
        out: list[Any] = []
        pos = 0
        fmt = (_FIXED | _FLOATS).get(type_name)
        while pos < len(raw):
            self.count()
            if fmt is not None:
                width = struct.calcsize(fmt)
                if pos + width > len(raw):
                    raise BadValue("PROTOBUF packed field runs past its length")
                out.append(_number(type_name, struct.unpack(fmt, raw[pos : pos + width])[0]))
                pos += width
            else:
                value, pos = _varint(raw, pos)
                out.append(self.scalar(type_name, 0, value))
        return out


def _number(type_name: str, value: Any) -> Any:
    return shortest_float32(value) if type_name == "FLOAT" else value


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise BadValue("PROTOBUF payload too short for a varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & ((1 << 64) - 1), pos
        shift += 7
        if shift > 63:
            raise BadValue("PROTOBUF varint longer than 10 bytes")
