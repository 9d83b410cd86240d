"""Pure decoding of the parts of one Pulsar frame whose bytes are all present.

Input: a buffer and the positions of a frame's sections.
Output: the decoded command, the payload section's parts (broker entry metadata, checksum
status, MessageMetadata, payload view) and a list of problems (code, position, detail, length).
Rule: no state and no provenance here (the FrameDecoder adds those); in strict mode (resync)
any problem raises Reject instead, so that a candidate offset is accepted only when every part
of the frame checks out. The resync helpers at the end check the cheap parts of a candidate
(its first bytes, its command, where its metadata lies and whether it decodes) from the bytes
present, before anything costs as much as the frame.
"""

from __future__ import annotations

import re
import struct
from functools import lru_cache
from typing import Any, NamedTuple, TypeVar

from crc32c import crc32c
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as _Message
from google.protobuf.unknown_fields import UnknownFieldSet

from dissector.anomalies import AnomalyCode
from dissector.events import Checksum
from dissector.pulsar.wire import (
    BODY_FIELDS,
    BaseCommand,
    BrokerEntryMetadata,
    MessageMetadata,
)

U32 = struct.Struct(">I")
HEADER = struct.Struct(">II")  # totalSize, commandSize

MAGIC_CHECKSUM = b"\x0e\x01"
MAGIC_BROKER_ENTRY = b"\x0e\x02"

#: Smallest possible command: the type field's tag and a one-byte varint.
MIN_COMMAND_SIZE = 2

#: (anomaly code, position in the buffer, detail, bytes concerned)
Fault = tuple[str, int, str, int]

M = TypeVar("M", bound=_Message)


class Reject(Exception):
    """A frame's command is unusable, or (strict mode) any part of a candidate is wrong."""


class PayloadParts(NamedTuple):
    checksum: Checksum | None
    expected: int | None
    computed: int | None
    broker_entry: Any  # BrokerEntryMetadata | None
    metadata_size: int | None
    metadata: Any  # MessageMetadata | None
    payload: memoryview | None


def parse(cls: type[M], data: bytes | memoryview) -> M:
    """Decode a protobuf message from any buffer without copying it first."""
    return cls.FromString(data)  # type: ignore[arg-type]  # upb accepts any buffer


#: BaseCommand from any buffer (upb takes any); the frame emitter decodes the commands the
#: compiled scan found with it too.
parse_command = _parse_command = BaseCommand.FromString
#: BaseCommand's HasField, called unbound: looking it up on a message costs more than the
#: call (the protobuf runtime tries the name as a field first).
_command_has = BaseCommand.HasField


#: The start of an HTTP response's status line where a frame header was expected (a proxy,
#: an ingress or a web server answering a Pulsar client): the version, the code and the
#: reason phrase's first words; nothing after it (no headers, no body) is ever told.
_STATUS_LINE = re.compile(rb"HTTP/\d(?:\.\d)? \d{3}(?: [A-Za-z][A-Za-z0-9 -]{0,38})?")


def http_status(buf: bytes, pos: int) -> str | None:
    """The start of the HTTP status line at buf[pos:] ("HTTP/1.1 400 Bad Request"), else None."""
    found = _STATUS_LINE.match(buf, pos, pos + 64)
    return None if found is None else found.group().decode("ascii").rstrip(" -")


def header_problem(total: int, csize: int, max_size: int) -> tuple[str, str] | None:
    """(code, detail) when a frame header is impossible, else None."""
    if total > max_size:
        return AnomalyCode.PULSAR_FRAME_TOO_LARGE, f"totalSize {total} > limit {max_size}"
    if total < 4 + MIN_COMMAND_SIZE:
        return AnomalyCode.PULSAR_FRAME_TOO_SMALL, f"totalSize {total}"
    if csize < MIN_COMMAND_SIZE or csize + 4 > total:
        return AnomalyCode.PULSAR_COMMAND_SIZE_INVALID, f"commandSize {csize} in totalSize {total}"
    return None


def decode_command(data: memoryview) -> tuple[Any, int, Any]:
    """(BaseCommand, type value, sub-message or None). Raise Reject if it does not decode."""
    try:
        cmd = _parse_command(data)  # type: ignore[arg-type]  # hot path: upb takes any buffer
    except DecodeError as exc:
        raise Reject(str(exc) or "DecodeError") from None
    if not _command_has(cmd, "type"):
        # Closed proto2 enum: an unknown type value lands in the unknown fields.
        unknown = UnknownFieldSet(cmd)
        for i in range(len(unknown)):
            field = unknown[i]
            if field.field_number == 1 and isinstance(field.data, int):
                return cmd, field.data, None
        raise Reject("BaseCommand without a type")
    ctype: int = cmd.type
    field = BODY_FIELDS.get(ctype)
    if field is not None and _command_has(cmd, field):
        return cmd, ctype, getattr(cmd, field)
    return cmd, ctype, None


