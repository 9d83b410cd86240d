"""`--redact-fields a.b,c`: fields of decoded values masked as authentication data is.

Input: the option's text (`parse_redact_fields`), and a decoded value as plain JSON-ready
Python objects (`redact`: the decoder masks before it writes the value's JSON) or as JSON
text (`redact_json`).
Output: the value with each named field's value replaced by `<redacted>(N bytes)`, N the
length of the field's JSON text, as field_values.redacted masks auth data.
Rule: a path is dot-separated field names from the value's root (a KeyValue's root has
`key` and `value`: `value.card.number`); a name holding a dot, a comma or spaces is
backquoted (`` `card.number` ``, `` a.`b.c` ``; a backquote in it is doubled); arrays are
walked through, so `items.price` masks the price of every item; a path that meets no field
changes nothing. Nothing else of the value changes: no number is read again as a float (an
integer past 64 bits stays whole), keys keep their order. Pure: the input is never modified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dissector.errors import UsageError
from dissector.pulsar.field_values import redacted
from dissector.values.bounds import MAX_DEPTH, dump_json, load_json

Path = tuple[str, ...]

_QUOTE = "`"


def parse_redact_fields(text: str) -> tuple[Path, ...]:
    """`a.b,c` -> (("a", "b"), ("c",)); `` `a.b`.c `` -> (("a.b", "c"),). An empty name, an
    unclosed backquote or a backquote inside an unquoted name is a usage error."""
    paths: list[Path] = []
    parts: list[str] = []
    i = start = 0
    while True:
        name, i = _name(text, i)
        parts.append(name)
        if i < len(text) and text[i] == ".":
            i += 1
            continue
        if parts != [""]:  # `a,,b` and a trailing comma name nothing
            if not all(parts):
                item = text[start:i].strip()
                raise UsageError(f"--redact-fields: {item!r} has an empty field name")
            paths.append(tuple(parts))
        if i >= len(text):
            return tuple(paths)
        parts, i = [], i + 1  # past the comma
        start = i


def _name(text: str, i: int) -> tuple[str, int]:
    """The field name starting at i (spaces around it dropped) and where it ends."""
    n = len(text)
    while i < n and text[i] == " ":
        i += 1
    if i < n and text[i] == _QUOTE:
        out: list[str] = []
        i += 1
        while True:
            end = text.find(_QUOTE, i)
            if end < 0:
                raise UsageError(
                    f"--redact-fields: {text!r} has an unclosed backquote "
                    "(quote a name as `a.b`, a backquote in it doubled)"
                )
            out.append(text[i:end])
            if text[end + 1 : end + 2] == _QUOTE:  # a doubled backquote: one in the name
                out.append(_QUOTE)
                i = end + 2
                continue
            i = end + 1
            break
        name = "".join(out)
        if not name:
            raise UsageError(f"--redact-fields: {text!r} has an empty field name")
    else:
        start = i
        while i < n and text[i] not in ".,":
            i += 1
        name = text[start:i].strip()
        if _QUOTE in name:
            raise UsageError(
                f"--redact-fields: {name!r}: a backquote inside a name "
                "(quote the whole name: `a.b`, a backquote in it doubled)"
            )
    while i < n and text[i] == " ":
        i += 1
    if i < n and text[i] not in ".,":
        raise UsageError(
            f"--redact-fields: {text!r}: {text[i]!r} after a quoted name "
            "(names are joined by `.`, paths by `,`)"
        )
    return name, i


def redact(value: Any, paths: Sequence[Path]) -> Any:
    """A copy of value (plain JSON-ready objects) with every field on one of the paths
    masked; value itself when nothing matches."""
    for path in paths:
        value = _redact_path(value, path)
    return value


def redact_json(text: str, paths: Sequence[Path]) -> str:
    """redact over JSON text (the `value` column): every other byte of the text kept as the
    decoder writes it (integers past 64 bits whole); the text itself when nothing matches."""
    if not paths:
        return text
    value = load_json(text.encode("utf-8"))
    out = redact(value, paths)
    return text if out is value else dump_json(out).decode("utf-8")


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
        inner = redacted(len(dump_json(value[head])))
    return {**value, head: inner}
