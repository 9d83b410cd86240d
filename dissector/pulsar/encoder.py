"""Frame encoder: build any Pulsar frame, right or deliberately wrong, for tests and fixtures.

Input: a BaseCommand (or a type name and sub-message fields), optional broker entry metadata,
MessageMetadata and payload, and how to checksum.
Output: the frame's bytes, size fields included.
Rule: by default the output is exactly what a conforming peer sends; every deviation
(no checksum, a wrong checksum, extra bytes) is an explicit argument.
"""

from __future__ import annotations

import struct
from typing import Any

from crc32c import crc32c
from google.protobuf.message import Message

from dissector.errors import UsageError
from dissector.pulsar.sections import MAGIC_BROKER_ENTRY, MAGIC_CHECKSUM
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES, PAYLOAD_TYPES, BaseCommand

_U32 = struct.Struct(">I")


def command(name: str, **fields: Any) -> BaseCommand:
    """A BaseCommand of type `name` whose sub-message gets `fields` (nested dicts allowed)."""
    try:
        ctype = COMMAND_TYPES[name]
    except KeyError:
        raise UsageError(f"unknown command type {name!r}") from None
    cmd = BaseCommand()
    cmd.type = ctype  # type: ignore[assignment]  # enum values are ints on the wire
    body = getattr(cmd, BODY_FIELDS[ctype])
    body.SetInParent()
    for key, value in fields.items():
        _assign(body, key, value)
    return cmd


def _assign(msg: Message, key: str, value: Any) -> None:
    if isinstance(value, dict):
        sub = getattr(msg, key)
        sub.SetInParent()
        for k, v in value.items():
            _assign(sub, k, v)
    elif isinstance(value, list):
        container = getattr(msg, key)
        for item in value:
            if isinstance(item, dict):
                added = container.add()
                for k, v in item.items():
                    _assign(added, k, v)
            else:
                container.append(item)
    else:
        setattr(msg, key, value)


def _raw(part: Message | bytes) -> bytes:
    return part if isinstance(part, bytes) else part.SerializePartialToString()


def encode_frame(
    cmd: BaseCommand | bytes,
    *,
    metadata: Message | bytes | None = None,
    payload: bytes = b"",
    broker_entry: Message | bytes | None = None,
    checksum: bool | int = True,
    trailing: bytes = b"",
) -> bytes:
    """Encode one frame.

    cmd: the command, or its serialized bytes (to craft undecodable commands).
    metadata: MessageMetadata for a payload frame; required for SEND/MESSAGE commands.
    broker_entry: BrokerEntryMetadata, written behind magic 0x0e02.
    checksum: True writes magic 0x0e01 and the right CRC32C, False writes neither (as
        brokers' MESSAGE frames do), an int writes that value as the checksum.
    trailing: extra bytes after a simple command (a malformed frame).
    """
    command_bytes = _raw(cmd)
    is_payload = isinstance(cmd, BaseCommand) and cmd.type in PAYLOAD_TYPES
    if metadata is None:
        if is_payload:
            raise UsageError("a SEND or MESSAGE frame needs metadata")
        rest = trailing
    else:
        meta = _raw(metadata)
        section = _U32.pack(len(meta)) + meta + payload
        if checksum is True:
            section = MAGIC_CHECKSUM + _U32.pack(crc32c(section)) + section
        elif checksum is not False:
            section = MAGIC_CHECKSUM + _U32.pack(checksum & 0xFFFFFFFF) + section
        if broker_entry is not None:
            entry = _raw(broker_entry)
            section = MAGIC_BROKER_ENTRY + _U32.pack(len(entry)) + entry + section
        rest = section + trailing
    body = _U32.pack(len(command_bytes)) + command_bytes + rest
    return _U32.pack(len(body)) + body
