"""schema.incompatible: PRODUCER, SUBSCRIBE or GET_OR_CREATE_SCHEMA refused with
IncompatibleSchema, and what differs between the schema offered and the topic's.

Input: the completion facts (`on_pair`: a request answered with error_code IncompatibleSchema,
ServerError 18: an ERROR answering a PRODUCER or SUBSCRIBE, a GET_OR_CREATE_SCHEMA_RESPONSE
with that error_code); with values asked for (the read plan's `schemas`: `diagnose --values`),
the schema facts of every connection (`on_fact`: dissector.facts.schemas' SchemaFact), from
which the schemas each topic accepted (PRODUCER_SUCCESS or GET_OR_CREATE_SCHEMA_RESPONSE after
a request declaring one) or served (GET_SCHEMA_RESPONSE) are known; each connection's end
(`close`).
Output: at a connection's end, one finding per topic its requests were refused on: the count
of refusals (value, unit "refusals"), the producers or consumers refused (entity), the
broker's message, the ERROR packets as evidence (and the packet that showed the topic's
schema, counted 0), and the schemas: the one offered (the latest refusal's: type and name)
and, with values, the topic's as the capture saw it (its newest version, from any
connection), both with their fields, and what differs (schema_shapes.differences).
Rules:
- A refusal proves itself: no history is needed (a connection that starts mid-stream has no
  refusal only if its request was missed: its answer then pairs with nothing).
- Without schema facts (values not asked for) the topic's schema is not compared, and the
  summary says how to compare it; with them, a topic whose schema the capture never showed
  is said to be so. Partitions share their topic's schema ("-partition-N" is dropped).
- Bounded: the topics refused per connection (MAX_TRACKED), the entities a row names
  (MAX_NAMES), the topics whose schema is known (MAX_KEYS, a shape each: no definition kept).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from dissector.diagnose.schema_shapes import (
    Shape,
    describe,
    differences,
    shape,
    version_label,
    version_order,
)
from dissector.diagnose.state import MAX_TRACKED, ConnState, Context, Evidence, bounded, finding
from dissector.events import Pair, SchemaFact, SchemaStep
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
#: ServerError 18, as the completion facts name it.
INCOMPATIBLE = "IncompatibleSchema"
_PRODUCER, _SUBSCRIBE = T["PRODUCER"], T["SUBSCRIBE"]
_REFUSABLE = frozenset({_PRODUCER, _SUBSCRIBE, T["GET_OR_CREATE_SCHEMA"]})
#: Producers or consumers a row names (its `entity`); the count says how many refusals.
MAX_NAMES = 5
#: Characters of the broker's message a summary quotes.
MAX_MESSAGE = 200
_PARTITION = re.compile(r"-partition-\d+$")


def topic_key(topic: str) -> str:
    """The topic whose schema serves `topic` (a partition's is its topic's)."""
    return _PARTITION.sub("", topic)


@dataclass(slots=True)
class Refused:
    """The IncompatibleSchema refusals of one topic on one connection."""

    evidence: Evidence = field(default_factory=Evidence)
    commands: list[str] = field(default_factory=list)  # the requests refused, each once
    names: list[str] = field(default_factory=list)  # the producers / consumers refused
    offered: Shape | None = None  # the latest refusal's schema
    message: str = ""  # the broker's latest message


@dataclass(frozen=True, slots=True)
class Known:
    """A topic's schema as the capture showed it (an accepted or served version)."""

    shape: Shape
    version: bytes | None
    command: str  # PRODUCER_SUCCESS, GET_SCHEMA_RESPONSE, GET_OR_CREATE_SCHEMA_RESPONSE
    packet: int
    ts: int


def _label(request: Any, ctype: int) -> str | None:
    body = request.body
    if ctype == _PRODUCER:
        name = body.producer_name if body.HasField("producer_name") else ""
        return f"producer {body.producer_id}" + (f" ({name})" if name else "")
    if ctype == _SUBSCRIBE:
        return f"consumer {body.consumer_id} (sub {body.subscription})"
    return None


