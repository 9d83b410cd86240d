"""A decoded protobuf message as JSON-ready values, credentials redacted.

Input: a decoded protobuf message (a command's sub-message, metadata).
Output: `message_dict`: a dict of the fields set (nested messages as dicts, bytes as hex,
enums by name); `redacted`: the placeholder that stands for a credential; `short_hex`: bytes
as one line of text shows them.
Rule: authentication data (CONNECT auth_data / original_auth_data, the AuthData carried by
AUTH_CHALLENGE and AUTH_RESPONSE) becomes `<redacted>(N bytes)` unless show_secrets=True;
bytes values longer than 4 KiB are cut, with "..." after them.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from dissector.pulsar.wire import enum_value_name

#: Field names whose values are credentials wherever they appear in a command.
SECRET_FIELDS = frozenset({"auth_data", "original_auth_data"})
REDACTED = "<redacted>"
_MAX_JSON_BYTES = 4096  # bytes fields: bytes rendered as hex in JSON before truncation
#: Bytes shown as hex in a line of text (the text view's bytes fields, a schema version's
#: label) before "...": a line stays a line.
SHORT_HEX_BYTES = 40


def redacted(length: int) -> str:
    return f"{REDACTED}({length} bytes)"


def short_hex(value: bytes) -> str:
    """`0x...`: the first SHORT_HEX_BYTES bytes as hex, then "..." when there are more."""
    more = "..." if len(value) > SHORT_HEX_BYTES else ""
    return f"0x{value[:SHORT_HEX_BYTES].hex()}{more}"


def message_dict(msg: Message, *, show_secrets: bool = False) -> dict[str, Any]:
    """JSON-ready dict of the fields set in msg (bytes as hex, enums by name)."""
    out: dict[str, Any] = {}
    for field, value in msg.ListFields():
        if field.is_repeated:
            out[field.name] = [_value_json(field, v, show_secrets) for v in value]
        else:
            out[field.name] = _value_json(field, value, show_secrets)
    return out


def _value_json(field: FieldDescriptor, value: Any, show_secrets: bool) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_dict(value, show_secrets=show_secrets)
    if field.name in SECRET_FIELDS and not show_secrets:
        return redacted(len(value))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return value[:_MAX_JSON_BYTES].hex() + ("..." if len(value) > _MAX_JSON_BYTES else "")
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_value_name(field, value) or value  # an unknown number stays a number
    return value
