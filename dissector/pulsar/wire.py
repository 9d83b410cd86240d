"""The Pulsar wire schema as Python objects: the one module that imports the generated code.

Input: the protobuf bindings generated from proto/pulsar_api.proto (dissector/_pb).
Output: message classes and lookup tables derived from the schema's descriptors:
command type -> name, command type -> BaseCommand field holding its sub-message, command
type -> singular fields of its sub-message (and the commands having a given field), command
type -> its MessageIdData field, compression type -> name; and enum value names of any field.
Rule: nothing here is retyped by hand; names and numbers come from the descriptors, so the
.proto file stays the single source of truth. Every walk of the descriptors happens here,
once, at import: the hot path only looks up the tables.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from dissector._pb import pulsar_api_pb2 as pb

BaseCommand = pb.BaseCommand
MessageMetadata = pb.MessageMetadata
SingleMessageMetadata = pb.SingleMessageMetadata
BrokerEntryMetadata = pb.BrokerEntryMetadata
MessageIdData = pb.MessageIdData
KeyValue = pb.KeyValue

_TYPE_ENUM = BaseCommand.DESCRIPTOR.enum_types_by_name["Type"]

#: BaseCommand.type value -> command name (e.g. 6 -> "SEND").
COMMAND_NAMES: dict[int, str] = {v.number: v.name for v in _TYPE_ENUM.values}

#: command name -> BaseCommand.type value.
COMMAND_TYPES: dict[str, int] = {name: number for number, name in COMMAND_NAMES.items()}


def _body_fields() -> dict[int, str]:
    """Type value -> name of the BaseCommand field carrying that command's sub-message.

    On the wire, each command's sub-message field number equals its type value.
    """
    fields = BaseCommand.DESCRIPTOR.fields_by_number
    out: dict[int, str] = {}
    for number in COMMAND_NAMES:
        field = fields.get(number)
        if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
            out[number] = field.name
    return out


#: BaseCommand.type value -> BaseCommand field name of its sub-message.
BODY_FIELDS: dict[int, str] = _body_fields()


def _body_descriptors() -> dict[int, Any]:
    out = {}
    for ctype, body_field in BODY_FIELDS.items():
        desc = BaseCommand.DESCRIPTOR.fields_by_name[body_field].message_type
        assert desc is not None
        out[ctype] = desc
    return out


BODY_DESCRIPTORS = _body_descriptors()  # command type -> its sub-message descriptor

#: BaseCommand.type value -> names of the singular (not repeated) fields of its sub-message.
SINGULAR_FIELDS: dict[int, frozenset[str]] = {
    ctype: frozenset(f.name for f in desc.fields if not f.is_repeated)
    for ctype, desc in BODY_DESCRIPTORS.items()
}


@cache
def types_with(name: str) -> frozenset[int]:
    """Command types whose sub-message has a singular field `name` (e.g. "request_id")."""
    return frozenset(t for t, names in SINGULAR_FIELDS.items() if name in names)


def _message_id_fields() -> dict[int, tuple[str, bool]]:
    out = {}
    for ctype, desc in BODY_DESCRIPTORS.items():
        for candidate in ("message_id", "message_ids"):
            f = desc.fields_by_name.get(candidate)
            if f is not None and f.message_type is MessageIdData.DESCRIPTOR:
                out[ctype] = (candidate, f.is_repeated)
                break
    return out


#: BaseCommand.type value -> (name, is repeated) of its sub-message's MessageIdData field
#: (message_id or message_ids), for the commands that have one.
MESSAGE_ID_FIELDS: dict[int, tuple[str, bool]] = _message_id_fields()

_COMPRESSION_ENUM = pb.DESCRIPTOR.enum_types_by_name["CompressionType"]

#: CompressionType value -> name (e.g. 1 -> "LZ4").
COMPRESSION_NAMES: dict[int, str] = {v.number: v.name for v in _COMPRESSION_ENUM.values}

#: CompressionType name -> value.
COMPRESSION_TYPES: dict[str, int] = {name: n for n, name in COMPRESSION_NAMES.items()}

SEND = COMMAND_TYPES["SEND"]
MESSAGE = COMMAND_TYPES["MESSAGE"]

#: Commands followed by [broker entry metadata] [magic+checksum] metadata and payload.
PAYLOAD_TYPES: frozenset[int] = frozenset({SEND, MESSAGE})


def command_name(type_value: int) -> str:
    """Schema name of a command type, or UNKNOWN_<n> for a type our schema lacks."""
    return COMMAND_NAMES.get(type_value) or f"UNKNOWN_{type_value}"


def enum_name(message: Any, name: str) -> str:
    """Name of the value of field `name` (which is set): its enum value's name, else str(value)."""
    value = getattr(message, name)
    return enum_value_name(message.DESCRIPTOR.fields_by_name[name], value) or str(value)


def enum_value_name(field: Any, value: int) -> str | None:
    """The name of an enum field's value, None when the schema does not know the number."""
    enum = field.enum_type
    known = enum.values_by_number.get(value) if enum is not None else None
    return known.name if known is not None else None
