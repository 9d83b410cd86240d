"""The schema facts and connection-level counts of the protocol-facts layer.

Frames are encoded with dissector.pulsar.encoder and decoded by a FrameDecoder per direction,
as the pipeline does; each expected fact (step, command, topic, version, entity, error) is
written from the commands the test sent (the wire's Schema.Type numbers from
pulsar_api.proto: AVRO 4, INT32 8), never from the layer's output.
"""

from __future__ import annotations

import struct
from typing import Any

from dissector.events import Direction, EntityKind, Frame, SchemaFact, SchemaStep
from dissector.facts import ConversationState
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import BaseCommand

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
TOPIC = "persistent://public/default/orders"
AVRO = {"name": "orders", "type": 4, "schema_data": b'{"type":"string"}'}
INT32 = {"name": "n", "type": 8, "schema_data": b""}
INCOMPATIBLE = (
    BaseCommand.DESCRIPTOR.file.enum_types_by_name["ServerError"]
    .values_by_name["IncompatibleSchema"]
    .number
)


def v(n: int) -> bytes:
    return struct.pack(">q", n)  # a schema version as the broker writes it


class Link:
    """One connection whose state machine makes schema facts."""

    def __init__(self, *, schemas: bool = True) -> None:
        self.state = ConversationState(7, pairs=False, schemas=schemas)
        self.decoders = {d: FrameDecoder(conn_id=7, direction=d) for d in Direction}
        self.packet = 0

    def send(
        self, direction: Direction, name: str, **fields: Any
    ) -> tuple[Frame, list[SchemaFact]]:
        self.packet += 1
        (frame,) = self.decoders[direction].feed(
            encode_frame(command(name, **fields)), packet=self.packet, ts=self.packet
        )
        assert isinstance(frame, Frame)
        self.state.observe(frame)
        return frame, self.state.schemas.take()


def said(fact: SchemaFact) -> tuple[Any, ...]:
    schema = None if fact.schema is None else (fact.schema.type, bytes(fact.schema.schema_data))
    return (fact.step, fact.command, fact.topic, fact.kind, fact.entity_id, schema, fact.version)


def test_a_producer_declares_and_the_broker_accepts_with_a_version() -> None:
    link = Link()
    frame, facts = link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=3, request_id=1, schema=AVRO)
    avro = (4, AVRO["schema_data"])
    assert [said(f) for f in facts] == [
        (SchemaStep.DECLARED, "PRODUCER", TOPIC, EntityKind.PRODUCER, 3, avro, None)
    ]
    assert facts[0].frame is frame and facts[0].conn_id == 7
    answer, facts = link.send(
        B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=v(2)
    )
    assert [said(f) for f in facts] == [
        (SchemaStep.ACCEPTED, "PRODUCER_SUCCESS", TOPIC, EntityKind.PRODUCER, 3, avro, v(2))
    ]
    assert facts[0].frame is answer


def test_a_producer_without_schema_is_declared_with_none() -> None:
    link = Link()
    _, facts = link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1)
    assert [said(f) for f in facts] == [
        (SchemaStep.DECLARED, "PRODUCER", TOPIC, EntityKind.PRODUCER, 1, None, None)
    ]
    # ready without a version, nothing declared: nothing to say of a schema
    assert link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p")[1] == []


def test_a_producer_waiting_for_exclusive_access() -> None:
    link = Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=5, schema=INT32)
    # not ready and no version: no answer yet
    assert (
        link.send(B2C, "PRODUCER_SUCCESS", request_id=5, producer_name="p", producer_ready=False)[1]
        == []
    )
    _, facts = link.send(
        B2C, "PRODUCER_SUCCESS", request_id=5, producer_name="p", schema_version=v(0)
    )
    assert [(f.step, f.version, f.entity_id) for f in facts] == [(SchemaStep.ACCEPTED, v(0), 1)]


