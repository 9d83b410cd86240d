"""Schema tracking from the wire: which schema each message was written with. Sans-IO.

Input: the schema facts of every connection, in capture order (`learn`: dissector.facts'
`SchemaFact`, declared / accepted / fetched / refused: the facts layer pairs the requests
with their answers).
Output: per topic, every schema seen (`history`: command, version when known, schema) and
its versions (`versions`); for a message, `resolve` -> `Resolution` (the schema, how it was
chosen, and the `value_schema` label or the reason there is none).
Rule: a message is decoded with the schema of its metadata's `schema_version` when the
capture taught that version for its topic (PRODUCER_SUCCESS after a PRODUCER with a schema,
GET_OR_CREATE_SCHEMA_RESPONSE after its request, GET_SCHEMA_RESPONSE); else with the schema
its producer declared (SEND), or its consumer (MESSAGE) when the message names no version
(a reader's schema need not be the writer's); else, when the message names no version,
BYTES, labelled "BYTES (not declared)" (a topic without a schema is a BYTES topic in
Pulsar); else (a version the capture did not teach, an unknown producer) not at all, and
the reason says which.
A declared AUTO_CONSUME is resolved to the topic's real schema (the version's, else the
newest version seen). Versions belong to a topic, so what one connection learns serves
every connection; partitions share their topic's schemas ("-partition-N" is dropped).
Every map is bounded (MAX_*), oldest entries going first; `dropped` counts what went. The
maps name each distinct schema by one shared `Held` (held.py), whose bytes are bounded
(MAX_HELD_SCHEMA_BYTES, least recently learnt or used first out): a forgotten schema leaves
its stub, and its messages say so in `value_error`. What only this tracker needs stays here:
the schema each producer and consumer declared, by (connection, id), as a `Held`.
Observers (optional, for the anomaly rows of faults.py): `on_schema(topic, version, schema)`
once a schema is learnt for good (SUBSCRIBE, GET_SCHEMA_RESPONSE, and PRODUCER /
GET_OR_CREATE_SCHEMA at the broker's answer, which gives the version), `on_drop(bound,
what)` for each entry whose loss changes what decodes (a version, a topic's schema, a
producer, a consumer, a schema's bytes); a history entry going is only counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from dissector.events import EntityKind, SchemaFact, SchemaStep
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.values.held import Held, HeldSchemas
from dissector.values.model import SchemaInfo, make_schema, schema_info, version_label

#: Topics whose schemas are kept: a broker's own limit is in the tens of thousands; a
#: capture's schema traffic names far fewer.
MAX_TOPICS = 10_000
#: Schemas (versions and declared ones) kept per topic: a topic's schema evolves a few times;
#: 64 covers a long history while a flood of GET_OR_CREATE_SCHEMA stays bounded.
MAX_SCHEMAS_PER_TOPIC = 64
#: Producers and consumers remembered (per connection ids): a client holds thousands at most.
MAX_HANDLES = 65_536

_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")

SEND = COMMAND_TYPES["SEND"]
MESSAGE = COMMAND_TYPES["MESSAGE"]

BY_VERSION = "version"
BY_DECLARED = "declared"
#: Neither a version nor a declared schema: what Pulsar makes of it, BYTES (a producer of
#: plain bytes sends no schema: the Java client leaves Schema.BYTES out of its PRODUCER).
NOT_DECLARED = "not declared"
NOT_DECLARED_LABEL = "BYTES (not declared)"
BYTES = make_schema("BYTES")


def topic_key(topic: str) -> str:
    """The topic whose schema registry serves `topic` (a partition's is its topic's)."""
    return _PARTITION_SUFFIX.sub("", topic)


@dataclass(frozen=True, slots=True, kw_only=True)
class SeenSchema:
    """One schema as the capture showed it: the command carrying it, its version if known."""

    command: str
    version: bytes | None
    schema: SchemaInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """Which schema decodes a message: `schema` None means none, `label` says why."""

    schema: SchemaInfo | None
    how: str  # BY_VERSION, BY_DECLARED, NOT_DECLARED (BYTES), or "" when there is no schema
    version: bytes | None
    label: str  # value_schema text ("AVRO v3") or, with no schema, the reason


@dataclass(slots=True)
class _Topic:
    versions: dict[bytes, Held]
    history: list[tuple[str, bytes | None, Held]]  # (command, version, schema)


#: on_schema(topic, version or None, schema) and on_drop(bound name, what went)
SchemaObserver = Callable[[str, bytes | None, SchemaInfo], None]
DropObserver = Callable[[str, str], None]


class SchemaTracker:
    """Schemas per topic and per producer/consumer, learned from the commands fed in."""

    def __init__(
        self,
        *,
        on_schema: SchemaObserver | None = None,
        on_drop: DropObserver | None = None,
    ) -> None:
        self._on_schema = on_schema
        self._on_drop = on_drop
        self._topics: dict[str, _Topic] = {}
        # (conn, producer_id) / (conn, consumer_id) -> (topic, declared schema or None)
        self._producers: dict[tuple[Hashable, int], tuple[str, Held | None]] = {}
        self._consumers: dict[tuple[Hashable, int], tuple[str, Held | None]] = {}
        self.held = HeldSchemas(on_forget=self._forgot)
        self.definition_bytes = 0  # definitions read from the facts learnt (ValueDecoder's budget)
        self.dropped: dict[str, int] = {}

    # -- input ---------------------------------------------------------------------------

    def learn(self, fact: SchemaFact) -> None:
        """Learn from one schema fact (a REFUSED one teaches nothing)."""
        step, topic = fact.step, fact.topic
        if step is SchemaStep.DECLARED:
            schema = self._hold(fact.schema, topic)
            if fact.kind is not None and fact.entity_id is not None:
                consumer = fact.kind is EntityKind.CONSUMER
                table = self._consumers if consumer else self._producers
                self._bounded_put(table, (fact.conn_id, fact.entity_id), (topic, schema))
            if schema is not None:
                self._learn(topic, fact.command, None, schema)
                if fact.kind is EntityKind.CONSUMER:  # a reader's schema: settled as declared
                    self._settled(topic, None, schema.schema)
        elif step is SchemaStep.ACCEPTED:
            if fact.schema is None:
                return
            info = schema_info(fact.schema)  # the request's: held since it was DECLARED
            held = self.held.named(info, f"topic {topic_key(topic)}: {schema_label(info, None)}")
            if fact.version is not None:
                self._learn(topic, fact.command, fact.version, held)
            self._settled(topic, fact.version or None, held.schema)
        elif step is SchemaStep.FETCHED:
            schema = self._hold(fact.schema, topic, fact.version)
            assert schema is not None  # a fetched fact has one
            self._learn(topic, fact.command, fact.version, schema)
            self._settled(topic, fact.version or None, schema.schema)

    # -- output --------------------------------------------------------------------------

    def versions(self, topic: str) -> dict[bytes, SchemaInfo]:
        t = self._topics.get(topic_key(topic))
        return {v: held.schema for v, held in t.versions.items()} if t else {}

    def history(self, topic: str) -> list[SeenSchema]:
        t = self._topics.get(topic_key(topic))
        return (
            [SeenSchema(command=c, version=v, schema=h.schema) for c, v, h in t.history]
            if t
            else []
        )

    def topic_of(self, conn: Hashable, ctype: int, handle_id: int) -> str | None:
        """The topic of a SEND's producer or a MESSAGE's consumer, if its command was seen."""
        known = self._handle(conn, ctype, handle_id)
        return known[0] if known else None

    def resolve(
        self, conn: Hashable, ctype: int, handle_id: int, schema_version: bytes | None
    ) -> Resolution:
        """The schema of a SEND (producer_id) or MESSAGE (consumer_id) on connection conn."""
        known = self._handle(conn, ctype, handle_id)
        if known is None:
            side = "producer" if ctype == SEND else "consumer"
            return Resolution(
                schema=None,
                how="",
                version=schema_version,
                label=f"no schema: the {side} was not seen being created",
            )
        topic, declared = known
        schema = None if declared is None else self.held.touch(declared)
        return self.resolve_topic(topic, schema_version, schema, writer=ctype == SEND)

    def resolve_topic(
        self,
        topic: str,
        schema_version: bytes | None,
        declared: SchemaInfo | None,
        *,
        writer: bool = False,
    ) -> Resolution:
        """The rule: the version's schema, else the declared one, else BYTES when the message
        names no version (Pulsar's schema of a topic without one), else none (with why).

        A producer's declared schema (writer=True) is what its messages were written with,
        whatever their version. A consumer's is what it reads as, which may not be what the
        message was written with: it serves only messages without a schema_version (an
        AUTO_CONSUME consumer's is the topic's newest version seen).
        """
        t = self._topics.get(topic_key(topic))
        if schema_version and t is not None:
            by_version = t.versions.get(schema_version)
            if by_version is not None:
                return _found(self.held.touch(by_version), BY_VERSION, schema_version)
        if declared is not None and not writer and schema_version:
            declared = None  # a reader's schema is not the writer's of an unknown version
        if declared is not None and declared.type == "AUTO_CONSUME":
            if t is not None and t.versions:
                newest = max(t.versions, key=_version_order)
                return _found(self.held.touch(t.versions[newest]), BY_VERSION, newest)
            if not schema_version:  # it reads by the topic's schema, which was not seen
                why = "no schema: AUTO_CONSUME and no schema of the topic seen"
                return Resolution(schema=None, how="", version=None, label=why)
            declared = None
        if declared is not None:
            return _found(declared, BY_DECLARED, schema_version)
        if schema_version:
            why = f"no schema: version {version_label(schema_version)} not seen for the topic"
            return Resolution(schema=None, how="", version=schema_version, label=why)
        return Resolution(schema=BYTES, how=NOT_DECLARED, version=None, label=NOT_DECLARED_LABEL)

    # -- handlers ------------------------------------------------------------------------

    def _handle(self, conn: Hashable, ctype: int, handle_id: int) -> tuple[str, Held | None] | None:
        table = self._producers if ctype == SEND else self._consumers
        return table.get((conn, handle_id))

    # -- state ---------------------------------------------------------------------------

    def _hold(self, wire: Any, topic: str, version: bytes | None = None) -> Held | None:
        """The one Held of a fact's schema (None without one), the most recently used; its
        definition counts in `definition_bytes`."""
        if wire is None:
            return None
        schema = schema_info(wire)
        self.definition_bytes += len(schema.definition)
        return self.held.hold(schema, f"topic {topic_key(topic)}: {schema_label(schema, version)}")

    def _forgot(self, label: str) -> None:
        self._drop("MAX_HELD_SCHEMA_BYTES", label)

    def _learn(self, topic: str, command: str, version: bytes | None, schema: Held) -> None:
        key = topic_key(topic)
        t = self._topics.get(key)
        if t is None:
            if len(self._topics) >= MAX_TOPICS:
                label = schema_label(schema.schema, version)
                self._drop("MAX_TOPICS", f"topic {key}: its {label} schema")
                return
            t = self._topics[key] = _Topic(versions={}, history=[])
        seen = (command, version, schema)
        if seen not in t.history:
            t.history.append(seen)
            if len(t.history) > MAX_SCHEMAS_PER_TOPIC:
                del t.history[0]
                self._drop("MAX_SCHEMAS_PER_TOPIC")  # counted: decoding does not use it
        if version:
            schema.label = f"topic {key}: {schema_label(schema.schema, version)}"
            t.versions.pop(version, None)  # re-learnt: now the newest
            t.versions[version] = schema
            if len(t.versions) > MAX_SCHEMAS_PER_TOPIC:
                old = next(iter(t.versions))
                gone = t.versions.pop(old)
                label = schema_label(gone.schema, old)
                self._drop("MAX_SCHEMAS_PER_TOPIC", f"topic {key}: {label}")

    def _bounded_put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        table.pop(key, None)
        table[key] = value
        if len(table) > MAX_HANDLES:
            (conn, number), old = next(iter(table.items()))
            del table[(conn, number)]
            side = "producer" if table is self._producers else "consumer"
            self._drop("MAX_HANDLES", f"topic {old[0]}: {side} {number} of connection {conn}")

    def _settled(self, topic: str, version: bytes | None, schema: SchemaInfo) -> None:
        """A schema learnt for good, with its version when the capture gave one."""
        if self._on_schema is not None:
            self._on_schema(topic_key(topic), version, schema)

    def _drop(self, bound: str, what: str | None = None) -> None:
        self.dropped[bound] = self.dropped.get(bound, 0) + 1
        if what is not None and self._on_drop is not None:
            self._on_drop(bound, what)


def schema_label(schema: SchemaInfo, version: bytes | None) -> str:
    """ "AVRO v3", or "AVRO (declared)" without a version: as the value_schema column."""
    if version:
        return f"{schema.type} v{version_label(version)}"
    return f"{schema.type} (declared)"


def _version_order(version: bytes) -> tuple[int, bytes]:
    return (len(version), version)  # 8-byte big-endian versions: numeric order


def _found(schema: SchemaInfo, how: str, version: bytes | None) -> Resolution:
    label = schema_label(schema, version if how == BY_VERSION else None)
    return Resolution(schema=schema, how=how, version=version, label=label)
