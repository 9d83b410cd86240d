"""PROTOBUF_NATIVE values: the descriptor set the schema carries -> a message class -> a value.

Input: a PROTOBUF_NATIVE schema's definition and payloads (protobuf binary) written with it.
Output: `parse_protobuf_native` -> the message class (built once per schema); and
`decode_protobuf_native` -> the message as a dict in protobuf's JSON mapping (field names as
in the .proto file, fields at their defaults included); `BadValue` when it cannot be.
Rule: the definition is Pulsar's ProtobufNativeSchemaData as JSON (pulsar-common, written
by ProtobufNativeSchemaUtils.serialize): `fileDescriptorSet` (a FileDescriptorSet, base64),
`rootMessageTypeName` (the message's full name) and `rootFileDescriptorName`. Each schema
gets its own descriptor pool, never the default one: a capture's .proto files must not
clash with each other nor with the dissector's own. Files are added dependencies first;
at most MAX_DESCRIPTOR_FILES.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from dissector.values.avro import load_json_schema
from dissector.values.model import BadValue

#: Files in one descriptor set: a message and its imports are a handful of files; Pulsar
#: sends the root file and every file it imports, transitively.
MAX_DESCRIPTOR_FILES = 256


def parse_protobuf_native(definition: bytes) -> type[Message]:
    """The root message class of a ProtobufNativeSchemaData, in a private pool."""
    doc = load_json_schema(definition, "PROTOBUF_NATIVE")
    if not isinstance(doc, dict):
        raise BadValue("PROTOBUF_NATIVE schema is not a JSON object")
    encoded = doc.get("fileDescriptorSet")
    root = doc.get("rootMessageTypeName")
    if not isinstance(encoded, str) or not isinstance(root, str):
        raise BadValue("PROTOBUF_NATIVE schema lacks fileDescriptorSet or rootMessageTypeName")
    try:
        fds = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(encoded))
    except (binascii.Error, ValueError, Exception) as e:
        raise BadValue(f"PROTOBUF_NATIVE fileDescriptorSet does not decode: {e}") from None
    if len(fds.file) > MAX_DESCRIPTOR_FILES:
        raise BadValue(f"PROTOBUF_NATIVE over MAX_DESCRIPTOR_FILES ({len(fds.file)} files)")
    pool = descriptor_pool.DescriptorPool()
    try:
        for file in _dependencies_first(list(fds.file)):
            pool.Add(file)
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(root))
    except BadValue:
        raise
    except Exception as e:  # the pool refuses a bad descriptor in many ways: all are data
        raise BadValue(f"PROTOBUF_NATIVE schema does not build: {type(e).__name__}: {e}") from None


def _dependencies_first(
    files: list[descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    by_name = {f.name: f for f in files}
    done: set[str] = set()
    out: list[descriptor_pb2.FileDescriptorProto] = []
    for start in files:
        stack: list[tuple[str, bool]] = [(start.name, False)]
        visiting: set[str] = set()
        while stack:
            name, expanded = stack.pop()
            if name in done:
                continue
            if expanded:
                visiting.discard(name)
                done.add(name)
                out.append(by_name[name])
                continue
            if name in visiting:
                raise BadValue(f"PROTOBUF_NATIVE imports form a cycle at {name!r}")
            if name not in by_name:
                raise BadValue(f"PROTOBUF_NATIVE descriptor set lacks the import {name!r}")
            visiting.add(name)
            stack.append((name, True))
            stack.extend((dep, False) for dep in by_name[name].dependency if dep not in done)
    return out


def decode_protobuf_native(cls: type[Message], data: bytes) -> Any:
    """The message of a protobuf payload as a JSON-ready dict."""
    try:
        msg = cls.FromString(data)
        return json_format.MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except Exception as e:  # DecodeError, a recursion limit, a bad UTF-8 string: all data
        raise BadValue(f"PROTOBUF_NATIVE value does not decode: {type(e).__name__}: {e}") from None
