"""The Pulsar wire schema as Python objects: the one module that imports the generated code.

Input: the protobuf bindings generated from proto/pulsar_api.proto (dissector/_pb).
Output: message classes and lookup tables derived from the schema's descriptors:
command type -> name, command type -> BaseCommand field holding its sub-message.
Rule: nothing here is retyped by hand; names and numbers come from the descriptors, so the
.proto file stays the single source of truth.
"""

from __future__ import annotations

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

SEND = COMMAND_TYPES["SEND"]
MESSAGE = COMMAND_TYPES["MESSAGE"]

#: Commands followed by [broker entry metadata] [magic+checksum] metadata and payload.
PAYLOAD_TYPES: frozenset[int] = frozenset({SEND, MESSAGE})


def command_name(type_value: int) -> str:
    """Schema name of a command type, or UNKNOWN_<n> for a type our schema lacks."""
    return COMMAND_NAMES.get(type_value) or f"UNKNOWN_{type_value}"
