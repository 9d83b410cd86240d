"""String fields that are not UTF-8, made text once, where messages are decoded.

Input: a decoded protobuf message (a command's sub-message, MessageMetadata,
SingleMessageMetadata).
Output: the same message, every string field that held invalid UTF-8 replaced by its text
with U+FFFD; and the list of what was replaced: (field path, the original bytes); for a
SEND or MESSAGE frame's metadata, the `pulsar.invalid_utf8` anomaly naming them.
Rule: the protobuf runtime returns `bytes` for a proto2 `string` field that is not UTF-8;
after this module no layer ever sees them, so every table, text view and JSON line gets a
string where the schema says string. The walk of each message type is planned once from
its descriptor: types with no string field anywhere below them (SEND, MESSAGE, ACK, FLOW,
SEND_RECEIPT ...) cost one dict lookup per frame. Written here because no library offers
it: upb decides the bytes-or-str question per access.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly, Frame

_STRING, _MESSAGE = 9, 11  # FieldDescriptor.TYPE_STRING, TYPE_MESSAGE


class _Plan(NamedTuple):
    strings: tuple[str, ...]  # singular string fields
    repeated_strings: tuple[str, ...]
    messages: tuple[str, ...]  # singular message fields with strings somewhere below
    repeated_messages: tuple[str, ...]


_PLANS: dict[Any, _Plan | None] = {}
_MISSING: Any = object()  # "not planned yet" (None means "no strings below")


def _plan(desc: Any, visiting: frozenset[str] = frozenset()) -> _Plan | None:
    """The fields to look at in messages of `desc`, None when no string is reachable."""
    if desc in _PLANS:
        return _PLANS[desc]
    if desc.full_name in visiting:  # a recursive type: its own walk covers it
        return None
    below = visiting | {desc.full_name}
    strings: list[str] = []
    repeated_strings: list[str] = []
    messages: list[str] = []
    repeated_messages: list[str] = []
    for f in desc.fields:
        if f.type == _STRING:
            (repeated_strings if f.is_repeated else strings).append(f.name)
        elif f.type == _MESSAGE and _plan(f.message_type, below) is not None:
            (repeated_messages if f.is_repeated else messages).append(f.name)
    found = strings or repeated_strings or messages or repeated_messages
    plan = _Plan(*map(tuple, (strings, repeated_strings, messages, repeated_messages)))
    result = plan if found else None
    if not visiting:  # plans made inside a recursion may be partial: keep only whole ones
        _PLANS[desc] = result
    return result


def repair(message: Any, path: str = "") -> list[tuple[str, bytes]]:
    """Replace invalid UTF-8 in every string field of `message` (in place); returns the
    (field path, original bytes) of each replacement, [] for nearly every message."""
    plan = _PLANS.get(message.DESCRIPTOR, _MISSING)
    if plan is _MISSING:
        plan = _plan(message.DESCRIPTOR)
    if plan is None:
        return []
    found: list[tuple[str, bytes]] = []
    for name in plan.strings:
        value = getattr(message, name)
        if type(value) is bytes:
            setattr(message, name, value.decode("utf-8", "replace"))
            found.append((path + name, value))
    for name in plan.repeated_strings:
        values = getattr(message, name)
        if not values:
            continue
        for i, value in enumerate(values):
            if type(value) is bytes:
                values[i] = value.decode("utf-8", "replace")
                found.append((f"{path}{name}[{i}]", value))
    for name in plan.messages:
        if message.HasField(name):
            found += repair(getattr(message, name), f"{path}{name}.")
    for name in plan.repeated_messages:
        items = getattr(message, name)
        if not items:
            continue
        for i, item in enumerate(items):
            found += repair(item, f"{path}{name}[{i}].")
    return found


def describe(where: str, replaced: list[tuple[str, bytes]]) -> str:
    """One anomaly detail naming each field and its original bytes (shortened)."""
    shown = "; ".join(f"{where}.{name} = {raw[:48]!r}" for name, raw in replaced[:4])
    more = f"; and {len(replaced) - 4} more" if len(replaced) > 4 else ""
    return f"not UTF-8, replaced with U+FFFD: {shown}{more}"


def has_strings(descriptor: Any) -> bool:
    """Whether messages of this type have any string field, however deep."""
    return _plan(descriptor) is not None


def repair_metadata(frame: Frame) -> Anomaly | None:
    """The strings of a payload frame's metadata made text (in place, once: a repaired
    message holds only text); the anomaly naming what was replaced, or None."""
    meta = frame.metadata
    replaced = [] if meta is None else repair(meta)
    if not replaced:
        return None
    return frame.anomaly(
        AnomalyCode.PULSAR_INVALID_UTF8, describe(f"{frame.command_name}.metadata", replaced)
    )
