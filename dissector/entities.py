"""Per-connection producers and consumers: which topic every frame is about.

Input: the decoded frames of one connection, in order.
Output: `topic_of(frame)`: the topic the frame names, or the topic of the producer or
consumer id it refers to (as established by PRODUCER / SUBSCRIBE earlier on the connection).
Rule: ids are per connection (the client picks them); a later PRODUCER or SUBSCRIBE with the
same id replaces the earlier one. Unknown ids give None, never a guess.
"""

from __future__ import annotations

from typing import Any

from dissector.wire import BODY_FIELDS, COMMAND_TYPES, BaseCommand

_PRODUCER = COMMAND_TYPES["PRODUCER"]
_SUBSCRIBE = COMMAND_TYPES["SUBSCRIBE"]
_TOPIC, _PRODUCER_ID, _CONSUMER_ID = 1, 2, 3


def _kinds() -> dict[int, int]:
    """type -> how its topic is found: named (1), by producer_id (2), by consumer_id (3)."""
    out = {}
    for ctype, field in BODY_FIELDS.items():
        desc = BaseCommand.DESCRIPTOR.fields_by_name[field].message_type
        assert desc is not None
        names = desc.fields_by_name
        topic = names.get("topic")
        if topic is not None and topic.type == topic.TYPE_STRING and not topic.is_repeated:
            out[ctype] = _TOPIC
        elif "producer_id" in names:
            out[ctype] = _PRODUCER_ID
        elif "consumer_id" in names:
            out[ctype] = _CONSUMER_ID
    return out


_KINDS = _kinds()


class Entities:
    """Producer and consumer ids of one connection."""

    __slots__ = ("consumers", "producers")

    def __init__(self) -> None:
        self.producers: dict[int, str] = {}
        self.consumers: dict[int, str] = {}

    def topic_of(self, ctype: int, body: Any) -> str | None:
        """The frame's topic; learns ids from PRODUCER and SUBSCRIBE on the way."""
        kind = _KINDS.get(ctype)
        if kind is None or body is None:
            return None
        if kind == _TOPIC:
            if not body.HasField("topic"):
                return None
            topic: str = body.topic
            if ctype == _PRODUCER and body.HasField("producer_id"):
                self.producers[body.producer_id] = topic
            elif ctype == _SUBSCRIBE and body.HasField("consumer_id"):
                self.consumers[body.consumer_id] = topic
            return topic
        if kind == _PRODUCER_ID:
            return self.producers.get(body.producer_id) if body.HasField("producer_id") else None
        return self.consumers.get(body.consumer_id) if body.HasField("consumer_id") else None