class SchemaRule:
    """schema.incompatible across the connections of one capture; see the module docstring."""

    __slots__ = ("conns", "facts", "topics")

    def __init__(self) -> None:
        #: conn_id -> topic -> its refusals (taken out when the connection ends)
        self.conns: dict[int, OrderedDict[str, Refused]] = {}
        #: topic (partitions as their topic) -> its newest schema seen
        self.topics: dict[str, Known] = {}
        self.facts = False  # schema facts come: values were asked for

    def on_pair(self, pair: Pair) -> None:
        """A completion fact: kept when it is an IncompatibleSchema refusal."""
        request, response = pair.request, pair.response
        if pair.error_code != INCOMPATIBLE or request is None or response is None:
            return
        ctype = request.command_type
        body = request.body
        if ctype not in _REFUSABLE or body is None:
            return
        topics = self.conns.setdefault(pair.conn_id, OrderedDict())
        topic = body.topic
        refused = topics.get(topic)
        if refused is None:
            refused = topics[topic] = Refused()
            if len(topics) > MAX_TRACKED:
                topics.popitem(last=False)
        refused.evidence.add(response)
        if request.command_name not in refused.commands:
            refused.commands.append(request.command_name)
        label = _label(request, ctype)
        if label is not None and label not in refused.names and len(refused.names) < MAX_NAMES:
            refused.names.append(label)
        refused.offered = shape(body.schema if body.HasField("schema") else None)
        said = pair.error_message or ""
        refused.message = said if len(said) <= MAX_MESSAGE else said[:MAX_MESSAGE] + " ..."

    def on_fact(self, fact: SchemaFact) -> None:
        """A schema fact (values asked for): a topic's schema accepted or served is known."""
        self.facts = True
        if fact.schema is None or fact.step not in (SchemaStep.ACCEPTED, SchemaStep.FETCHED):
            return
        key = topic_key(fact.topic)
        seen = Known(shape(fact.schema), fact.version, fact.command, fact.frame.last_packet,
                     fact.frame.last_ts)  # fmt: skip
        old = self.topics.get(key)
        if old is None or version_order(seen.version) >= version_order(old.version):
            self.topics.pop(key, None)  # the newest goes last: the oldest is forgotten first
            bounded(self.topics, key, lambda: seen)

    def close(self, ctx: Context, conn: ConnState) -> None:
        """The connection ended: a row per topic its requests were refused on."""
        topics = self.conns.pop(conn.conn_id, None)
        if not topics:
            return
        for topic, refused in topics.items():
            known = self.topics.get(topic_key(topic)) if self.facts else None
            ev = Evidence()
            if known is not None:
                ev.add_at(known.packet, known.ts, 0)
            ev.merge(refused.evidence)
            n = refused.evidence.count
            ctx.emit(
                finding(
                    FindingCode.SCHEMA_INCOMPATIBLE,
                    ev,
                    conn=conn,
                    ts=refused.evidence.last_ts,
                    topic=topic,
                    entity=", ".join(refused.names) or None,
                    summary=self._summary(refused, known, n),
                    value=n,
                    unit="refusals",
                    count=n,
                )
            )

    def _summary(self, refused: Refused, known: Known | None, n: int) -> str:
        times = "once" if n == 1 else f"{n} times"
        what = " and ".join(refused.commands)
        text = f"{what} refused with IncompatibleSchema ({times})"
        offered = refused.offered
        assert offered is not None
        text += f": offered {describe(offered, fields=known is not None)}"
        if not self.facts:
            text += "; the topic's schema not compared (diagnose --values compares it)"
        elif known is None:
            text += "; the topic's schema is not in the capture"
        else:
            version = version_label(known.version)
            theirs = describe(known.shape, fields=True)
            text += f"; the topic's {theirs} (version {version}, {known.command})"
            diff = differences(offered, known.shape)
            text += (
                ": " + ", ".join(diff)
                if diff
                else ": no difference in type, name or fields (compare the topic's older "
                "versions and the compatibility strategy)"
            )
        if refused.message:
            text += f"; the broker said: {refused.message}"
        return text
