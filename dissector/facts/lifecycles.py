"""Producers' and consumers' lives as facts: declared, created, failed, closed, migrated;
and the connection's handshake.

Input: CONNECT, CONNECTED, PRODUCER, SUBSCRIBE, CLOSE_PRODUCER, CLOSE_CONSUMER and
TOPIC_MIGRATED frames from the
machine's table (`table.TRANSITIONS`: after the entity step of `entities.py`, which keeps each
producer's and consumer's state, and after the request step), and the answers to PRODUCER
and SUBSCRIBE (`answered`, from `requests.on_response` once the entities learnt the step),
only when the lifecycle facts are wanted (`state.lifecycles`: the read plan's findings,
journeys or event API): otherwise nothing is made here.
Output: one `Lifecycle` fact (events.Lifecycle) per step, appended to the frame's facts, with
the entity record (`Entity`) when the connection declared it; a `Handshake` fact per CONNECT
and CONNECTED.
Rules:
- PRODUCER / SUBSCRIBE: declared (the entity pending), its name the PRODUCER's.
- PRODUCER answered by PRODUCER_SUCCESS (the ready one: requests.py) and SUBSCRIBE by
  SUCCESS: created (a producer's name then the PRODUCER_SUCCESS's); either answered by
  ERROR: failed (`entities.answer_step`). Another response paired with them says nothing of
  the entity.
- CLOSE_PRODUCER / CLOSE_CONSUMER naming its id: closed by the client when the client sends
  it, by the broker when the broker does (a broker's carries request_id -1: it expects no
  answer), with the broker it assigns the entity to when it names one (`broker_url`:
  assignedBrokerServiceUrl, else its TLS one). The fact is made for an id the connection did
  not declare too (`entity` None: a producer whose PRODUCER the capture missed is closed all
  the same).
- TOPIC_MIGRATED (resource_type Producer or Consumer, resource_id): migrated, whether
  declared or not, to `broker_url` (brokerServiceUrl, else brokerServiceUrlTls); the
  entity's state stays (a migrated producer is closed by a CLOSE_*).
- CONNECT / CONNECTED: the connection's own step, its handshake (`Handshake`, with the
  `ConnectionInfo` the entity step filled in: client version, features, max_message_size).
- These frames are rare: nothing here runs per SEND or MESSAGE.
"""

from __future__ import annotations

from typing import Any

from dissector.events import Direction, EntityKind, Frame, Handshake, Lifecycle, LifeStep
from dissector.facts.entities import answer_step
from dissector.facts.store import Fact, Store
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
C2B = Direction.CLIENT_TO_BROKER
PRODUCER, CONSUMER = EntityKind.PRODUCER, EntityKind.CONSUMER
_PRODUCER, _SUBSCRIBE = T["PRODUCER"], T["SUBSCRIBE"]
_CLOSE_PRODUCER = T["CLOSE_PRODUCER"]
#: TOPIC_MIGRATED's resource_type -> the kind it names (ResourceType Producer = 0, Consumer = 1)
_RESOURCE = {0: PRODUCER, 1: CONSUMER}


def _fact(state: Store, frame: Frame, kind: EntityKind, eid: int, step: LifeStep) -> Lifecycle:
    ents = state.entities
    entity = (ents.producers if kind is PRODUCER else ents.consumers).get(eid)
    name = None if entity is None else entity.name
    return Lifecycle(state.conn_id, frame, kind, eid, step, entity, name)


def _url(service: str, tls: str) -> str | None:
    """The broker a frame sends its entity to: its service URL, else its TLS one."""
    return service or tls or None


def on_declared(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """PRODUCER / SUBSCRIBE: declared (its entity made by the entity step)."""
    if not state.lifecycles:
        return
    if ctype == _PRODUCER:
        facts.append(_fact(state, frame, PRODUCER, body.producer_id, LifeStep.DECLARED))
    else:
        facts.append(_fact(state, frame, CONSUMER, body.consumer_id, LifeStep.DECLARED))


def answered(state: Store, request: Frame, response: Frame, facts: list[Fact]) -> None:
    """A response paired with `request`: created or failed when it answers a PRODUCER or
    SUBSCRIBE (after the entities learnt it)."""
    step = answer_step(request, response)
    if step is None:
        return
    body = request.body
    if request.command_type == _PRODUCER:
        fact = _fact(state, response, PRODUCER, body.producer_id, step)
        if step is LifeStep.CREATED:  # its name is the broker's now (an empty one: as was)
            fact = fact._replace(name=response.body.producer_name or fact.name)
    else:
        fact = _fact(state, response, CONSUMER, body.consumer_id, step)
    facts.append(fact._replace(request=request))


def on_close(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """CLOSE_PRODUCER / CLOSE_CONSUMER: closed by the side that sent it."""
    if not state.lifecycles:
        return
    if ctype == _CLOSE_PRODUCER:
        if not body.HasField("producer_id"):
            return
        kind, eid = PRODUCER, body.producer_id
    elif body.HasField("consumer_id"):
        kind, eid = CONSUMER, body.consumer_id
    else:
        return
    if frame.direction is C2B:
        facts.append(_fact(state, frame, kind, eid, LifeStep.CLOSED_BY_CLIENT))
        return
    url = _url(body.assignedBrokerServiceUrl, body.assignedBrokerServiceUrlTls)
    facts.append(_fact(state, frame, kind, eid, LifeStep.CLOSED_BY_BROKER)._replace(broker_url=url))


def on_migrated(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """TOPIC_MIGRATED: the producer or consumer it names is sent to another broker."""
    kind = _RESOURCE.get(body.resource_type)
    if state.lifecycles and kind is not None:
        url = _url(body.brokerServiceUrl, body.brokerServiceUrlTls)
        fact = _fact(state, frame, kind, body.resource_id, LifeStep.MIGRATED)
        facts.append(fact._replace(broker_url=url))


#: The commands whose frame makes a step (their handlers in the machine's table), by type.
def on_handshake(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """CONNECT / CONNECTED: the connection's handshake so far (the entity step kept it)."""
    if state.lifecycles:
        facts.append(Handshake(state.conn_id, frame, state.entities.info))


STEPS = {
    T["CONNECT"]: on_handshake,
    T["CONNECTED"]: on_handshake,
    _PRODUCER: on_declared,
    _SUBSCRIBE: on_declared,
    _CLOSE_PRODUCER: on_close,
    T["CLOSE_CONSUMER"]: on_close,
    T["TOPIC_MIGRATED"]: on_migrated,
}
