"""The id columns of a frames row, read by one function made for each command type.

Input: a command type (BaseCommand.type) whose sub-message is present; then that sub-message
and the frame's MessageMetadata (or None).
Output: `IDS[ctype]`, a function (body, meta) -> (request_id, producer_id, consumer_id,
sequence_id, ledger_id, entry_id, num_messages), the values of those frames columns.
Rule: a function reads only the fields its command has (dissector.pulsar.wire's descriptor
tables: SINGULAR_FIELDS, MESSAGE_ID_FIELDS), each only when set (HasField), so that per frame
no test is made for a field the command cannot have; uint64 values are stored as int64, as
columns.i64 keeps them; the message id is the first of a repeated one, whose count is
num_messages; a frame with metadata counts its messages from it (a SEND's own num_messages
first). Each function is compiled the first time its type is met (start-up pays nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissector.pulsar.wire import (
    BODY_FIELDS,
    MESSAGE_ID_FIELDS,
    SEND,
    SINGULAR_FIELDS,
    BaseCommand,
)

#: The id columns, in the order the functions return them (before the message id's).
ID_COLUMNS = ("request_id", "producer_id", "consumer_id", "sequence_id")

#: (request_id, producer_id, consumer_id, sequence_id, ledger_id, entry_id, num_messages)
Ids = tuple[int | None, ...]
Reader = Callable[[Any, Any], Ids]


def _int64(target: str, value: str) -> str:
    """Statements setting `target` to the uint64 `value` as int64 (columns.i64)."""
    return (
        f"    {target} = {value}\n"
        f"    if {target} >= 0x8000000000000000:\n"
        f"        {target} -= 0x10000000000000000\n"
    )


def reader_source(ctype: int) -> str:
    """The source of the reader of command type `ctype` (a type with a sub-message)."""
    lines = [f"def ids_{ctype}(body, meta):\n"]
    lines.append("    request_id = producer_id = consumer_id = sequence_id = None\n")
    lines.append("    ledger_id = entry_id = num_messages = None\n")
    fields = SINGULAR_FIELDS[ctype]
    for name in ID_COLUMNS:
        if name in fields:
            lines.append(f"    if has(body, {name!r}):\n")
            lines.append(_indent(_int64(name, f"body.{name}")))
    mid_field, repeated = MESSAGE_ID_FIELDS.get(ctype, (None, False))
    if mid_field is not None:
        if repeated:
            lines.append(f"    mids = body.{mid_field}\n")
            lines.append("    num_messages = len(mids)\n")
            lines.append("    mid = mids[0] if mids else None\n")
        else:
            lines.append(f"    mid = body.{mid_field} if has(body, {mid_field!r}) else None\n")
        lines.append("    if mid is not None:\n")
        lines.append(_indent(_int64("ledger_id", "mid.ledgerId")))
        lines.append(_indent(_int64("entry_id", "mid.entryId")))
    lines.append("    if meta is not None:\n")
    if ctype == SEND:
        lines.append(
            "        num_messages = body.num_messages if has(body, 'num_messages')"
            " else meta.num_messages_in_batch\n"
        )
    else:
        lines.append("        num_messages = meta.num_messages_in_batch\n")
    lines.append(
        "    return (request_id, producer_id, consumer_id, sequence_id, ledger_id, entry_id,"
        " num_messages)\n"
    )
    return "".join(lines)


def _indent(block: str) -> str:
    """The statements of `block` one level deeper."""
    return "".join("    " + line for line in block.splitlines(True))


class _Readers(dict[int, Reader]):
    """Command type -> its reader, compiled when first asked for."""

    def __missing__(self, ctype: int) -> Reader:
        if ctype not in BODY_FIELDS:
            raise KeyError(ctype)
        # the class's own HasField, called unbound: looking it up on a message costs more
        # than the call (the protobuf runtime tries the name as a field first)
        body_class = type(getattr(BaseCommand(), BODY_FIELDS[ctype]))
        namespace: dict[str, Any] = {"has": body_class.HasField}
        exec(compile(reader_source(ctype), f"<frame ids {ctype}>", "exec"), namespace)
        reader: Reader = namespace[f"ids_{ctype}"]
        self[ctype] = reader
        return reader


#: Command type -> the reader of its frames' id columns (see the module docstring).
IDS: dict[int, Reader] = _Readers()
