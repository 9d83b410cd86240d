"""Sans-IO state machine of one connection: the protocol's facts, made once.

Input: the decoded frames of one connection in order (`observe`; or `observe_run` for the
scanned columns of a frame run, made only when no completion fact is wanted), then `close`.
Output: per frame, its topic and the facts it completes: `Pair` records (request answered /
failed / unanswered / unmatched, SEND receipted / failed, MESSAGE acknowledged /
redelivered, each with both packets), `RequestIdReused`, per ACK, `Acked` (what it did
to its consumer's unacknowledged deliveries), and per FLOW (and MESSAGE leaving its consumer
no permits), `Permits` (`permits.py`); at close the pairs never
answered, and a `ConnectionInfo` of the handshake and entities (producers, consumers).
With `consumed`, per MESSAGE and ACK the journeys' fact of it (`Delivering`, `AckedIds`:
consumed.py), after its other facts. With `lifecycles`, per PRODUCER, SUBSCRIBE, their
answers, CLOSE_PRODUCER, CLOSE_CONSUMER and TOPIC_MIGRATED the producer's or consumer's
step (`Lifecycle`: lifecycles.py), after its other facts.
With `schemas`, the schema facts (`SchemaFact`: declared, accepted, fetched, refused) wait
in `schemas.told` for their consumer (`schemas.take()`).
Rules: what each command does is ONE lookup in `table.TRANSITIONS` (its entity step, then
its pairing handler: `requests.py`, `acks.py`, `permits.py`); `pairs.py` fills in each
completion fact.
Bounds (`bounds.py`): pending requests, SENDs and deliveries per connection are at most
MAX_PENDING; beyond, the oldest are reported unanswered.
Without facts wanted (`pairs=False`: a read of frames, messages or conversations only)
requests are still matched (entities learn from their answers) but SENDs, receipts,
deliveries and acks keep nothing and no fact is returned. With them, a pending SEND or
MESSAGE is kept as its pair row reads it (`acks.held`): ids as plain ints, no decoded
command, metadata, payload or bytes.
"""

from __future__ import annotations

from typing import Any

from dissector.events import Frame, FrameRun, Pair
from dissector.facts import bounds
from dissector.facts.store import Fact, Store
from dissector.facts.table import TRANSITIONS
from dissector.pulsar import frame_runs as R

__all__ = ["ConversationState", "Fact"]

_NO_FACTS: list[Fact] = []  # shared, never mutated


