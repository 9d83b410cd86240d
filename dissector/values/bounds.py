"""The bounds on decoding values, and the bounded conversion of a decoded value to JSON text.

Input: a decoded value as Python objects (dicts, lists, str, numbers, bytes, decimals,
dates and times, UUIDs), from any decoder.
Output: `to_json`: compact JSON text (bytes as base64, decimals as strings, dates and times
ISO 8601), fields masked first when asked; `BadValue` naming the bound when one is exceeded;
`dump_json` / `load_json`: JSON text of plain values and back, integers past 64 bits whole.
Rule: every bound is named here with why (`item_budget`: the items a payload may make); a
value over one is an error row, never a MemoryError or RecursionError.
"""

from __future__ import annotations

import base64
import json
import math
import re
import uuid
from collections.abc import Callable
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

_LONG_NUMBER = re.compile(rb"\d{19}")  # 2**63 has 19 digits: a number that may not fit


def item_budget(size: int) -> int:
    """Items a payload of `size` bytes may make: ITEMS_FREE + ITEMS_PER_BYTE per byte, at
    most MAX_ITEMS."""
    return min(MAX_ITEMS, ITEMS_FREE + ITEMS_PER_BYTE * size)


def to_json(value: Any, redact: Callable[[Any], Any] | None = None) -> str:
    """Compact JSON of value, within MAX_DEPTH, MAX_ITEMS and MAX_VALUE_JSON_BYTES;
    `redact` masks fields of the plain value before it is written (redact.py)."""
    plain = _plain(value, 0, [MAX_ITEMS])
    text = dump_json(plain if redact is None else redact(plain))
    if len(text) > MAX_VALUE_JSON_BYTES:
        raise BadValue(
            f"value over MAX_VALUE_JSON_BYTES ({MAX_VALUE_JSON_BYTES}): {len(text)} bytes"
        )
    return text.decode("utf-8")


def dump_json(plain: Any) -> bytes:
    """Compact JSON of a plain value; an integer past 64 bits is written whole (orjson
    writes none: the standard library does, for the value that holds one)."""
    try:
        return orjson.dumps(plain)
    except orjson.JSONEncodeError:
        return json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def load_json(text: bytes) -> Any:
    """JSON text as Python objects, integers past 64 bits whole: orjson reads them as
    floats, losing digits, so a text with a long number is read again by the standard
    library, after orjson accepted it (its nesting is then within orjson's limit). Raises
    ValueError (orjson.JSONDecodeError is one) or RecursionError when it is not JSON."""
    value = orjson.loads(text)
    if _LONG_NUMBER.search(text) is None:
        return value
    return json.loads(text)


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise BadValue(f"value over MAX_ITEMS ({MAX_ITEMS} items)")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
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
