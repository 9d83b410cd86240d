"""Payload + schema -> the value as JSON text, or the reason there is none. Never raises.

Input: a message's payload (None for a null value), the schema `SchemaTracker.resolve`
chose, and the message's key fields (a SEPARATED KeyValue's key is its partition key).
Output: `DecodedValue(value=JSON text)` or `DecodedValue(error=why)`, for the `value` and
`value_error` columns.
Rule: one decoder per schema family (primitives.py, avro.py, protobuf_native.py,
protobuf_wire.py, keyvalue.py); each schema is parsed once and kept (at most
MAX_PARSED_SCHEMAS and MAX_PARSED_BYTES estimated, least recently used first out; a schema
that does not parse is kept as its error); the definition bytes parsed (again, after an
eviction) stay within PARSE_BYTES_PER_INPUT_BYTE x the bytes read + PARSE_BYTES_FREE, past
which a value needing a parse is an error naming the bound;
JSON is checked and normalised; every value within the bounds of bounds.py; whatever the
bytes, an error string, never an exception (an unexpected one says "internal error"). With
fields to redact, a BYTES value (or KeyValue half) is masked whole: no field of raw bytes
can be found to mask, and they may be JSON text holding the very fields named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from dissector.pulsar.field_values import redacted
from dissector.values import keyvalue
from dissector.values.avro import decode_avro, parse_avro
from dissector.values.bounds import MAX_PAYLOAD_BYTES, dump_json, load_json, to_json
from dissector.values.held import MAX_HELD_SCHEMA_BYTES
from dissector.values.model import MAX_DEFINITION_BYTES, BadValue, DecodedValue, SchemaInfo
from dissector.values.primitives import PRIMITIVES, decode_string
from dissector.values.protobuf_native import decode_protobuf_native, parse_protobuf_native
from dissector.values.protobuf_wire import decode_protobuf_wire, parse_parsing_info
from dissector.values.redact import Path, redact

#: Parsed schemas kept: one per distinct schema of the capture; beyond, the least recently
#: used is parsed again when needed (a capture with thousands of distinct schemas is
#: pathological).
MAX_PARSED_SCHEMAS = 1024
#: Memory of the parsed schemas kept, estimated as PARSED_BYTES_PER_DEFINITION_BYTE times
#: their definitions' bytes (measured: a 1 MB Avro record of 18,000 fields parses into 10 MB
#: of fastavro's dicts, a 0.9 MB PROTOBUF_NATIVE descriptor set into 12.6 MB: factors 10 and
#: 14.4) plus PARSED_SCHEMA_OVERHEAD each: 32 MiB holds thousands of real schemas (a few KB
#: each) but only two near MAX_DEFINITION_BYTES; beyond, the least recently used goes
#: (and is parsed again when used again: the peak of a read stays under 300 MB).
MAX_PARSED_BYTES = 32 << 20
PARSED_BYTES_PER_DEFINITION_BYTE = 16
PARSED_SCHEMA_OVERHEAD = 4096
#: Definition bytes parsed, at most PARSE_BYTES_PER_INPUT_BYTE x the bytes read (payloads
#: decoded, definitions the schema tracker learnt: `schema_bytes`) + PARSE_BYTES_FREE: each
#: schema is parsed once when read (1x), but past MAX_PARSED_BYTES an eviction makes it parse
#: again when used again, and small messages alternating among four wide schemas would parse
#: ~1 MB each (~0.25 s); this keeps that work in proportion to the capture, and the values
#: of a message that would need more say so (never a slowdown).
PARSE_BYTES_PER_INPUT_BYTE = 4
PARSE_BYTES_FREE = 8 << 20
#: KeyValue schemas inside KeyValue schemas: Pulsar itself nests none; one level is allowed.
MAX_KEY_VALUE_NESTING = 2

_PARSERS: dict[str, Any] = {
    "AVRO": lambda s: parse_avro(s.definition),
    "PROTOBUF_NATIVE": lambda s: parse_protobuf_native(s.definition),
    "PROTOBUF": parse_parsing_info,
    "KEY_VALUE": keyvalue.split_schema,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyFields:
    """The message metadata fields a SEPARATED KeyValue's key comes from."""

    partition_key: str | None = None
    partition_key_b64_encoded: bool = False
    null_partition_key: bool = False