def test_subscribe_get_schema_and_get_or_create() -> None:
    link = Link()
    _, facts = link.send(
        C2B, "SUBSCRIBE", topic=TOPIC, subscription="s", consumer_id=4, request_id=1, subType=0
    )
    assert [said(f) for f in facts] == [
        (SchemaStep.DECLARED, "SUBSCRIBE", TOPIC, EntityKind.CONSUMER, 4, None, None)
    ]
    assert link.send(B2C, "SUCCESS", request_id=1)[1] == []  # a subscription: no schema fact
    assert link.send(C2B, "GET_SCHEMA", request_id=2, topic=TOPIC, schema_version=v(6))[1] == []
    _, facts = link.send(B2C, "GET_SCHEMA_RESPONSE", request_id=2, schema=AVRO)
    # the version the request asked for, the response telling none
    assert [said(f) for f in facts] == [
        (
            SchemaStep.FETCHED,
            "GET_SCHEMA_RESPONSE",
            TOPIC,
            None,
            None,
            (4, AVRO["schema_data"]),
            v(6),
        )
    ]
    _, facts = link.send(C2B, "GET_OR_CREATE_SCHEMA", request_id=3, topic=TOPIC, schema=INT32)
    assert [said(f) for f in facts] == [
        (SchemaStep.DECLARED, "GET_OR_CREATE_SCHEMA", TOPIC, None, None, (8, b""), None)
    ]
    _, facts = link.send(B2C, "GET_OR_CREATE_SCHEMA_RESPONSE", request_id=3, schema_version=v(7))
    assert [said(f) for f in facts] == [
        (SchemaStep.ACCEPTED, "GET_OR_CREATE_SCHEMA_RESPONSE", TOPIC, None, None, (8, b""), v(7))
    ]


def test_refusals_carry_the_brokers_code() -> None:
    link = Link()
    link.send(C2B, "GET_OR_CREATE_SCHEMA", request_id=1, topic=TOPIC, schema=INT32)
    _, facts = link.send(
        B2C,
        "GET_OR_CREATE_SCHEMA_RESPONSE",
        request_id=1,
        error_code=INCOMPATIBLE,
        error_message="incompatible",
    )
    assert [(f.step, f.error_code, f.error_message, f.version) for f in facts] == [
        (SchemaStep.REFUSED, "IncompatibleSchema", "incompatible", None)
    ]
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=2, request_id=2, schema=AVRO)
    _, facts = link.send(B2C, "ERROR", request_id=2, error=INCOMPATIBLE, message="no")
    assert [(f.step, f.command, f.kind, f.entity_id, f.error_code) for f in facts] == [
        (SchemaStep.REFUSED, "ERROR", EntityKind.PRODUCER, 2, "IncompatibleSchema")
    ]
    link.send(C2B, "GET_SCHEMA", request_id=3, topic=TOPIC)
    _, facts = link.send(B2C, "GET_SCHEMA_RESPONSE", request_id=3, error_code=11)  # TopicNotFound
    assert [(f.step, f.error_code) for f in facts] == [(SchemaStep.REFUSED, "TopicNotFound")]
    # a producer without schema failing for another reason: no schema fact
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=3, request_id=4)
    assert link.send(B2C, "ERROR", request_id=4, error=16, message="busy")[1] == []  # ProducerBusy


def test_no_schema_fact_unless_wanted() -> None:
    link = Link(schemas=False)
    assert (
        link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=3, request_id=1, schema=AVRO)[1] == []
    )
    assert (
        link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=v(1))[1]
        == []
    )
    assert link.state.schemas.told is None


def test_auth_exchanges_and_keep_alives_are_counted() -> None:
    link = Link(schemas=False)
    link.send(
        C2B,
        "CONNECT",
        client_version="c",
        protocol_version=21,
        feature_flags={"supports_auth_refresh": True},
    )
    link.send(B2C, "CONNECTED", server_version="s", protocol_version=21)
    link.send(B2C, "AUTH_CHALLENGE", server_version="s", protocol_version=21)
    link.send(C2B, "AUTH_RESPONSE", client_version="c", protocol_version=21)
    link.send(B2C, "AUTH_CHALLENGE", server_version="s", protocol_version=21)
    link.send(C2B, "PING")
    link.send(B2C, "PONG")
    link.send(B2C, "PING")
    link.state.close()
    info = link.state.info
    assert (info.auth_challenges, info.auth_responses, info.pings, info.pongs) == (2, 1, 2, 1)
    assert info.supports("supports_auth_refresh")
    assert not info.supports("supports_topic_watchers")
