"""The bounds on decoding values, and the bounded conversion of a decoded value to JSON text.

Input: a decoded value as Python objects (dicts, lists, str, numbers, bytes, decimals,
dates and times, UUIDs), from any decoder.
Output: `to_json`: compact JSON text (bytes as base64, decimals as strings, dates and times
ISO 8601); `BadValue` naming the bound when one is exceeded.
Rule: every bound is named here with why (`item_budget`: the items a payload may make); a
value over one is an error row, never a MemoryError or RecursionError.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import orjson

from dissector.values.model import BadValue

#: Payload bytes decoded as a value: a frame is at most 5 MiB; values larger than this are
#: bulk data nobody reads in a table cell, and decoding them costs memory per item.
MAX_PAYLOAD_BYTES = 4 << 20
#: Nesting of records, arrays and maps: real schemas nest a handful of levels; this stays far
#: below Python's recursion limit in every decoder and in this module.
MAX_DEPTH = 64
#: Items (values of any kind, nested ones counted) in one decoded value: bounds the Python
#: objects a payload can make, e.g. an Avro array of nulls, which costs no bytes per item.
MAX_ITEMS = 1_000_000
#: Items a value may make per byte of its payload, plus ITEMS_FREE: Avro's block counts are
#: the writer's word, and an item of null, an empty record or a zero-size fixed costs no
#: byte, so 4 bytes could ask for MAX_ITEMS items; a real value makes a few items per byte
#: (a record of null unions: 2.5), far below this.
ITEMS_PER_BYTE = 16
ITEMS_FREE = 1024
#: Digits of an Avro decimal's unscaled value: Python's int -> Decimal conversion is quadratic
#: in the digits (Java's BigDecimal holds any; real schemas declare at most a few dozen).
MAX_DECIMAL_DIGITS = 1000
#: JSON text of one value: a table cell people read and query; bigger is an error row.
MAX_VALUE_JSON_BYTES = 1 << 20


def item_budget(size: int) -> int:
    """Items a payload of `size` bytes may make: ITEMS_FREE + ITEMS_PER_BYTE per byte, at
    most MAX_ITEMS."""
    return min(MAX_ITEMS, ITEMS_FREE + ITEMS_PER_BYTE * size)


def to_json(value: Any) -> str:
    """Compact JSON of value, within MAX_DEPTH, MAX_ITEMS and MAX_VALUE_JSON_BYTES."""
    budget = [MAX_ITEMS, 0]  # items left; integers past 64 bits seen
    plain = _plain(value, 0, budget)
    if budget[1]:  # orjson writes no integer past 64 bits: the standard library does
        text = json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    else:
        text = orjson.dumps(plain)
    if len(text) > MAX_VALUE_JSON_BYTES:
        raise BadValue(
            f"value over MAX_VALUE_JSON_BYTES ({MAX_VALUE_JSON_BYTES}): {len(text)} bytes"
        )
    return text.decode("utf-8")


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise BadValue(f"value over MAX_ITEMS ({MAX_ITEMS} items)")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            budget[1] = 1
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_DEPTH:
            raise BadValue(f"value nested deeper than MAX_DEPTH ({MAX_DEPTH})")
        if isinstance(value, dict):
            return {str(k): _plain(v, depth + 1, budget) for k, v in value.items()}
        return [_plain(v, depth + 1, budget) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime | date | time):
        text = value.isoformat()  # UTC instants end in "Z", as the primitive ones do
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    return str(value)  # anything else a library hands back: its text, never a crash