NO_KEY = KeyFields()


class ValueDecoder:
    """Decodes payloads by schema, keeping each parsed schema for the next payload."""

    def __init__(self, schema_bytes: Callable[[], int] | None = None) -> None:
        self._parsed: dict[SchemaInfo, Any] = {}  # least recently used first
        self.parsed_bytes = 0  # estimated memory of the kept ones (parsed_cost)
        self.parses = 0  # schemas parsed so far (each once while kept)
        self.parsed_definition_bytes = 0  # their definitions' bytes: the parse work done
        self.payload_bytes = 0  # payload bytes decoded so far
        #: definition bytes read so far (SchemaTracker.definition_bytes), for the budget
        self.schema_bytes: Callable[[], int] = schema_bytes or _nothing

    def decode(
        self,
        payload: bytes | None,
        schema: SchemaInfo,
        *,
        key: KeyFields = NO_KEY,
        redact_fields: Sequence[Path] = (),
    ) -> DecodedValue:
        """The value of one message, as JSON text (`redact_fields` masked before it is
        written: nothing else of it changes), or why not. Never raises."""
        masks = partial(redact, paths=redact_fields) if redact_fields else None
        if payload is not None:
            self.payload_bytes += len(payload)
        try:
            value = self._value(payload, schema, key, 0, hide_bytes=bool(redact_fields))
            return DecodedValue(value=to_json(value, masks))
        except BadValue as e:
            return DecodedValue(error=str(e))
        except Exception as e:  # a decoder's bug must not cost the row; it says so
            return DecodedValue(error=f"internal error: {type(e).__name__}: {e}")

    def schema_error(self, schema: SchemaInfo) -> str | None:
        """Why `schema` cannot decode anything (too large, does not parse, a KeyValue half
        that does not), else None; parsed as decoding would (and kept for it). Never raises."""
        try:
            self._check(schema, 0)
        except OverBudget:
            return None  # not judged: nothing says it is wrong
        except BadValue as e:
            return str(e)
        except Exception as e:  # as decode: a parser's bug says so
            return f"internal error: {type(e).__name__}: {e}"
        return None

    def _check(self, schema: SchemaInfo, depth: int) -> None:
        _within_size(schema)
        if schema.type not in _PARSERS:
            return  # nothing to parse: primitives, STRING, JSON (its definition is not used)
        if schema.type == "KEY_VALUE" and depth >= MAX_KEY_VALUE_NESTING:
            raise BadValue("KEY_VALUE nested deeper than MAX_KEY_VALUE_NESTING")
        parsed = self._parse(schema)
        if schema.type == "KEY_VALUE":
            self._check(parsed.key, depth + 1)
            self._check(parsed.value, depth + 1)

    def _value(
        self,
        payload: bytes | None,
        schema: SchemaInfo,
        key: KeyFields,
        depth: int,
        *,
        hide_bytes: bool = False,
    ) -> Any:
        _within_size(schema)
        if payload is not None and len(payload) > MAX_PAYLOAD_BYTES:
            raise BadValue(f"payload over MAX_PAYLOAD_BYTES ({len(payload)} bytes)")
        if schema.type == "KEY_VALUE":  # before a null payload: a SEPARATED key remains
            return self._key_value(payload, schema, key, depth, hide_bytes)
        if payload is None:
            return None
        kind = schema.type
        if kind == "BYTES" and hide_bytes:  # no field of raw bytes can be masked: all of it
            return redacted(len(dump_json(PRIMITIVES[kind](payload))))
        if kind in PRIMITIVES:
            return PRIMITIVES[kind](payload)
        if kind == "STRING":
            return decode_string(payload, schema)
        if kind == "JSON":
            return _json(payload)
        if kind == "AVRO":
            return decode_avro(self._parse(schema), payload)
        if kind == "PROTOBUF_NATIVE":
            return decode_protobuf_native(self._parse(schema), payload)
        if kind == "PROTOBUF":
            return decode_protobuf_wire(self._parse(schema), payload)
        if kind == "AUTO_CONSUME":
            raise BadValue("AUTO_CONSUME: the topic's real schema was not seen")
        raise BadValue(f"{kind} schema: the payload's format is not known")

    def _key_value(
        self, payload: bytes | None, schema: SchemaInfo, key: KeyFields, depth: int, hide: bool
    ) -> Any:
        if depth >= MAX_KEY_VALUE_NESTING:
            raise BadValue("KEY_VALUE nested deeper than MAX_KEY_VALUE_NESTING")
        kv = self._parse(schema)
        key_bytes, value_bytes = keyvalue.split_payload(
            kv,
            payload,
            partition_key=key.partition_key,
            key_b64=key.partition_key_b64_encoded,
            null_key=key.null_partition_key,
        )
        return {
            "key": self._value(key_bytes, kv.key, NO_KEY, depth + 1, hide_bytes=hide),
            "value": self._value(value_bytes, kv.value, NO_KEY, depth + 1, hide_bytes=hide),
        }

    def _parse(self, schema: SchemaInfo) -> Any:
        known = self._parsed.pop(schema, None)
        if known is None:
            self._within_budget(schema)
            self.parses += 1
            self.parsed_definition_bytes += len(schema.definition)
            try:
                known = _PARSERS[schema.type](schema)
            except BadValue as e:
                known = _Failed(str(e))  # the text only: a kept exception grows tracebacks
            self.parsed_bytes += parsed_cost(schema)
        self._parsed[schema] = known  # the most recently used last
        while len(self._parsed) > 1 and (
            len(self._parsed) > MAX_PARSED_SCHEMAS or self.parsed_bytes > MAX_PARSED_BYTES
        ):
            oldest = next(iter(self._parsed))
            del self._parsed[oldest]
            self.parsed_bytes -= parsed_cost(oldest)
        if isinstance(known, _Failed):
            raise BadValue(known.reason)
        return known

    def parse_budget(self) -> int:
        """Definition bytes that may be parsed in all, given the bytes read so far."""
        read = self.payload_bytes + self.schema_bytes()
        return PARSE_BYTES_PER_INPUT_BYTE * read + PARSE_BYTES_FREE

    def _within_budget(self, schema: SchemaInfo) -> None:
        if self.parsed_definition_bytes + len(schema.definition) > self.parse_budget():
            raise OverBudget(
                f"{schema.type} schema not parsed again: definitions parsed would exceed "
                f"PARSE_BYTES_PER_INPUT_BYTE ({PARSE_BYTES_PER_INPUT_BYTE}) x the payload and "
                f"schema bytes read + PARSE_BYTES_FREE ({PARSE_BYTES_FREE})"
            )


