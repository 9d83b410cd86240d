"""The three value columns of one message row, from the stage's tracker and decoder.

Input: the schema facts of each frame (`learn`: dissector.facts makes them), then per
message row (`cells`): its connection, command (SEND/MESSAGE) and producer/consumer id,
topic, schema_version, the application payload (after decompression, batch split and chunk
join; None when null or not decoded) and its key fields.
Output: `ValueCells(value, value_schema, value_error)`: the JSON text, the schema used
("AVRO v3", "JSON (declared)"), and why there is no value (no schema, a payload that does not
decode, encrypted, incomplete); `redact_fields` applied to the value. `learn` also gives
the anomaly rows of the schemas its frame taught (faults.py: one that does not parse,
one too large, entries the tracker forgot).
Rule: this is the one object the messages and journeys tables hold when values are asked for
(docs/values.md); nothing here runs otherwise. The schema is resolved when the message is
seen, with what the capture taught until then. `bytes_text` gives the text views the UTF-8
text of a BYTES value (declared or not), when its bytes are valid UTF-8.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from dissector.events import Anomaly, AppMessage, Frame, MessageKind, SchemaFact
from dissector.values.decode import KeyFields, ValueDecoder
from dissector.values.faults import SchemaFaults
from dissector.values.redact import Path
from dissector.values.schemas import MESSAGE, SEND, SchemaTracker


@dataclass(frozen=True, slots=True)
class ValueCells:
    """The value, value_schema and value_error columns of one message row."""

    value: str | None
    value_schema: str | None
    value_error: str | None


class Values:
    """Schemas learned from the commands, and the value cells of each message row."""

    def __init__(self, *, redact_fields: Sequence[Path] = ()) -> None:
        self.decoder = ValueDecoder()
        self.faults = SchemaFaults(self.decoder)
        self.schemas = SchemaTracker(on_schema=self.faults.schema, on_drop=self.faults.dropped)
        self.decoder.schema_bytes = self._schema_bytes
        self.redact_fields = tuple(redact_fields)

    def _schema_bytes(self) -> int:
        return self.schemas.definition_bytes

    def learn(self, facts: Sequence[SchemaFact], frame: Frame) -> list[Anomaly]:
        """The schema facts `frame` made (dissector.facts): learn them; the anomaly rows of
        what they taught."""
        for fact in facts:
            self.schemas.learn(fact)
        return self.faults.take(frame) if self.faults.pending else []

    def row_cells(self, row: AppMessage, payload: bytes | None) -> ValueCells:
        """The cells of a messages-table row (pulsar/messages.py), its application payload
        given apart (rows keep none); `row.problem` says why a missing payload is missing."""
        produced = row.kind is MessageKind.PRODUCED
        return self.cells(
            conn=row.conn_id,
            ctype=SEND if produced else MESSAGE,
            handle_id=row.producer_id if produced else row.consumer_id,
            topic=row.topic,
            schema_version=row.schema_version,
            payload=payload,
            key=KeyFields(
                partition_key=row.key,
                partition_key_b64_encoded=row.key_base64,
                null_partition_key=row.null_key,
            ),
            null_value=row.null_value,
            undecoded=(row.problem or "incomplete") if payload is None else None,
        )

    def cells(
        self,
        *,
        conn: Hashable,
        ctype: int,
        handle_id: int | None,
        topic: str | None,
        schema_version: bytes | None,
        payload: bytes | None,
        key: KeyFields,
        null_value: bool = False,
        undecoded: str | None = None,
    ) -> ValueCells:
        """The cells of one message; `undecoded` names why its payload is missing (an
        anomaly code: encrypted, incomplete chunk, decompression failure)."""
        if handle_id is not None and self.schemas.topic_of(conn, ctype, handle_id) is not None:
            res = self.schemas.resolve(conn, ctype, handle_id, schema_version)
        elif topic is not None:  # the producer/consumer was created before the capture
            res = self.schemas.resolve_topic(topic, schema_version, None)
        else:
            res = self.schemas.resolve(conn, ctype, handle_id or 0, schema_version)
        if res.schema is None:
            return ValueCells(None, None, res.label)
        if undecoded is not None and not null_value:
            return ValueCells(None, res.label, f"payload not decoded: {undecoded}")
        payload = None if null_value else payload
        out = self.decoder.decode(payload, res.schema, key=key, redact_fields=self.redact_fields)
        if out.value is None:
            return ValueCells(None, res.label, out.error)
        return ValueCells(out.value, res.label, None)


def bytes_text(value: str | None, value_schema: str | None) -> str | None:
    """The text of a BYTES value (a `value` cell: a base64 JSON string; `value_schema`
    "BYTES v0", "BYTES (declared)", "BYTES (not declared)") when its bytes are valid UTF-8,
    else None (another schema, a masked value, bytes that are not text)."""
    if value is None or value_schema is None or not value_schema.startswith("BYTES "):
        return None
    try:
        text = json.loads(value)
        return base64.b64decode(text, validate=True).decode("utf-8") if text else None
    except (ValueError, TypeError, binascii.Error):  # UnicodeDecodeError is a ValueError
        return None
