"""EDGE: the joiner's recorded events as bytes and back (the fleet's journeys stage rows).

Input: an event the fleet records for the joiner (dissector.frontends.fleet.journey_events):
a Frame, a Lifecycle fact, or another kind's value; a recorded blob.
Output: `encode_frame`, `encode_life`, `encode` -> bytes; `decode` -> (kind, event).
Rule: a frame is recorded as the joiner reads it: its protobufs as their bytes, no payload,
no frame bytes (`_fields`); a lifecycle fact's frames likewise; everything else as it is
(pickle, protocol 5). Decoding gives back equal records (their protobufs parsed again).
"""

from __future__ import annotations

import pickle
from typing import Any

from dissector.events import Frame, Lifecycle
from dissector.pulsar.wire import (
    BODY_FIELDS,
    BaseCommand,
    BrokerEntryMetadata,
    MessageMetadata,
)

_COMMAND = Frame._fields.index("command")
_BODY = Frame._fields.index("body")
_BROKER_ENTRY = Frame._fields.index("broker_entry")
_METADATA = Frame._fields.index("metadata")
_PAYLOAD = Frame._fields.index("payload")
_RAW = Frame._fields.index("raw")
_LIFE_FRAME = Lifecycle._fields.index("frame")
_LIFE_REQUEST = Lifecycle._fields.index("request")


def _bytes(message: Any) -> bytes | None:
    return None if message is None else bytes(message.SerializeToString())


def _fields(frame: Frame) -> tuple[Any, ...]:
    """A frame as the joiner reads it: its protobufs as bytes, no payload, no frame bytes."""
    fields: list[Any] = list(frame)
    fields[_COMMAND] = _bytes(frame.command)
    fields[_BODY] = frame.body is not None
    fields[_BROKER_ENTRY] = _bytes(frame.broker_entry)
    fields[_METADATA] = _bytes(frame.metadata)
    fields[_PAYLOAD] = fields[_RAW] = None
    return tuple(fields)


def encode_frame(frame: Frame) -> bytes:
    """A frame as the joiner reads it (`_fields`), recorded."""
    return pickle.dumps(("F", _fields(frame)), protocol=5)


def encode_life(fact: Lifecycle) -> bytes:
    """A lifecycle fact, its frames as the joiner reads frames (`_fields`), recorded."""
    values: list[Any] = list(fact)
    values[_LIFE_FRAME] = _fields(fact.frame)
    values[_LIFE_REQUEST] = None if fact.request is None else _fields(fact.request)
    return pickle.dumps(("L", tuple(values)), protocol=5)


def _frame(fields: tuple[Any, ...]) -> Frame:
    values = list(fields)
    command = BaseCommand.FromString(values[_COMMAND])
    values[_COMMAND] = command
    body_field = BODY_FIELDS.get(values[Frame._fields.index("command_type")])
    values[_BODY] = getattr(command, body_field) if values[_BODY] and body_field else None
    for at, kind in ((_BROKER_ENTRY, BrokerEntryMetadata), (_METADATA, MessageMetadata)):
        if values[at] is not None:
            values[at] = kind.FromString(values[at])
    return Frame(*values)


def decode(blob: bytes) -> tuple[str, Any]:
    """A recorded event: ("F", Frame), ("M", AppMessage), ("A", (conn_id, SEND's stream
    offset or None, answered)) the facts' answer to a SEND (answered: by the frame before),
    ("C", Delivering or AckedIds) the fact of the frame before (a MESSAGE or ACK), ("L",
    Lifecycle) a producer's or consumer's step, ("O",
    (conn_id, FlowKey)) a connection's broker, ("E", conn_id) its end."""
    kind, value = pickle.loads(blob)
    if kind == "F":
        return kind, _frame(value)
    if kind == "L":
        values = list(value)
        values[_LIFE_FRAME] = _frame(values[_LIFE_FRAME])
        request = values[_LIFE_REQUEST]
        values[_LIFE_REQUEST] = None if request is None else _frame(request)
        return kind, Lifecycle(*values)
    return kind, value


def encode(kind: str, value: Any) -> bytes:
    """An event of another kind (module rule; its letter as `decode` lists them), recorded."""
    return pickle.dumps((kind, value), protocol=5)
