"""The closed vocabularies the records use: one StrEnum each.

Input: nothing. Output: the enums (directions, checksum states, close reasons, preamble and
message kinds, trace formats, outcomes, entity kinds, states and life steps, schema steps).
Rule: a value a row can hold is a member here, compared as the enum, never as its string
(tests/test_vocabularies.py).
"""

from __future__ import annotations

from enum import StrEnum


class Direction(StrEnum):
    CLIENT_TO_BROKER = "client_to_broker"
    BROKER_TO_CLIENT = "broker_to_client"


class Checksum(StrEnum):
    """CRC32C status of a payload frame (None on simple commands)."""

    VALID = "valid"
    INVALID = "invalid"
    ABSENT = "absent"  # no magic 0x0e01: brokers' MESSAGE frames, clients before protocol v6
    UNKNOWN = "unknown"  # bytes of the frame are missing from the capture


class CloseReason(StrEnum):
    """How a connection ended."""

    FIN = "fin"
    RST = "rst"
    CAPTURE_END = "capture_end"  # still open when the capture ended
    PORT_REUSE = "port_reuse"  # a new SYN on the same ports started another connection
    EVICTED = "evicted"  # too many open connections: the least recently active was closed
    TIMEOUT = "timeout"  # no packet for longer than the idle timeout


class PreambleKind(StrEnum):
    """What a client stream starts with."""

    PULSAR = "pulsar"
    TLS = "tls"
    PROXY = "proxy"  # an HAProxy PROXY header (v1 or v2), then Pulsar
    PROXY_INVALID = "proxy_invalid"


class MessageKind(StrEnum):
    PRODUCED = "produced"  # SEND
    DELIVERED = "delivered"  # MESSAGE


class TraceFormat(StrEnum):
    """Where a message's trace context came from (dissector.pulsar.trace_context), in the
    order of precedence when a message carries several."""

    W3C = "w3c"  # traceparent (and tracestate)
    B3 = "b3"  # the b3 single header
    B3_MULTI = "b3multi"  # X-B3-TraceId, X-B3-SpanId, ...
    JAEGER = "jaeger"  # uber-trace-id
    SW8 = "sw8"  # SkyWalking


class Outcome(StrEnum):
    """How a request/response pair ended."""

    SUCCESS = "success"
    ERROR = "error"
    UNANSWERED = "unanswered"
    UNMATCHED = "unmatched"  # a response whose request is not in the capture
    REDELIVERED = "redelivered"


class EntityKind(StrEnum):
    PRODUCER = "producer"
    CONSUMER = "consumer"


class SchemaStep(StrEnum):
    """What a schema fact says (dissector.facts.schemas)."""

    DECLARED = "declared"  # a client's PRODUCER / SUBSCRIBE / GET_OR_CREATE_SCHEMA (schema or none)
    ACCEPTED = "accepted"  # the broker took the declared schema: its version, when told
    FETCHED = "fetched"  # GET_SCHEMA answered with a schema
    REFUSED = "refused"  # a schema request failed, or an entity declaring one (error_code)


class EntityState(StrEnum):
    PENDING = "pending"
    CREATED = "created"
    FAILED = "failed"
    CLOSED_BY_CLIENT = "closed_by_client"
    CLOSED_BY_BROKER = "closed_by_broker"


class LifeStep(StrEnum):
    """A step of a producer's or consumer's life (a `Lifecycle` fact: dissector.facts.lifecycles);
    the first five are the entity's states (`EntityState`) it enters."""

    DECLARED = "declared"  # the client's PRODUCER / SUBSCRIBE (the entity pending)
    CREATED = "created"  # answered PRODUCER_SUCCESS (ready) / SUCCESS
    FAILED = "failed"  # answered ERROR
    CLOSED_BY_CLIENT = "closed_by_client"  # CLOSE_PRODUCER / CLOSE_CONSUMER from the client
    CLOSED_BY_BROKER = "closed_by_broker"  # the same from the broker (request_id -1)
    MIGRATED = "migrated"  # TOPIC_MIGRATED: the broker sends it to another broker