def decode_payload_section(
    buf: bytes, mv: memoryview, p: int, end: int, strict: bool, problems: list[Fault]
) -> PayloadParts:
    """Decode buf[p:end], what follows a SEND/MESSAGE command.

    Layout: [0x0e02 size BrokerEntryMetadata] [0x0e01 crc32c] metadataSize metadata payload.
    The checksum covers everything after itself to the end of the frame.
    """
    broker_entry = None
    if buf.startswith(MAGIC_BROKER_ENTRY, p, end):
        ok = False
        if end - p >= 6:
            bsize: int = U32.unpack_from(buf, p + 2)[0]
            if p + 6 + bsize <= end:
                try:
                    broker_entry = parse(BrokerEntryMetadata, mv[p + 6 : p + 6 + bsize])
                    ok = True
                except DecodeError:
                    pass
                p += 6 + bsize
        if not ok:
            if strict:
                raise Reject("broker entry metadata")
            detail = "size beyond the frame or protobuf does not decode"
            problems.append((AnomalyCode.PULSAR_BROKER_ENTRY_METADATA_INVALID, p, detail, 0))
    expected = computed = None
    status = Checksum.ABSENT
    if buf.startswith(MAGIC_CHECKSUM, p, end) and end - p >= 6:
        expected = U32.unpack_from(buf, p + 2)[0]
        p += 6
        computed = crc32c(mv[p:end])
        if computed == expected:
            status = Checksum.VALID
        else:
            status = Checksum.INVALID
            if strict:
                raise Reject("checksum")
            detail = f"expected 0x{expected:08x} computed 0x{computed:08x}"
            problems.append((AnomalyCode.PULSAR_BAD_CHECKSUM, p - 6, detail, 0))
    metadata = msize = payload = None
    code = detail = ""
    if end - p < 4:
        code, detail = AnomalyCode.PULSAR_PAYLOAD_MISSING, f"{end - p} bytes after the command"
    else:
        size: int = U32.unpack_from(buf, p)[0]
        mstart = p + 4
        if mstart + size > end:
            if status is Checksum.ABSENT:
                code = AnomalyCode.PULSAR_BAD_MAGIC
                detail = (
                    f"found {buf[p : p + 2].hex()}: neither magic 0x0e01 nor a metadataSize"
                    " that fits the frame"
                )
            else:
                code = AnomalyCode.PULSAR_METADATA_SIZE_INVALID
                detail = f"metadataSize {size} with {end - mstart} bytes left"
        else:
            msize = size
            try:
                metadata = parse(MessageMetadata, mv[mstart : mstart + size])
                payload = mv[mstart + size : end]
            except DecodeError as exc:
                code, detail = AnomalyCode.PULSAR_METADATA_UNDECODABLE, str(exc) or "DecodeError"
    if code:
        if strict:
            raise Reject(code)
        problems.append((code, p, detail, 0))
    return PayloadParts(status, expected, computed, broker_entry, msize, metadata, payload)


def partial_metadata(buf: bytes, p: int) -> Any:
    """MessageMetadata of an incomplete payload frame, if its bytes are all present."""
    n = len(buf)
    if buf.startswith(MAGIC_BROKER_ENTRY, p) and n - p >= 6:
        p += 6 + U32.unpack_from(buf, p + 2)[0]
    if buf.startswith(MAGIC_CHECKSUM, p):
        p += 6
    if n - p < 4:
        return None
    msize = U32.unpack_from(buf, p)[0]
    if p + 4 + msize > n:
        return None
    try:
        return parse(MessageMetadata, memoryview(buf)[p + 4 : p + 4 + msize])
    except DecodeError:
        return None


# --------------------------------------------------------------------------- resync checks


@lru_cache(maxsize=8)
def resync_pattern(max_size: int) -> re.Pattern[bytes]:
    """The first 10 bytes of a plausible frame: totalSize and commandSize at most `max_size`
    (so their high byte is small), then tag 0x08 (every serializer writes BaseCommand.type,
    field 1, first) and a one-byte type that has a sub-message. Searched in C, so bytes that
    cannot start a frame cost no Python work."""
    size = b"[\\x00-\\x%02x]" % min(max_size >> 24, 255)
    types = b"".join(b"\\x%02x" % t for t in sorted(BODY_FIELDS) if t < 0x80)
    return re.compile(b"(?s)" + size + b"..." + size + b"...\\x08[" + types + b"]")


def candidate_type(data: memoryview) -> int:
    """Resync check: the command's type when it decodes with its sub-message, else -1."""
    try:
        _, ctype, body = decode_command(data)
    except Reject:
        return -1
    return -1 if body is None else ctype


def payload_layout(buf: bytes, p: int, end: int) -> tuple[int, int, int, int] | int:
    """Resync: where broker entry metadata and MessageMetadata lie in the payload section
    buf[p:end], read from the bytes present (len(buf) may be less than end).

    Returns (bstart, bend, mstart, mend) (bstart == -1 without broker entry metadata),
    -1 when the sizes cannot fit the frame, or else the buffer length needed to read them.
    """
    n = len(buf)
    if end - p < 4:
        return -1
    if n < p + 2:
        return p + 2
    bstart = bend = -1
    if buf.startswith(MAGIC_BROKER_ENTRY, p):
        if end - p < 6:
            return -1
        if n < p + 6:
            return p + 6
        bstart = p + 6
        bend = p = bstart + U32.unpack_from(buf, p + 2)[0]
        if end - p < 4:
            return -1
        if n < p + 2:
            return p + 2
    if buf.startswith(MAGIC_CHECKSUM, p) and end - p >= 6:
        p += 6
        if end - p < 4:
            return -1
    if n < p + 4:
        return p + 4
    mend = p + 4 + U32.unpack_from(buf, p)[0]
    return (bstart, bend, p + 4, mend) if mend <= end else -1


def sections_decode(mv: memoryview, bstart: int, bend: int, mstart: int, mend: int) -> bool:
    """Resync check: broker entry metadata (when present) and MessageMetadata decode."""
    try:
        if bstart >= 0:
            parse(BrokerEntryMetadata, mv[bstart:bend])
        parse(MessageMetadata, mv[mstart:mend])
    except DecodeError:
        return False
    return True
