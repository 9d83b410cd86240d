"""Producers' and consumers' lifecycle facts (dissector.facts.lifecycles), made by the machine.

Frames are encoded with dissector.pulsar.encoder and decoded by a FrameDecoder (as the
pipeline does), then observed. Expected values come from what the test encoded and from the
protocol (docs: the binary protocol, /work/shared/spec): CloseProducer "can be sent by either
producer or broker" (a broker's carries request_id -1, all 64 bits set, and expects no
answer); a Producer is answered by ProducerSuccess (the one with producer_ready, PulsarApi.proto)
or Error, a Subscribe by Success or Error; TOPIC_MIGRATED's resource_type is Producer = 0,
Consumer = 1 (PulsarApi.proto CommandTopicMigrated.ResourceType); SubType Shared = 1;
CommandConnected.max_message_size is optional (absent: the client's 5 MiB default).
"""

from __future__ import annotations

from typing import Any

from dissector.events import (
    Direction,
    EntityKind,
    EntityState,
    Frame,
    Handshake,
    Lifecycle,
    LifeStep,
    Pair,
    RequestIdReused,
)
from dissector.facts import ConversationState
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.framing import FrameDecoder
from dissector.read.options import ReaderOptions
from dissector.read.plan import EVENTS, TABLES, TEXT, plan_read

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
TOPIC = "persistent://public/default/lives"
NO_REQUEST = (1 << 64) - 1  # request_id -1 on the wire (uint64)


class _Link:
    """One connection's frames, decoded and observed."""

    def __init__(self, **state: Any) -> None:
        self.state = ConversationState(3, **{"lifecycles": True, **state})
        self.decoders = {d: FrameDecoder(conn_id=3, direction=d) for d in Direction}
        self.packet = 0
        self.frames: list[Frame] = []

    def send(self, direction: Direction, name: str, **fields: Any) -> list[Any]:
        """The facts of one frame."""
        self.packet += 1
        data = encode_frame(command(name, **fields))
        (frame,) = self.decoders[direction].feed(data, packet=self.packet, ts=self.packet)
        assert isinstance(frame, Frame)
        self.frames.append(frame)
        _, facts = self.state.observe(frame)
        return facts

    def lives(self, direction: Direction, name: str, **fields: Any) -> list[Lifecycle]:
        return [f for f in self.send(direction, name, **fields) if type(f) is Lifecycle]


def _entity(link: _Link, kind: EntityKind, eid: int) -> Any:
    table = link.state.producers if kind is EntityKind.PRODUCER else link.state.consumers
    return table[eid]


def test_a_producer_is_declared_created_and_closed_by_the_broker() -> None:
    link = _Link()
    (declared,) = link.lives(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1,
                             producer_name="mine")  # fmt: skip
    producer = link.frames[-1]
    assert declared.step is LifeStep.DECLARED and declared.kind is EntityKind.PRODUCER
    assert (declared.conn_id, declared.entity_id, declared.name) == (3, 1, "mine")
    assert declared.frame is producer and declared.request is None
    assert declared.entity is _entity(link, EntityKind.PRODUCER, 1)
    assert declared.entity.topic == TOPIC and declared.entity.state is EntityState.PENDING

    facts = link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="broker-named",
                      producer_ready=True)  # fmt: skip
    assert [type(f) for f in facts] == [Pair, Lifecycle]  # after the request's completion
    created = facts[1]
    assert created.step is LifeStep.CREATED and created.name == "broker-named"
    assert created.request is producer and created.frame is link.frames[-1]
    assert created.entity.state is EntityState.CREATED and created.entity.name == "broker-named"

    (closed,) = link.lives(B2C, "CLOSE_PRODUCER", producer_id=1, request_id=NO_REQUEST,
                           assignedBrokerServiceUrl="pulsar://other:6650")  # fmt: skip
    assert closed.step is LifeStep.CLOSED_BY_BROKER and closed.entity_id == 1
    assert closed.broker_url == "pulsar://other:6650"
    assert closed.entity is not None and closed.entity.state is EntityState.CLOSED_BY_BROKER


def test_a_client_close_is_a_request_and_its_answer_no_step() -> None:
    link = _Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=4, request_id=1)
    link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p", producer_ready=True)
    (closed,) = link.lives(C2B, "CLOSE_PRODUCER", producer_id=4, request_id=2)
    assert closed.step is LifeStep.CLOSED_BY_CLIENT and closed.broker_url is None
    assert link.lives(B2C, "SUCCESS", request_id=2) == []  # it answers the close
    assert _entity(link, EntityKind.PRODUCER, 4).state is EntityState.CLOSED_BY_CLIENT


def test_a_producer_not_ready_is_created_by_its_ready_answer() -> None:
    link = _Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=7)
    assert link.lives(B2C, "PRODUCER_SUCCESS", request_id=7, producer_name="p",
                      producer_ready=False) == []  # fmt: skip
    (created,) = link.lives(B2C, "PRODUCER_SUCCESS", request_id=7, producer_name="p",
                            producer_ready=True)  # fmt: skip
    assert created.step is LifeStep.CREATED


