"""The metrics' feed: pipeline events and table batches in, the store's series updated.

Input: every pipeline event as a TableBuilder's feeder sees it (`event`), the record batches
the builder made of `TABLES` (`batches`), each end-to-end latency as the journeys' joiner
first knows it (`end_to_end`: the builder's listener), the findings its Diagnoser tells as
they are established (`established`: its listener), the packets read and the capture's
losses (`packets`, `losses`: live), then `finish`.
Output: the `MetricStore`'s counters, gauges and histograms (families.FAMILIES) (the
snapshot of a whole offline read: dissector.read.metrics.metrics_of).
Rules:
- Per frame no object is made: frames, acks and messages are counted in dicts keyed by the
  strings the events already hold (command name, direction, topic), moved into the store
  when batches come (`flush`); a FrameRun's commands are counted with numpy from its columns.
- Latencies and the counts of requests come from their tables' batches, grouped with
  numpy (one `observe` per label set and batch, never per row). A finding counts when it
  is established (the listener: a stall while it lasts), or when its row comes if it was
  not told; once either way (dissector.metrics.findings).
- End-to-end latencies come from the journeys' join as it first knows each (a
  subscription's first ACK of a message whose SEND is known: dissector.journeys.index),
  not from the journeys rows, which wait for the end of the run: live shows them as acks
  happen. Each is the value its row carries (end_to_end_us), told once; they are kept in
  an int64 array per topic and subscription (no object per message) and observed at
  `flush`.
- Gauges show the packets' last moment: connections, producers and consumers still open
  when the capture ended (`capture_end`) stay open, and are not counted as ended; a
  consumer's permits are its FLOWs' permits minus those its deliveries used (the Permits
  facts' ledger, read from the consumer's record when batches come); a finding is open
  while its connection is (from when it is established).
- Command names unknown to the schema (UNKNOWN_<n>) count as UNKNOWN: the wire cannot grow
  the label set.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    AppMessage,
    CloseReason,
    Conversation,
    ConversationOpened,
    Direction,
    Entity,
    EntityKind,
    Finding,
    Frame,
    FrameRun,
    Lifecycle,
    LifeStep,
    MessageKind,
    Outcome,
    PipelineEvent,
)
from dissector.metrics.findings import FindingsCount
from dissector.metrics.groups import count_rows, group_values
from dissector.metrics.store import MetricStore
from dissector.pulsar import frame_runs as R
from dissector.pulsar.wire import COMMAND_NAMES

P = "pulsar_dissect_"
#: Steps that end a producer's or consumer's life (TOPIC_MIGRATED does not: a CLOSE_* follows).
_ENDS = frozenset({LifeStep.FAILED, LifeStep.CLOSED_BY_CLIENT, LifeStep.CLOSED_BY_BROKER})
_ANSWERED = (str(Outcome.SUCCESS), str(Outcome.ERROR))
_RUN_ACK = R.ACK


def _command(name: str) -> str:
    return "UNKNOWN" if name.startswith("UNKNOWN_") else name


class _Open:
    """A producer or consumer created and not yet closed: its series' labels and record."""

    __slots__ = ("entity", "labels")

    def __init__(self, labels: tuple[str, ...], entity: Entity | None) -> None:
        self.labels, self.entity = labels, entity


