"""Rows of the tables, built from pipeline events into Arrow record batches.

Input: pipeline events (ConversationOpened, Frame, AppMessage, Anomaly, Pair, Conversation).
Output: one pyarrow.Table (or a stream of record batches) per table of the registry
(dissector.tables.schema), with its schema.
Rule: the row functions are the tables' own (declared once, in dissector.tables.frames and
.conversations): one tuple per row in the hot path, transposed into Arrow columns every
BATCH_ROWS rows, so memory stays proportional to one batch plus the finished batches.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dissector.events import (
    Anomaly,
    AppMessage,
    Conversation,
    ConversationOpened,
    FlowKey,
    Frame,
    Pair,
    PipelineEvent,
)
from dissector.tables.schema import TABLES

#: Rows gathered before they become an Arrow record batch.
BATCH_ROWS = 65536
_NO_KEY = (None, None, None, None)

frame_row = TABLES["frames"].row  # (Frame, FlowKey or no key)
message_row = TABLES["messages"].row  # (AppMessage)
anomaly_row = TABLES["anomalies"].row  # (Anomaly)
conversation_row = TABLES["conversations"].row  # (Conversation, capture)
pair_row = TABLES["timeline"].row  # (Pair)
entity_row = TABLES["entities"].row  # (conn_id, Entity)


class _Batches:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.rows: list[tuple[Any, ...]] = []
        self.batches: list[pa.RecordBatch] = []
        self.count = 0

    def add(self, row: tuple[Any, ...]) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        columns = list(zip(*self.rows, strict=True))
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, self.schema, strict=True)]
        self.batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.count += len(self.rows)
        self.rows = []

    def take(self) -> list[pa.RecordBatch]:
        """Finished record batches so far (for streaming writers); they are handed over."""
        self.flush()
        out, self.batches = self.batches, []
        return out

    def table(self) -> pa.Table:
        self.flush()
        return pa.Table.from_batches(self.batches, schema=self.schema)


class TableBuilder:
    """Accumulate every table of the registry from the events of one or more captures.

    `batches[name]` holds a table's rows; the attributes named after the tables are the same
    objects, for the hot path.
    """

    def __init__(self, capture: str = "") -> None:
        self.capture = capture
        self.batches = {name: _Batches(t.schema) for name, t in TABLES.items()}
        self.frames = self.batches["frames"]
        self.messages = self.batches["messages"]
        self.anomalies = self.batches["anomalies"]
        self.conversations = self.batches["conversations"]
        self.timeline = self.batches["timeline"]
        self.entities = self.batches["entities"]
        self._keys: dict[int, FlowKey] = {}  # FlowKey is a tuple: client ip/port, broker ip/port

    def add(self, ev: PipelineEvent) -> None:
        if type(ev) is Frame:
            self.frames.add(frame_row(ev, self._keys.get(ev.conn_id, _NO_KEY)))
        elif type(ev) is AppMessage:
            self.messages.add(message_row(ev))
        elif type(ev) is Anomaly:
            self.anomalies.add(anomaly_row(ev))
        elif type(ev) is ConversationOpened:
            self._keys[ev.conn_id] = ev.key
        elif type(ev) is Pair:
            self.timeline.add(pair_row(ev))
        elif type(ev) is Conversation:
            self.conversations.add(conversation_row(ev, self.capture))
            for entity in ev.summary.entities:
                self.entities.add(entity_row(ev.conn_id, entity))
            self._keys.pop(ev.conn_id, None)

    def tables(self) -> dict[str, pa.Table]:
        return {name: batches.table() for name, batches in self.batches.items()}
