"""Anomaly rows for the schemas the values stage learns: bad ones, and those it forgot.

Input: the schema tracker's observers (`schema`: a schema learnt for good, with its topic and
version; `dropped`: an entry forgotten at a bound), then the frame that taught them (`take`).
Output: `Anomaly` rows at that frame: `schema.too_large` (over MAX_DEFINITION_BYTES) or
`schema.invalid` (does not parse, as decoding would parse it) once per (topic, version,
schema); `schema.dropped` per entry forgotten, at most MAX_DROP_REPORTS per bound, then one
row saying the rest are only counted (`SchemaTracker.dropped`).
Rule: made only when values are asked for (the tracker has no observers otherwise); a
detail names the topic, the schema's type and version ("AVRO v3", "AVRO (declared)", as the
value_schema column) and why, never a payload.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly
from dissector.values.model import SchemaInfo
from dissector.values.schemas import schema_label

if TYPE_CHECKING:
    from dissector.events import Frame
    from dissector.values.decode import ValueDecoder

#: (topic, version, schema digest) already judged, so each is reported once: a capture has
#: few distinct schemas; past this bound the oldest may be judged (and reported) again.
MAX_JUDGED_SCHEMAS = 4096
#: schema.dropped rows per bound: past it, one row says the rest are counted only (a long
#: capture forgets thousands of closed producers at MAX_HANDLES; rows per drop would flood).
MAX_DROP_REPORTS = 100


class SchemaFaults:
    """What the tracker observed since the last frame, made into anomaly rows by `take`."""

    def __init__(self, decoder: ValueDecoder) -> None:
        self._decoder = decoder
        self._judged: dict[tuple[str, bytes | None, bytes], None] = {}
        self._drops: dict[str, int] = {}  # bound -> drops reported so far
        self._waiting: list[tuple[str, str]] = []  # (code, detail) for the next frame
        self.pending = False

    def schema(self, topic: str, version: bytes | None, schema: SchemaInfo) -> None:
        """SchemaTracker's on_schema: judge it once per (topic, version, schema)."""
        digest = hashlib.sha256(
            repr((schema.type, schema.definition_size, schema.properties)).encode()
            + schema.definition
        ).digest()
        key = (topic, version, digest)
        if key in self._judged:
            return
        self._judged[key] = None
        if len(self._judged) > MAX_JUDGED_SCHEMAS:
            del self._judged[next(iter(self._judged))]
        error = self._decoder.schema_error(schema)
        if error is None:
            return
        code = AnomalyCode.SCHEMA_TOO_LARGE if schema.too_large else AnomalyCode.SCHEMA_INVALID
        self._add(code, f"topic {topic}: {schema_label(schema, version)}: {error}")

    def dropped(self, bound: str, what: str) -> None:
        """SchemaTracker's on_drop: one row per entry, up to MAX_DROP_REPORTS per bound."""
        n = self._drops.get(bound, 0)
        if n > MAX_DROP_REPORTS:
            return
        self._drops[bound] = n + 1
        detail = f"{bound}: {what} forgotten"
        if n == MAX_DROP_REPORTS:
            detail += "; further entries forgotten at this bound are counted, not reported"
        self._add(AnomalyCode.SCHEMA_DROPPED, detail)

    def take(self, frame: Frame) -> list[Anomaly]:
        """The rows observed since the last call, at `frame` (the one that taught them)."""
        out = [frame.anomaly(code, detail) for code, detail in self._waiting]
        self._waiting.clear()
        self.pending = False
        return out

    def _add(self, code: str, detail: str) -> None:
        self._waiting.append((code, detail))
        self.pending = True
