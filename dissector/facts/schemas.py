"""Schemas declared, accepted, fetched or refused on one connection: its schema facts.

Input: from the machine's table (`table.TRANSITIONS`), the commands declaring a schema
(PRODUCER, SUBSCRIBE, GET_OR_CREATE_SCHEMA: `declared`); from `requests.py`, each answer
with the request it answers (`answered`), and a PRODUCER_SUCCESS that is not ready yet with
the request it will answer (`producer_answered`).
Output: `SchemaFact`s (dissector.events), in wire order, in `told`, taken by their consumer
(`take`; the values' schema tracker, and when `published` the events after their frame: the
findings' schema rule); none are made unless wanted (`told` None).
Rules, per topic as the client named it:
- DECLARED: every PRODUCER and SUBSCRIBE (their schema, or None: a producer of plain bytes
  declares none), and every GET_OR_CREATE_SCHEMA.
- ACCEPTED: PRODUCER_SUCCESS answering a PRODUCER (ready, or not ready but telling the
  version) and GET_OR_CREATE_SCHEMA_RESPONSE with a schema_version: the request's schema and
  the version told (None when PRODUCER_SUCCESS tells none); made when the request declared a
  schema or the answer tells a version.
- FETCHED: GET_SCHEMA_RESPONSE with a schema: its version, else the one the request asked for.
- REFUSED: an answer with an error to GET_SCHEMA or GET_OR_CREATE_SCHEMA (or a
  GET_OR_CREATE_SCHEMA_RESPONSE telling no version), and an ERROR answering a PRODUCER or
  SUBSCRIBE that declared a schema or failed on IncompatibleSchema.
"""

from __future__ import annotations

from typing import Any

from dissector.events import EntityKind, Frame, SchemaFact, SchemaStep
from dissector.facts.pairs import error_of
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
_PRODUCER, _SUBSCRIBE = T["PRODUCER"], T["SUBSCRIBE"]
_GET_SCHEMA, _GET_OR_CREATE = T["GET_SCHEMA"], T["GET_OR_CREATE_SCHEMA"]
_PRODUCER_SUCCESS, _ERROR = T["PRODUCER_SUCCESS"], T["ERROR"]
_GET_SCHEMA_RESPONSE = T["GET_SCHEMA_RESPONSE"]
_GET_OR_CREATE_RESPONSE = T["GET_OR_CREATE_SCHEMA_RESPONSE"]
#: The commands that declare a schema (the table adds `on_declared` to their transitions).
DECLARING = frozenset({_PRODUCER, _SUBSCRIBE, _GET_OR_CREATE})
#: The requests whose answers make schema facts.
_ASKING = frozenset({_PRODUCER, _SUBSCRIBE, _GET_SCHEMA, _GET_OR_CREATE})
_INCOMPATIBLE = "IncompatibleSchema"


def _schema(body: Any) -> Any:
    """The body's schema (None: none, or a command without one: GET_SCHEMA answered by an
    ERROR asks for a version, it declares no schema)."""
    if "schema" not in body.DESCRIPTOR.fields_by_name:
        return None
    return body.schema if body.HasField("schema") else None


def _version(body: Any) -> bytes | None:
    return bytes(body.schema_version) if body.HasField("schema_version") else None


def _entity(ctype: int, body: Any) -> tuple[EntityKind | None, int | None]:
    if ctype == _PRODUCER:
        return EntityKind.PRODUCER, body.producer_id
    if ctype == _SUBSCRIBE:
        return EntityKind.CONSUMER, body.consumer_id
    return None, None


class SchemaFacts:
    """The schema facts of one connection, as they are made; see the module docstring."""

    __slots__ = ("conn_id", "published", "told")

    def __init__(self, conn_id: int, wanted: bool) -> None:
        self.conn_id = conn_id
        self.told: list[SchemaFact] | None = [] if wanted else None
        self.published = False  # the facts also go out as events (the pipeline's `schemas`)

    def take(self) -> list[SchemaFact]:
        """The facts made since the last call (an empty list when none is wanted)."""
        told = self.told
        if not told:
            return []
        self.told = []
        return told

    def declared(self, frame: Frame, body: Any) -> None:
        """A PRODUCER, SUBSCRIBE or GET_OR_CREATE_SCHEMA: DECLARED."""
        if self.told is not None:
            self._tell(SchemaStep.DECLARED, frame, frame, _schema(body), None, None, None)

    def answered(self, request: Frame | None, response: Frame) -> None:
        """A response paired with its request (requests.py): the facts it makes."""
        if self.told is None or request is None or request.command_type not in _ASKING:
            return
        asked, body, rtype = request.body, response.body, response.command_type
        if asked is None or body is None:
            return
        qtype = request.command_type
        if rtype == _ERROR:
            code, message = error_of(body, rtype)
            if qtype in (_GET_SCHEMA, _GET_OR_CREATE) or (
                _schema(asked) is not None or code == _INCOMPATIBLE
            ):
                self._tell(
                    SchemaStep.REFUSED, request, response, _schema(asked), None, code, message
                )
        elif qtype == _PRODUCER and rtype == _PRODUCER_SUCCESS:
            self.producer_answered(request, response)
        elif qtype == _GET_SCHEMA and rtype == _GET_SCHEMA_RESPONSE:
            schema = _schema(body)
            if schema is None:
                code, message = error_of(body, rtype)
                self._tell(
                    SchemaStep.REFUSED, request, response, None, _version(asked), code, message
                )
            else:
                version = _version(body)
                version = _version(asked) if version is None else version
                self._tell(SchemaStep.FETCHED, request, response, schema, version, None, None)
        elif qtype == _GET_OR_CREATE and rtype == _GET_OR_CREATE_RESPONSE:
            version = _version(body)
            if version is None or body.HasField("error_code"):
                code, message = error_of(body, rtype)
                self._tell(
                    SchemaStep.REFUSED, request, response, _schema(asked), None, code, message
                )
            else:
                self._tell(
                    SchemaStep.ACCEPTED, request, response, _schema(asked), version, None, None
                )

    def producer_answered(self, request: Frame | None, response: Frame) -> None:
        """A PRODUCER_SUCCESS for `request` (a PRODUCER; not ready yet, or ready): ACCEPTED
        when the request declared a schema or the answer tells a version (a not-ready one
        telling none says nothing yet)."""
        if self.told is None or request is None or request.command_type != _PRODUCER:
            return
        body = response.body
        version = _version(body)
        if version is None and not body.producer_ready:
            return
        schema = _schema(request.body)
        if schema is not None or version is not None:
            self._tell(SchemaStep.ACCEPTED, request, response, schema, version, None, None)

    def _tell(
        self,
        step: SchemaStep,
        request: Frame,
        frame: Frame,
        schema: Any,
        version: bytes | None,
        code: str | None,
        message: str | None,
    ) -> None:
        assert self.told is not None
        kind, entity_id = _entity(request.command_type, request.body)
        self.told.append(
            SchemaFact(
                self.conn_id,
                step,
                frame.command_name,
                request.body.topic,
                kind,
                entity_id,
                schema,
                version,
                code,
                message,
                frame,
            )
        )