class MetricsFeed:
    """Updates a MetricStore from a read's events and batches (module rules).

    How a front end drives it (dissector.read.metrics offline, the live session): make the
    tables of `TABLES` beside its own (their read plan then makes the lifecycle and permit
    facts and decodes payloads); hand `event` every event after the TableBuilder's feeder;
    hand `batches` each table's record batches as the builder makes them (every emit: the
    counts gathered from events reach the store then, `flush`); `finish` after the builder's
    last batches. A snapshot of the store taken between two calls is consistent. The
    Diagnoser making the findings rows tells `established` (its listener, Context.listener)
    of the findings it establishes before their rows.
    """

    #: The tables a read or live session with metrics makes (their plan then makes the
    #: lifecycle and permit facts, and decodes payloads): the feed reads the batches of the
    #: timeline and findings; the journeys' joiner tells it the end-to-end latencies
    #: (`end_to_end`, the builder's listener), its rows are not read.
    TABLES: tuple[str, ...] = ("timeline", "findings", "journeys")

    def __init__(self, store: MetricStore) -> None:
        self.store = store
        # pending counts, moved into the store by `flush`
        self._frames: dict[Direction, dict[str, int]] = {d: {} for d in Direction}
        self._acks: dict[str | None, int] = {}
        self._nacks: dict[str | None, int] = {}
        self._published: dict[str | None, int] = {}
        self._published_bytes: dict[str | None, int] = {}
        self._delivered: dict[str | None, int] = {}
        self._delivered_bytes: dict[str | None, int] = {}
        self._redelivered: dict[str | None, int] = {}
        #: topic -> subscription -> end-to-end latencies told (µs), until `flush`
        self._end_to_end: dict[str | None, dict[str | None, array[int]]] = {}
        # state behind the gauges
        self._open: dict[int, dict[tuple[EntityKind, int], _Open]] = {}  # conn -> entities
        self._findings = FindingsCount(store, self._open)
        self._permits_shown: set[tuple[str, ...]] = set()
        self._dirty = False  # frames came since the permits were last read
        self._dropped = self._skipped = 0
        #: the packets' clock as connections open and end (µs; 0: none yet)
        self.first_us = self.last_us = 0
        self._on: dict[type, Callable[[Any], None]] = {
            Frame: self._frame,
            FrameRun: self._run,
            AppMessage: self._message,
            Anomaly: self._anomaly,
            ConversationOpened: self._opened,
            Conversation: self._ended,
            Lifecycle: self._lifecycle,
        }

    # -- events -------------------------------------------------------------------------

    def event(self, ev: PipelineEvent) -> None:
        """One pipeline event (any kind: those the metrics do not read cost a lookup)."""
        on = self._on.get(type(ev))
        if on is not None:
            on(ev)

    def _frame(self, ev: Frame) -> None:
        counts = self._frames[ev.direction]
        name = ev.command_name
        counts[name] = counts.get(name, 0) + 1
        self._dirty = True
        if name == "ACK":
            self._acks[ev.topic] = self._acks.get(ev.topic, 0) + 1
        elif name == "REDELIVER_UNACKNOWLEDGED_MESSAGES":
            self._nacks[ev.topic] = self._nacks.get(ev.topic, 0) + 1

    def _run(self, ev: FrameRun) -> None:
        """A run's commands counted from its type column (numpy: no object per frame)."""
        types = np.frombuffer(ev.rows, dtype=np.int64).reshape(ev.size, R.NCOLS)[:, R.C_TYPE]
        counts = self._frames[ev.direction]
        found = np.bincount(types)
        for ctype in np.flatnonzero(found):
            name = COMMAND_NAMES.get(int(ctype), f"UNKNOWN_{ctype}")
            counts[name] = counts.get(name, 0) + int(found[ctype])
        self._dirty = True
        if len(found) > _RUN_ACK and found[_RUN_ACK]:
            acks = types == _RUN_ACK
            topics: Iterable[str | None] = (
                compress(ev.topics, acks.tolist()) if ev.topics else [None] * int(found[_RUN_ACK])
            )
            for topic, n in Counter(topics).items():
                self._acks[topic] = self._acks.get(topic, 0) + n

    def _message(self, ev: AppMessage) -> None:
        topic, size = ev.topic, ev.payload_size or 0
        if ev.kind is MessageKind.PRODUCED:
            self._published[topic] = self._published.get(topic, 0) + 1
            self._published_bytes[topic] = self._published_bytes.get(topic, 0) + size
        else:
            self._delivered[topic] = self._delivered.get(topic, 0) + 1
            self._delivered_bytes[topic] = self._delivered_bytes.get(topic, 0) + size
            if ev.redelivery_count:
                self._redelivered[topic] = self._redelivered.get(topic, 0) + 1

    def _anomaly(self, ev: Anomaly) -> None:
        self.store.inc(P + "anomalies_total", (ev.code, ev.severity))
        if ev.code == AnomalyCode.TCP_GAP and ev.length:
            self.store.inc(P + "missing_bytes_total", (ev.direction,), ev.length)

    def _opened(self, ev: ConversationOpened) -> None:
        self.store.inc(P + "connections_opened_total")
        self.store.add_gauge(P + "connections_open", (), 1)
        self._open[ev.conn_id] = {}
        if not self.first_us or ev.ts < self.first_us:
            self.first_us = ev.ts

    def _ended(self, ev: Conversation) -> None:
        self.last_us = max(self.last_us, ev.end_ts)
        if ev.ended is CloseReason.CAPTURE_END:
            return  # still open at the packets' last moment (module rules)
        store = self.store
        store.inc(P + "connections_ended_total", (ev.ended,))
        store.add_gauge(P + "connections_open", (), -1)
        for (kind, _), item in self._open.pop(ev.conn_id, {}).items():
            self._close(kind, item)
        self._findings.ended(ev.conn_id)
        self._dirty = True

    def _lifecycle(self, ev: Lifecycle) -> None:
        entities = self._open.setdefault(ev.conn_id, {})
        key = (ev.kind, ev.entity_id)
        if ev.step is LifeStep.CREATED:
            old = entities.pop(key, None)
            if old is not None:  # created again (a consumer id subscribed anew)
                self._close(ev.kind, old)
            entity = ev.entity
            topic = entity.topic if entity is not None else ev.frame.topic
            if ev.kind is EntityKind.PRODUCER:
                labels = self.store.labels(P + "producers_open", (topic,))
                self.store.add_gauge(P + "producers_open", labels, 1)
            else:
                sub = None if entity is None else entity.subscription
                labels = self.store.labels(P + "consumers_open", (topic, sub))
                self.store.add_gauge(P + "consumers_open", labels, 1)
            entities[key] = _Open(labels, entity)
        elif ev.step in _ENDS:
            item = entities.pop(key, None)
            if item is not None:
                self._close(ev.kind, item)
        self._dirty = True

    def _close(self, kind: EntityKind, item: _Open) -> None:
        name = "producers_open" if kind is EntityKind.PRODUCER else "consumers_open"
        self.store.add_gauge(P + name, item.labels, -1)

    # -- batches ------------------------------------------------------------------------

    def batches(self, table: str, batches: list[pa.RecordBatch]) -> None:
        """Rows of one of `TABLES` the builder made (others are ignored); then the counts
        gathered from events go to the store (`flush`)."""
        handle = _TABLES.get(table)
        if handle is not None:
            for batch in batches:
                if batch.num_rows:
                    handle(self, batch)
        self.flush()

    def _timeline(self, batch: pa.RecordBatch) -> None:
        store = self.store
        command = pc.coalesce(batch.column("request_command"), batch.column("response_command"))
        outcome = batch.column("outcome")
        for (cmd, out), n in count_rows([command, outcome]):
            store.inc(P + "requests_total", (_command(cmd or "?"), out), n)
        latency = batch.column("latency_us")
        answered = pc.and_(pc.is_valid(latency), pc.is_in(outcome, pa.array(_ANSWERED)))
        if pc.any(answered).as_py():
            kept = pa.RecordBatch.from_arrays(
                [command, outcome, latency], names=["c", "o", "l"]
            ).filter(answered)
            for (cmd, out), us in group_values([kept.column(0), kept.column(1)], kept.column(2)):
                store.observe(P + "request_duration_seconds", (_command(cmd or "?"), out), us)
        sends = pc.and_(
            pc.equal(batch.column("request_command"), "SEND"),
            pc.and_(pc.equal(outcome, str(Outcome.SUCCESS)), pc.is_valid(latency)),
        )
        if pc.any(sends).as_py():
            kept = pa.RecordBatch.from_arrays(
                [batch.column("topic"), latency], names=["t", "l"]
            ).filter(sends)
            for (topic,), us in group_values([kept.column(0)], kept.column(1)):
                store.observe(P + "publish_latency_seconds", (topic,), us)

    def _findings_rows(self, batch: pa.RecordBatch) -> None:
        self._findings.rows(batch)

    def established(self, found: Finding) -> None:
        """The Diagnoser's listener: a finding established now, before its row (counted
        once, open while its connection is: dissector.metrics.findings)."""
        self._findings.told(found)

    # -- the journeys' join -------------------------------------------------------------

    def end_to_end(self, topic: str | None, subscription: str | None, us: int) -> None:
        """One end-to-end latency (µs) as the journeys' join first knows it (the joiner's
        listener, dissector.journeys.joiner): kept until `flush` observes it."""
        subs = self._end_to_end.get(topic)
        if subs is None:
            subs = self._end_to_end[topic] = {}
        told = subs.get(subscription)
        if told is None:
            told = subs[subscription] = array("q")
        told.append(us)

    # -- the rest -----------------------------------------------------------------------

    def packets(self, count: int, captured_bytes: int) -> None:
        """Packets dissected since the last call, and their captured bytes."""
        self.store.inc(P + "packets_total", (), count)
        self.store.inc(P + "captured_bytes_total", (), captured_bytes)

    def losses(self, dropped: int | None, skipped: int) -> None:
        """live: the kernel's drops (None: not known) and the packets skipped, totals so far."""
        if dropped is not None and dropped > self._dropped:
            self.store.inc(P + "kernel_dropped_packets_total", (), dropped - self._dropped)
            self._dropped = dropped
        if skipped > self._skipped:
            self.store.inc(P + "skipped_packets_total", (), skipped - self._skipped)
            self._skipped = skipped

    def flush(self) -> None:
        """Counts gathered from events into the store; the permits gauge read anew."""
        store = self.store
        for direction, counts in self._frames.items():
            for name, n in counts.items():
                store.inc(P + "frames_total", (_command(name), direction), n)
            counts.clear()
        for family, pending in (
            ("acks_total", self._acks),
            ("nacks_total", self._nacks),
            ("messages_published_total", self._published),
            ("published_bytes_total", self._published_bytes),
            ("messages_delivered_total", self._delivered),
            ("delivered_bytes_total", self._delivered_bytes),
            ("messages_redelivered_total", self._redelivered),
        ):
            for topic, n in pending.items():
                store.inc(P + family, (topic,), n)
            pending.clear()
        if self._end_to_end:
            told, self._end_to_end = self._end_to_end, {}
            for topic, subs in told.items():
                for subscription, us in subs.items():
                    latencies = np.frombuffer(us, dtype=np.int64)
                    labels = (topic, subscription)
                    store.observe(P + "end_to_end_latency_seconds", labels, latencies)
        if self._dirty:
            self._permits()
            self._dirty = False

    def _permits(self) -> None:
        """consumer_permits: per topic and subscription, the permits left of the open
        consumers whose FLOWs were seen (the facts' ledger: permits granted minus used)."""
        sums: dict[tuple[str, ...], int] = {}
        for entities in self._open.values():
            for (kind, _), item in entities.items():
                entity = item.entity
                if kind is EntityKind.CONSUMER and entity is not None and entity.flows:
                    left = max(0, entity.permits - entity.used)
                    sums[item.labels] = sums.get(item.labels, 0) + left
        for labels in self._permits_shown - sums.keys():
            self.store.set(P + "consumer_permits", labels, 0)
        for labels, left in sums.items():
            self.store.set(P + "consumer_permits", labels, left)
        self._permits_shown |= sums.keys()

    def finish(self) -> None:
        """The read ended (after the builder's last batches): everything into the store."""
        self._dirty = True
        self.flush()
        self._findings.finish()


_TABLES: dict[str, Callable[[MetricsFeed, pa.RecordBatch], None]] = {
    "timeline": MetricsFeed._timeline,
    "findings": MetricsFeed._findings_rows,
}


def metrics_feed_tables(tables: Iterable[str]) -> list[str]:
    """The tables a read makes when it also feeds metrics: those asked and `TABLES`."""
    names = list(tables)
    return names + [t for t in MetricsFeed.TABLES if t not in names]
