"""Who is on one connection: its handshake, its producers and consumers, each frame's topic.

Input: the decoded frames of one connection in order (through `table.TRANSITIONS`), the
request/response pairs completed (`responded`), then `close`.
Output: the topic each frame concerns, and a `ConnectionInfo` of what the connection said about
itself (CONNECT, CONNECTED) with its `Entity` records (producers and consumers) and the count
of its auth exchanges (AUTH_CHALLENGE, AUTH_RESPONSE) and keep-alives (PING, PONG).
Rules:
- PRODUCER / SUBSCRIBE create an entity (pending) on the topic they name; their answer
  (PRODUCER_SUCCESS, SUCCESS) makes it created, ERROR failed (`answer_step`; a response of
  another type paired with them says nothing of it); CLOSE_PRODUCER / CLOSE_CONSUMER close
  it, by the client or by the broker according to the direction; FLOW adds permits; SEND
  and MESSAGE count messages (batch entries counted). Each step is also a fact when wanted
  (`lifecycles.py`).
- PRODUCER / SUBSCRIBE naming an id already used on the connection (a client re-creating
  it after the broker closed it, or retrying) start a new entity; the one it replaces keeps
  its row (its state, times and counts), up to MAX_RETIRED of them per connection (the
  oldest dropped beyond: bounds.py); so does the oldest live one beyond MAX_ENTITIES.
- A frame's topic is that of the producer or consumer it names, else the topic it names.
- What a command does here is a step by its type (`entity_steps`), built from the schema;
  the machine's one table (`table.TRANSITIONS`) holds them beside the pairing handlers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from dissector.events import (
    ConnectionInfo,
    Direction,
    Entity,
    EntityKind,
    EntityState,
    Frame,
    LifeStep,
)
from dissector.facts.bounds import MAX_ENTITIES, MAX_RETIRED
from dissector.pulsar.wire import COMMAND_TYPES, enum_name, types_with

T = COMMAND_TYPES
C2B = Direction.CLIENT_TO_BROKER

# Per-frame checks are set lookups, not descriptor walks: the hot path runs once per frame.
WITH_PRODUCER = types_with("producer_id")
WITH_CONSUMER = types_with("consumer_id")
WITH_TOPIC = types_with("topic")


def _optional_enum(body: Any, name: str) -> str | None:
    return enum_name(body, name) if body.HasField(name) else None


class Entities:
    """The producers, consumers and handshake of one connection; see the module docstring."""

    __slots__ = ("consumers", "info", "producers", "retired")

    def __init__(self) -> None:
        self.info = ConnectionInfo()
        self.producers: dict[int, Entity] = {}
        self.consumers: dict[int, Entity] = {}
        self.retired: deque[Entity] = deque(maxlen=MAX_RETIRED)

    def add(self, table: dict[int, Entity], entity: Entity) -> None:
        """A new producer or consumer; one it replaces (same id) is retired, keeping its row,
        and so is the oldest beyond MAX_ENTITIES."""
        old = table.get(entity.entity_id)
        if old is not None:
            self.retired.append(old)
        table[entity.entity_id] = entity
        if len(table) > MAX_ENTITIES:
            self.retired.append(table.pop(next(iter(table))))

    def lookup(self, ctype: int, body: Any) -> str | None:
        """Topic of a command: of the producer or consumer it names, else the one it names."""
        if ctype in WITH_PRODUCER and body.HasField("producer_id"):
            entity = self.producers.get(body.producer_id)
            return None if entity is None else entity.topic
        if ctype in WITH_CONSUMER and body.HasField("consumer_id"):
            entity = self.consumers.get(body.consumer_id)
            return None if entity is None else entity.topic
        if ctype in WITH_TOPIC and body.HasField("topic"):
            topic: str = body.topic
            return topic
        return None

    def topic(self, frame: Frame | None) -> str | None:
        """The topic of a frame already observed."""
        if frame is None or frame.body is None:
            return None
        if frame.topic is not None:
            return frame.topic
        return self.lookup(frame.command_type, frame.body)

    def responded(self, request: Frame | None, response: Frame) -> None:
        """Entity lifecycle: PRODUCER / SUBSCRIBE answered (`answer_step`)."""
        step = None if request is None else answer_step(request, response)
        if step is None:
            return
        assert request is not None
        if request.command_type == T["PRODUCER"]:
            entity = self.producers.get(request.body.producer_id)
            if entity is not None and step is LifeStep.CREATED:
                entity.name = response.body.producer_name or entity.name
        else:
            entity = self.consumers.get(request.body.consumer_id)
        if entity is not None:
            entity.state = EntityState.CREATED if step is LifeStep.CREATED else EntityState.FAILED

    def connect(self, body: Any) -> None:
        """The client's CONNECT."""
        s = self.info
        s.client_version = body.client_version
        s.client_protocol = body.protocol_version if body.HasField("protocol_version") else None
        s.auth_method = body.auth_method_name if body.HasField("auth_method_name") else None
        if s.auth_method is None and body.HasField("auth_method"):
            s.auth_method = _optional_enum(body, "auth_method")
        if body.HasField("proxy_to_broker_url"):
            s.proxy_to_broker_url = body.proxy_to_broker_url
        if body.HasField("original_principal"):
            s.original_principal = body.original_principal
        if body.HasField("feature_flags"):
            s.feature_flags = [f.name for f, v in body.feature_flags.ListFields() if v]

    def connected(self, body: Any) -> None:
        """The broker's CONNECTED."""
        s = self.info
        s.server_version = body.server_version
        s.server_protocol = body.protocol_version if body.HasField("protocol_version") else None
        if body.HasField("max_message_size"):
            s.max_message_size = body.max_message_size

    def close(self) -> None:
        entities = [*self.producers.values(), *self.consumers.values()]
        if self.retired:  # producers first, then consumers; the replaced before the live
            order = {EntityKind.PRODUCER: 0, EntityKind.CONSUMER: 1}
            entities = sorted([*self.retired, *entities], key=lambda e: order[e.kind])
        self.info.entities = entities