class ConversationState(Store):
    """State of one connection; see the module docstring."""

    def __init__(
        self,
        conn_id: int,
        *,
        pairs: bool = True,
        schemas: bool = False,
        consumed: bool = False,
        lifecycles: bool = False,
    ) -> None:
        """pairs: whether facts are wanted (the timeline, the findings or the journeys are
        made): False matches requests only, for the entities, and returns no fact.
        schemas: whether schema facts are made (`schemas.told`, taken by the values).
        consumed: whether the journeys' facts of deliveries and acks are made (with pairs:
        `Delivering`, `AckedIds`, consumed.py).
        lifecycles: whether each producer's and consumer's steps are facts (with pairs:
        `Lifecycle`, lifecycles.py)."""
        super().__init__(conn_id, pairs, schemas, consumed, lifecycles)
        self.info = self.entities.info
        self.producers = self.entities.producers
        self.consumers = self.entities.consumers
        self.overflowed = 0

    # ------------------------------------------------------------------ public API

    def observe(self, frame: Frame) -> tuple[str | None, list[Fact]]:
        """Learn from one frame; return its topic and the facts it completes."""
        body = frame.body
        if body is None:
            return None, _NO_FACTS
        ctype = frame.command_type
        steps = TRANSITIONS.get(ctype)
        if steps is None:
            return None, _NO_FACTS
        step, on = steps
        topic = step(self.entities, frame, ctype, body) if step is not None else None
        if on is None:
            return topic, _NO_FACTS
        facts: list[Fact] = []
        on(self, frame, ctype, body, facts)
        if self._pending > bounds.MAX_PENDING:
            facts.extend(self._shed())
        return topic, facts if self.pairing else _NO_FACTS

    def observe_run(self, run: FrameRun) -> list[str | None]:
        """Learn from the frames of a run (SEND, SEND_RECEIPT, MESSAGE, ACK; made only when
        no fact is wanted) what `observe` learns from each, from the scanned columns: the
        entity steps (messages sent and delivered); return each frame's topic. Without
        facts nothing waits for an answer (see `acks.on_send`)."""
        cols = memoryview(run.rows).cast("q")
        producers, consumers = self.producers, self.consumers
        unsigned = R.unsigned
        topics: list[str | None] = []
        for i in range(run.size):
            r = i * R.NCOLS
            ctype, present = cols[r + R.C_TYPE], cols[r + R.C_PRESENT]
            topic = None
            if ctype == R.MESSAGE or ctype == R.ACK:  # entities' lookup (_message counts)
                cid = unsigned(cols[r + R.C_CONSUMER_ID]) if present & R.HAS_CONSUMER_ID else 0
                consumer = consumers.get(cid)
                if consumer is not None:
                    if ctype == R.MESSAGE:
                        consumer.delivered += cols[r + R.C_NUM_MESSAGES]
                    if present & R.HAS_CONSUMER_ID:
                        topic = consumer.topic
            else:  # SEND (entities._send counts) or SEND_RECEIPT: the producer's topic
                pid = unsigned(cols[r + R.C_PRODUCER_ID]) if present & R.HAS_PRODUCER_ID else 0
                producer = producers.get(pid)
                if producer is not None:
                    if ctype == R.SEND:
                        sent = present & R.HAS_SEND_COUNT
                        producer.sent += cols[r + R.C_NUM_MESSAGES] if sent else 1
                    if present & R.HAS_PRODUCER_ID:
                        topic = producer.topic
            topics.append(topic)
        return topics

    def close(self) -> list[Pair]:
        """End of the connection: every request still pending is unanswered."""
        pending: list[Frame] = list(self._by_request.values())
        for again in self._again.values():
            pending.extend(again)
        for waiting in self._sends.values():
            for queue in waiting.values():
                pending.extend(queue)
        for fifo in self._fifo.values():
            pending.extend(fifo)
        for delivered in self._delivered.values():
            pending.extend(d.frame for d in delivered.live.values() if d.waiting)
        pending.sort(key=lambda f: (f.last_ts, f.stream_offset))
        self._by_request.clear()
        self._again.clear()
        self._sends.clear()
        self._fifo.clear()
        self._delivered.clear()
        self._acked_ids.clear()
        self._pending = 0
        self.entities.close()
        return [self.pair(f, None, None) for f in pending] if self.pairing else []

    # ------------------------------------------------------------------ the bound

    def _shed(self) -> list[Pair]:
        """Too much pending: the oldest requests of every kind are declared unanswered."""
        self.overflowed += 1
        # (when, the frame to report unanswered (None: none), where it is kept, its key)
        waiting: list[tuple[tuple[int, int], Frame | None, Any, Any]] = []
        frame: Frame
        for key, frame in self._by_request.items():
            waiting.append(((frame.last_ts, frame.stream_offset), frame, self._by_request, key))
        sends = [queue for by_seq in self._sends.values() for queue in by_seq.values()]
        for queues in (sends, self._fifo.values(), self._again.values()):
            for queue in queues:
                for frame in queue:
                    waiting.append(((frame.last_ts, frame.stream_offset), frame, queue, None))
        for delivered in self._delivered.values():
            for mid, d in delivered.live.items():
                when = (d.frame.last_ts, d.frame.stream_offset)
                waiting.append((when, d.frame if d.waiting else None, delivered.live, mid))
        waiting.sort(key=lambda w: w[0])
        target = bounds.MAX_PENDING * 9 // 10
        pairs = []
        for _, shed, store, where in waiting[: max(1, len(waiting) - target)]:
            if where is None:
                store.remove(shed)
            else:
                del store[where]
            if shed is not None:  # a delivery asked for again has had its pair
                pairs.append(self.pair(shed, None, None))
        kept = ((pid, {seq: q for seq, q in w.items() if q}) for pid, w in self._sends.items())
        self._sends = {pid: by_seq for pid, by_seq in kept if by_seq}
        self._again = {key: again for key, again in self._again.items() if again}
        self._promote()
        self._pending = sum(len(q) for w in self._sends.values() for q in w.values())
        self._pending += sum(len(q) for q in self._again.values())
        self._pending += sum(len(q) for q in self._fifo.values())
        self._pending += len(self._by_request) + sum(len(d.live) for d in self._delivered.values())
        return pairs

    def _promote(self) -> None:
        """A key whose first request was shed: its next one in flight takes its place."""
        for key in [k for k in self._again if k not in self._by_request]:
            first, *rest = self._again.pop(key)
            self._by_request[key] = first
            if rest:
                self._again[key] = rest
