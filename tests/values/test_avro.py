"""Avro values within their bytes: items made per byte (block counts are the writer's word)
and decimals within their declared precision, refused before fastavro builds or converts
anything (issue 42 items 3 and 4); legitimate values decode as before.

Expected values are hand-made Avro bytes (the spec's zigzag varints and two's complement
big-endian decimals), not our own output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dissector.values import ValueDecoder, make_schema
from dissector.values import avro as avro_module
from dissector.values.bounds import MAX_ITEMS
from dissector.values.model import BadValue
from tests.values.test_bounds import zigzag

NULLS = {"type": "array", "items": "null"}
EMPTY = {"type": "record", "name": "E", "fields": []}


def avro(schema: Any) -> Any:
    return make_schema("AVRO", json.dumps(schema).encode())


def decoded(payload: bytes, schema: Any) -> tuple[Any, str | None]:
    out = ValueDecoder().decode(payload, avro(schema))
    return (None if out.value is None else json.loads(out.value)), out.error


def walked(payload: bytes, schema: Any) -> tuple[int, str | None]:
    """Items the bounded walk visited before it accepted or refused the payload."""
    parsed = avro_module.parse_avro(json.dumps(schema).encode())
    walk = avro_module._Walk(payload, parsed.named)
    try:
        walk.value(parsed.parsed, 0)
    except BadValue as e:
        return walk.budget - walk.items, str(e)
    return walk.budget - walk.items, None


@pytest.fixture
def no_fastavro(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr("fastavro.schemaless_reader", lambda *a, **k: calls.append(a))
    return calls


# ------------------------------------------------------------------ items per byte (item 3)

# 999,999 nulls in 4 bytes (the reproducer's value): within MAX_ITEMS, but no byte per item
BOMB = zigzag(999_999) + b"\x00"


@pytest.mark.parametrize(
    ("schema", "payload"),
    [
        (NULLS, BOMB),
        # a map of empty records: each entry a 0-length key (1 byte), 2 items: a block
        # claiming 999,999 entries must be refused before its first entry
        ({"type": "map", "values": EMPTY}, zigzag(999_999) + b"\x00" * 100 + b"\x00"),
        # arrays of arrays of null: 1,000 x 1,000 in about 3 KB
        ({"type": "array", "items": NULLS}, (zigzag(1000) + (zigzag(1000) + b"\x00") * 1000)),
        # records of zero-size fields: 60 nulls a record, 16,000 records in 3 bytes
        (
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Z",
                    "fields": [{"name": f"f{i}", "type": "null"} for i in range(60)],
                },
            },
            zigzag(16_000) + b"\x00",
        ),
    ],
)
def test_items_are_bounded_by_the_bytes_that_carry_them(
    schema: Any, payload: bytes, no_fastavro: list[Any]
) -> None:
    budget = 1024 + 16 * len(payload)  # ITEMS_FREE + ITEMS_PER_BYTE per byte, by hand
    assert budget < MAX_ITEMS
    visited, error = walked(payload, schema)
    assert error is not None and f"over {budget} items" in error
    assert visited <= budget + 1  # the walk stopped at the budget, whatever was claimed
    value, error = decoded(payload, schema)
    assert value is None and error is not None and "ITEMS_PER_BYTE" in error
    assert no_fastavro == []  # nothing was built


def test_legitimate_zero_byte_items_still_decode() -> None:
    # 1,000 nulls in 3 bytes: within ITEMS_FREE
    assert decoded(zigzag(1000) + b"\x00", NULLS) == ([None] * 1000, None)
    # a record of nullable fields, all null: 1 union index byte per field
    rec = {
        "type": "record",
        "name": "R",
        "fields": [{"name": f"f{i}", "type": ["null", "long"]} for i in range(20)],
    }
    payload = zigzag(2000) + b"\x00" * 20 * 2000 + b"\x00"
    value, error = decoded(payload, {"type": "array", "items": rec})
    assert error is None
    assert value == [{f"f{i}": None for i in range(20)}] * 2000


# ------------------------------------------------------------------ decimals (item 4)


def decimal_schema(precision: Any, scale: int = 2, fixed: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "bytes", "logicalType": "decimal", "scale": scale}
    if fixed:
        out.update(type="fixed", name="D", size=fixed)
    if precision is not None:
        out["precision"] = precision
    return out


def test_decimal_within_its_precision_decodes() -> None:
    # 12345 = 0x3039; scale 2: 123.45; 5 digits need 3 bytes (99999 < 2**17)
    assert decoded(zigzag(2) + b"\x30\x39", decimal_schema(5)) == ("123.45", None)
    # -12345 = 0xCFC7, and sign-padded forms (Java's BigInteger reads them too)
    assert decoded(zigzag(2) + b"\xcf\xc7", decimal_schema(5)) == ("-123.45", None)
    assert decoded(zigzag(4) + b"\x00\x00\x30\x39", decimal_schema(5)) == ("123.45", None)
    # a fixed(16) decimal(38, 0): Java's usual, padded to its size
    value = b"\x00" * 15 + b"\x07"
    assert decoded(value, decimal_schema(38, 0, fixed=16)) == ("7", None)


@pytest.mark.parametrize(
    ("schema", "payload", "said"),
    [
        # 4 significant bytes where precision 5 needs at most 3
        (decimal_schema(5), zigzag(4) + b"\x01\x00\x00\x00", "cannot fit precision 5"),
        # 600,000 bytes: a precision this large is held to MAX_DECIMAL_DIGITS (1,000 digits:
        # 417 bytes)
        (decimal_schema(10**7), zigzag(600_000) + b"\x11" * 600_000, "MAX_DECIMAL_DIGITS"),
        (decimal_schema(None), zigzag(600_000) + b"\x11" * 600_000, "MAX_DECIMAL_DIGITS"),
        (decimal_schema(9, fixed=5), b"\x7f\xff\xff\xff\xff", "cannot fit precision 9"),
    ],
)
def test_decimal_longer_than_its_precision_is_refused_before_conversion(
    schema: Any, payload: bytes, said: str, no_fastavro: list[Any]
) -> None:
    value, error = decoded(payload, schema)
    assert value is None and error is not None and said in error, error
    assert no_fastavro == []  # no int, no Decimal was made


WIDE_RECORD = {
    "type": "record",
    "name": "Wide",
    "fields": [{"name": "a", "type": ["null", "int"]}]
    + [{"name": f"f{i:05d}", "type": ["null", "string"], "default": None} for i in range(5000)],
}


@pytest.mark.parametrize("schema", [WIDE_RECORD, ["null", WIDE_RECORD]])
def test_a_payload_does_not_parse_its_schema_again(schema: Any) -> None:
    """fastavro's reader parses a schema not marked as parsed for every payload: memory
    allocated per payload, counted by tracemalloc, is the work that would cost."""
    import tracemalloc

    parsed = avro_module.parse_avro(json.dumps(schema).encode())
    payload = (b"\x02" if isinstance(schema, list) else b"") + b"\x02\x54" + b"\x00" * 5000
    tracemalloc.start()
    try:
        value = avro_module.decode_avro(parsed, payload)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value["a"] == 42 and value["f04999"] is None
    assert peak < 600_000, peak  # the value: ~160 KB; parsing the schema again: ~1.5 MB