def test_a_subscribe_refused_fails() -> None:
    link = _Link()
    facts = link.send(C2B, "SUBSCRIBE", topic=TOPIC, subscription="orders", subType=1,
                      consumer_id=2, request_id=5)  # fmt: skip
    (declared,) = facts
    assert declared.kind is EntityKind.CONSUMER and declared.step is LifeStep.DECLARED
    assert declared.entity.subscription == "orders" and declared.entity.sub_type == "Shared"
    (failed,) = link.lives(B2C, "ERROR", request_id=5, error=0, message="no")
    assert failed.step is LifeStep.FAILED and failed.request is link.frames[0]
    assert _entity(link, EntityKind.CONSUMER, 2).state is EntityState.FAILED


def test_a_response_of_another_type_is_no_step() -> None:
    """A LOOKUP_RESPONSE carrying a PRODUCER's request_id is paired with it (a response), yet
    neither creates nor fails the producer: the entities and the facts agree."""
    link = _Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=2)
    assert link.lives(B2C, "LOOKUP_RESPONSE", request_id=2, response=0) == []
    assert _entity(link, EntityKind.PRODUCER, 1).state is EntityState.PENDING


def test_closes_and_migrations_of_entities_never_declared_are_facts() -> None:
    """A capture that missed the SUBSCRIBE still sees the consumer closed or migrated."""
    link = _Link()
    (closed,) = link.lives(B2C, "CLOSE_CONSUMER", consumer_id=9, request_id=NO_REQUEST)
    assert closed.step is LifeStep.CLOSED_BY_BROKER and closed.entity is None
    assert closed.kind is EntityKind.CONSUMER and closed.broker_url is None
    (moved,) = link.lives(B2C, "TOPIC_MIGRATED", resource_id=9, resource_type=1,
                          brokerServiceUrlTls="pulsar+ssl://next:6651")  # fmt: skip
    assert moved.step is LifeStep.MIGRATED and moved.kind is EntityKind.CONSUMER
    assert moved.entity_id == 9 and moved.broker_url == "pulsar+ssl://next:6651"


def test_a_migrated_producer_keeps_its_state() -> None:
    link = _Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1)
    link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p", producer_ready=True)
    (moved,) = link.lives(B2C, "TOPIC_MIGRATED", resource_id=1, resource_type=0,
                          brokerServiceUrl="pulsar://next:6650")  # fmt: skip
    assert moved.kind is EntityKind.PRODUCER and moved.entity is not None
    assert moved.entity.state is EntityState.CREATED


def test_a_declaration_follows_the_request_facts_of_its_frame() -> None:
    """A PRODUCER whose request_id is in flight: RequestIdReused, then its step."""
    link = _Link()
    link.send(C2B, "LOOKUP", topic=TOPIC, request_id=1)
    facts = link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1)
    assert [type(f) for f in facts] == [RequestIdReused, Lifecycle]


def test_made_only_when_wanted() -> None:
    for state in ({"lifecycles": False}, {"pairs": False}):
        link = _Link(**state)
        assert link.lives(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1) == []
        assert link.lives(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=2) == []
        assert _entity(link, EntityKind.PRODUCER, 1).state is EntityState.CLOSED_BY_CLIENT


def test_the_read_plan_makes_them_for_the_findings_the_journeys_and_the_event_api() -> None:
    options = ReaderOptions()
    for tables in (["findings"], ["journeys"], ["timeline", "findings"], None):
        assert plan_read(options, tables).lifecycles, tables
    for tables in (["frames"], ["timeline"], ["entities"], ["messages"]):
        assert not plan_read(options, tables).lifecycles, tables
    assert plan_read(options, None, EVENTS).lifecycles
    assert not plan_read(ReaderOptions(pairs=False), None, EVENTS).lifecycles
    assert not plan_read(options, None, TEXT).lifecycles
    assert plan_read(options, ["findings"], TABLES).lifecycles


def test_the_handshake_is_a_fact_after_connect_and_connected() -> None:
    """CONNECT then CONNECTED: a Handshake after each, its frame and what the connection
    said so far (the client's version, then the broker's max_message_size too); a
    CONNECTED without max_message_size leaves it unsaid (None)."""
    link = _Link()
    facts = link.send(C2B, "CONNECT", client_version="lives-client 1.0", protocol_version=21)
    (shook,) = [f for f in facts if type(f) is Handshake]
    assert (shook.conn_id, shook.frame) == (3, link.frames[-1])
    assert shook.info.client_version == "lives-client 1.0"
    assert shook.info.max_message_size is None
    facts = link.send(B2C, "CONNECTED", server_version="broker 4.0", protocol_version=21,
                      max_message_size=65536)  # fmt: skip
    assert [type(f) for f in facts] == [Pair, Handshake]  # after the CONNECT's completion
    shook = facts[1]
    assert shook.frame is link.frames[-1] and shook.frame.command_name == "CONNECTED"
    info = shook.info
    assert (info.client_version, info.server_version) == ("lives-client 1.0", "broker 4.0")
    assert info.max_message_size == 65536

    bare = _Link()
    bare.send(C2B, "CONNECT", client_version="c", protocol_version=21)
    (shook,) = [f for f in bare.send(B2C, "CONNECTED", server_version="b") if type(f) is Handshake]
    assert shook.info.max_message_size is None


def test_no_handshake_fact_when_lifecycles_are_not_wanted() -> None:
    link = _Link(lifecycles=False)
    assert link.send(C2B, "CONNECT", client_version="c", protocol_version=21) == []
