"""KEY_VALUE schemas and payloads: the key's and the value's schemas, and the two halves.

Input: a KEY_VALUE schema (as Pulsar's KeyValueSchemaInfo.encodeKeyValueSchemaInfo writes
it) and a payload with its message's partition key.
Output: `split_schema` -> `KeyValueSchema` (key schema, value schema, encoding);
`split_payload` -> the key's and the value's bytes (None for a null one).
Rule (pulsar-client-api KeyValue.encode / decode, pulsar-client KeyValueSchemaInfo):
- the schema data is [INT32 key schema length][key schema data][INT32 value schema
  length][value schema data], big-endian, a length of -1 meaning none; the properties name
  each half: `key.schema.type` / `value.schema.type` (SchemaType names, BYTES when absent),
  `key.schema.name`, `key.schema.properties` (a JSON object of strings), likewise for
  value, and `kv.encoding.type` INLINE (the default) or SEPARATED;
- INLINE payloads are [INT32 key length][key][INT32 value length][value], -1 for null;
- SEPARATED payloads are the value alone; the key is the message's partition key (base64
  when `partition_key_b64_encoded`), null when `null_partition_key` or absent.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson

from dissector.values.model import WIRE_TYPE_NAMES, BadValue, SchemaInfo, make_schema

INLINE = "INLINE"
SEPARATED = "SEPARATED"
_TYPE_NAMES = frozenset(WIRE_TYPE_NAMES.values())


@dataclass(frozen=True, slots=True)
class KeyValueSchema:
    key: SchemaInfo
    value: SchemaInfo
    encoding: str  # INLINE or SEPARATED


def _halves(data: bytes, what: str) -> tuple[bytes | None, bytes | None]:
    """[INT32 len][bytes][INT32 len][bytes], -1 for None: Pulsar's KeyValue.encode."""
    out: list[bytes | None] = []
    pos = 0
    for _ in range(2):
        if pos + 4 > len(data):
            raise BadValue(f"{what} too short for its 4-byte length at byte {pos}")
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        pos += 4
        if size == -1:
            out.append(None)
            continue
        if size < 0 or pos + size > len(data):
            raise BadValue(f"{what} length {size} at byte {pos - 4} runs past its end")
        out.append(data[pos : pos + size])
        pos += size
    if pos != len(data):
        raise BadValue(f"{what} has {len(data) - pos} bytes after its value")
    return out[0], out[1]


def _sub_schema(schema: SchemaInfo, side: str, data: bytes | None) -> SchemaInfo:
    type_name = schema.prop(f"{side}.schema.type") or "BYTES"
    type_name = "BYTES" if type_name == "NONE" else type_name  # SchemaType.NONE: no schema
    if type_name not in _TYPE_NAMES:
        raise BadValue(f"KEY_VALUE {side} schema type {type_name!r} is unknown")
    props_text = schema.prop(f"{side}.schema.properties")
    props: tuple[tuple[str, str], ...] = ()
    if props_text:
        try:
            loaded = orjson.loads(props_text)
        except orjson.JSONDecodeError:
            raise BadValue(f"KEY_VALUE {side}.schema.properties is not JSON") from None
        if isinstance(loaded, dict):
            props = tuple((str(k), str(v)) for k, v in loaded.items())
    return make_schema(type_name, data or b"", props, schema.prop(f"{side}.schema.name") or "")


def split_schema(schema: SchemaInfo) -> KeyValueSchema:
    """The key's and value's schemas and the encoding of a KEY_VALUE schema."""
    key_data, value_data = _halves(schema.definition, "KEY_VALUE schema data")
    encoding = schema.prop("kv.encoding.type") or INLINE
    if encoding not in (INLINE, SEPARATED):
        raise BadValue(f"KEY_VALUE encoding {encoding!r} is unknown")
    return KeyValueSchema(
        key=_sub_schema(schema, "key", key_data),
        value=_sub_schema(schema, "value", value_data),
        encoding=encoding,
    )


def split_payload(
    kv: KeyValueSchema,
    payload: bytes | None,
    *,
    partition_key: str | None,
    key_b64: bool,
    null_key: bool,
) -> tuple[bytes | None, bytes | None]:
    """The key's and the value's bytes of a message (None where null)."""
    if kv.encoding == INLINE:
        if payload is None:
            return None, None
        return _halves(payload, "KEY_VALUE payload")
    if null_key or partition_key is None:
        return None, payload
    if not key_b64:
        return partition_key.encode("utf-8"), payload
    try:
        return base64.b64decode(partition_key, validate=True), payload
    except (binascii.Error, ValueError):
        raise BadValue("KEY_VALUE partition key is not base64") from None