def parsed_cost(schema: SchemaInfo) -> int:
    """The estimated memory of `schema` parsed (MAX_PARSED_BYTES)."""
    return PARSED_SCHEMA_OVERHEAD + PARSED_BYTES_PER_DEFINITION_BYTE * len(schema.definition)


def _within_size(schema: SchemaInfo) -> None:
    if schema.forgotten:
        raise BadValue(
            f"{schema.type} schema forgotten at MAX_HELD_SCHEMA_BYTES ({MAX_HELD_SCHEMA_BYTES}): "
            "the capture's schemas held more bytes since it was used"
        )
    if schema.too_large:
        raise BadValue(
            f"{schema.type} schema over MAX_DEFINITION_BYTES ({MAX_DEFINITION_BYTES}): "
            f"{schema.definition_size} bytes"
        )


def _json(payload: bytes) -> Any:
    """A JSON payload, integers past 64 bits whole (Jackson writes BigIntegers so)."""
    try:
        return load_json(payload)
    except (ValueError, RecursionError) as e:
        raise BadValue(f"JSON payload is not JSON: {e}") from None


class OverBudget(BadValue):
    """Parsing this schema (again) would exceed the parse budget: a fault of no schema."""


def _nothing() -> int:
    return 0


@dataclass(frozen=True, slots=True)
class _Failed:
    reason: str