#: request type -> the response that creates it (ERROR fails either)
_CREATED_BY = {T["PRODUCER"]: T["PRODUCER_SUCCESS"], T["SUBSCRIBE"]: T["SUCCESS"]}


def answer_step(request: Frame, response: Frame) -> LifeStep | None:
    """What a response paired with `request` does to its entity: a PRODUCER answered by
    PRODUCER_SUCCESS, a SUBSCRIBE by SUCCESS is created, either answered by ERROR failed;
    None: no such answer (another request, or a response of another type)."""
    created = _CREATED_BY.get(request.command_type)
    if created is None or request.body is None:
        return None
    rtype = response.command_type
    if rtype == created:
        return LifeStep.CREATED
    return LifeStep.FAILED if rtype == T["ERROR"] else None


# ------------------------------------------------------------------ steps, one per command type
# Each takes (entities, frame, type, sub-message) and returns the frame's topic.

Step = Callable[[Entities, Frame, int, Any], str | None]


def _lookup(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
    return ents.lookup(ctype, body)


def _new_producer(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
    p = Entity(EntityKind.PRODUCER, body.producer_id, body.topic, frame.last_ts)
    p.name = body.producer_name if body.HasField("producer_name") else None
    p.access_mode = _optional_enum(body, "producer_access_mode")
    ents.add(ents.producers, p)
    return p.topic


def _new_consumer(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
    c = Entity(EntityKind.CONSUMER, body.consumer_id, body.topic, frame.last_ts)
    c.subscription = body.subscription
    c.sub_type = _optional_enum(body, "subType")
    c.name = body.consumer_name if body.HasField("consumer_name") else None
    ents.add(ents.consumers, c)
    return c.topic


def _closer(kind: str) -> Step:
    id_field = f"{kind}_id"

    def close(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
        if not body.HasField(id_field):
            return ents.lookup(ctype, body)
        table = ents.producers if kind == "producer" else ents.consumers
        entity = table.get(getattr(body, id_field))
        if entity is None:
            return None
        entity.state = (
            EntityState.CLOSED_BY_CLIENT if frame.direction is C2B else EntityState.CLOSED_BY_BROKER
        )
        entity.closed_ts = frame.last_ts
        return entity.topic

    return close


def _flow(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
    if not body.HasField("consumer_id"):
        return ents.lookup(ctype, body)
    entity = ents.consumers.get(body.consumer_id)
    if entity is None:
        return None
    entity.permits += body.messagePermits
    return entity.topic


def _send(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
    entity = ents.producers.get(body.producer_id)
    if entity is not None:
        entity.sent += body.num_messages if body.HasField("num_messages") else 1
    if not body.HasField("producer_id"):
        return ents.lookup(ctype, body)
    return None if entity is None else entity.topic


def _message(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
    entity = ents.consumers.get(body.consumer_id)
    if entity is not None:
        meta = frame.metadata
        entity.delivered += meta.num_messages_in_batch if meta is not None else 1
    if not body.HasField("consumer_id"):
        return ents.lookup(ctype, body)
    return None if entity is None else entity.topic


def _counter(name: str) -> Step:
    """A step counting the command in the connection's info (auth exchanges, keep-alives)."""

    def count(ents: Entities, frame: Frame, ctype: int, body: Any) -> str | None:
        info = ents.info
        setattr(info, name, getattr(info, name) + 1)
        return None

    return count


def entity_steps() -> dict[int, Step]:
    """BaseCommand.type -> what the command does to the entities; returns the frame's topic.
    Commands absent concern no topic."""
    steps: dict[int, Step] = dict.fromkeys(WITH_PRODUCER | WITH_CONSUMER | WITH_TOPIC, _lookup)
    steps[T["PRODUCER"]] = _new_producer
    steps[T["SUBSCRIBE"]] = _new_consumer
    steps[T["CLOSE_PRODUCER"]] = _closer("producer")
    steps[T["CLOSE_CONSUMER"]] = _closer("consumer")
    steps[T["FLOW"]] = _flow
    steps[T["SEND"]] = _send
    steps[T["MESSAGE"]] = _message
    steps[T["AUTH_CHALLENGE"]] = _counter("auth_challenges")
    steps[T["AUTH_RESPONSE"]] = _counter("auth_responses")
    steps[T["PING"]] = _counter("pings")
    steps[T["PONG"]] = _counter("pongs")
    return steps
