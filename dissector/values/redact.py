"""`--redact-fields a.b,c`: fields of decoded values masked as authentication data is.

Input: the option's text (`parse_redact_fields`), and a decoded value as Python objects or
as JSON text (`redact`, `redact_json`).
Output: the value with each named field's value replaced by `<redacted>(N bytes)`, N the
length of the field's JSON text, as field_values.redacted masks auth data.
Rule: a path is dot-separated field names from the value's root (a KeyValue's root has
`key` and `value`: `value.card.number`); arrays are walked through, so `items.price` masks
the price of every item; a path that meets no field changes nothing. Pure: the input is
never modified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from dissector.errors import UsageError
from dissector.pulsar.field_values import redacted
from dissector.values.bounds import MAX_DEPTH

Path = tuple[str, ...]


def parse_redact_fields(text: str) -> tuple[Path, ...]:
    """`a.b,c` -> (("a", "b"), ("c",)); an empty name is a usage error."""
    paths: list[Path] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        parts = tuple(item.split("."))
        if any(not p for p in parts):
            raise UsageError(f"--redact-fields: {item!r} has an empty field name")
        paths.append(parts)
    return tuple(paths)


def redact(value: Any, paths: Sequence[Path]) -> Any:
    """A copy of value with every field on one of the paths masked."""
    for path in paths:
        value = _redact_path(value, path)
    return value


def redact_json(text: str, paths: Sequence[Path]) -> str:
    """redact over JSON text (the `value` column); the text itself when nothing matches."""
    if not paths:
        return text
    value = orjson.loads(text)
    out = redact(value, paths)
    return text if out is value else orjson.dumps(out).decode("utf-8")


def _redact_path(value: Any, path: Path, depth: int = 0) -> Any:
    if isinstance(value, list):
        if depth >= MAX_DEPTH:  # decoded values nest no deeper (bounds.py)
            return value
        items = [_redact_path(v, path, depth + 1) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not isinstance(value, dict) or path[0] not in value:
        return value
    head, rest = path[0], path[1:]
    if rest:
        inner = _redact_path(value[head], rest, depth + 1)
        if inner is value[head]:
            return value
    else:
        inner = redacted(len(orjson.dumps(value[head])))
    return {**value, head: inner}
