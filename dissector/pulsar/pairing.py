"""Sans-IO conversation state of one connection: handshake, entities, request/response pairs.

Input: the decoded frames of one connection in order (`observe`), then `close`.
Output: the frame's topic, `Pair` records (one timeline row each) as responses arrive, and at
close the pairs never answered plus a `ConnectionInfo` of the handshake and entities.
Rules (the pairing table):
- request_id: a command carrying one is a request unless its name says response (…_RESPONSE,
  SUCCESS, ERROR, PRODUCER_SUCCESS, WATCH_TOPIC_LIST_SUCCESS); a response pairs with the
  request of the same id sent the other way. An id in flight twice (a client numbering with
  two counters) keeps both requests: a response goes to the oldest one it answers by type
  (X_RESPONSE or X_SUCCESS to X; SUCCESS to a request without a response of its own; ERROR to
  any), else to the oldest. SEND pairs with SEND_RECEIPT/SEND_ERROR by
  (producer_id, sequence_id); CONNECT with CONNECTED; PING with PONG and AUTH_CHALLENGE with
  AUTH_RESPONSE, first in first out, per direction.
- MESSAGE pairs with the ACK that acknowledges it: individual ids, cumulative (everything of
  that consumer up to the id), or with a redelivery request; a batch-index ack (an ack_set
  with bits still set) acknowledges part of a batch and completes nothing yet (a cumulative
  one completes what comes before that batch).
- PRODUCER_SUCCESS with producer_ready false (the producer waits for exclusive access) is no
  answer yet: the PRODUCER pairs with the one that says ready.
- A response nobody asked for is `unmatched`; a request left at close is `unanswered`.
  request_id -1 (all bits set) marks a broker's notification (CLOSE_PRODUCER/CLOSE_CONSUMER),
  which expects no answer.
Memory: pending requests and deliveries per connection are bounded (MAX_PENDING); the oldest
are reported unanswered when the bound is passed. Without pairs (`pairs=False`, every read but
the timeline's) SENDs, receipts, deliveries and acks keep nothing: only requests by request_id
and the FIFO pairs wait, as the entities learn from their answers. With pairs, a pending
SEND or MESSAGE is kept as its pair row reads it (`_held`): its ids as plain ints, no decoded
command, metadata, payload or bytes.
Dispatch: what a command does is looked up by its type in dicts built from the schema:
`ENTITY_STEPS` (entities.py: producers, consumers, handshake, the frame's topic), then
`_ON_COMMAND` here (pairing); `pairs.py` fills in each row.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from functools import partial
from typing import Any

from dissector.events import Direction, Frame, FrameRun, Outcome, Pair
from dissector.pulsar import frame_runs as R
from dissector.pulsar.deliveries import Deliveries
from dissector.pulsar.entities import ENTITY_STEPS, Entities
from dissector.pulsar.pairs import make_pair
from dissector.pulsar.wire import COMMAND_NAMES, COMMAND_TYPES, SINGULAR_FIELDS, types_with

__all__ = ["ACKED_MEMORY", "MAX_PENDING", "ConversationState"]

#: Requests (and deliveries) awaiting an answer per connection before the oldest is dropped.
MAX_PENDING = 100_000
#: Acknowledged message ids remembered per consumer, to tell a repeated ack from a stray one.
ACKED_MEMORY = 10_000

T = COMMAND_TYPES
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT

_WITH_REQUEST = types_with("request_id")
_RESPONSES = frozenset(
    t
    for t, n in COMMAND_NAMES.items()
    if n.endswith("_RESPONSE")
    or n in ("SUCCESS", "ERROR", "PRODUCER_SUCCESS", "WATCH_TOPIC_LIST_SUCCESS")
)
#: response type -> the request type it alone answers (X_RESPONSE, X_SUCCESS -> X)
_ANSWERS = {
    t: T[n.rsplit("_", 1)[0]]
    for t, n in COMMAND_NAMES.items()
    if t in _RESPONSES and n.rsplit("_", 1)[0] in T and n.rsplit("_", 1)[0] != n
}
_ANSWERED = frozenset(_ANSWERS.values())
_SUCCESS = T["SUCCESS"]
_PRODUCER_SUCCESS = T["PRODUCER_SUCCESS"]
_FIFO_PAIRS = {
    T["PONG"]: T["PING"],
    T["AUTH_RESPONSE"]: T["AUTH_CHALLENGE"],
    T["CONNECTED"]: T["CONNECT"],
}
_FIFO_REQUESTS = frozenset(_FIFO_PAIRS.values())
_ACK, _REDELIVER = T["ACK"], T["REDELIVER_UNACKNOWLEDGED_MESSAGES"]
_NO_ID = (1 << 64) - 1  # request_id -1: brokers' CLOSE_PRODUCER/CONSUMER notifications
_CLOSES = frozenset({T["CLOSE_PRODUCER"], T["CLOSE_CONSUMER"]})


#: Made in place of a Pair when pairs are not wanted (ConversationState(pairs=False)).
_NO_PAIR = Pair(
    0, None, None, Outcome.SUCCESS, None, None, None, None, None, None, None, None, None
)
_NO_PAIRS: list[Pair] = []  # shared, never mutated


class _Id:
    """A held MESSAGE's message id, as its pair row reads it."""

    __slots__ = ("entryId", "ledgerId")

    def __init__(self, ledger: int, entry: int) -> None:
        self.ledgerId, self.entryId = ledger, entry


class _Ids:
    """What a pair row reads of a held SEND's or MESSAGE's body (pairs.make_pair,
    Entities.lookup): its ids as plain ints, and which are set. A decoded command kept
    alive costs about 1 KB; this about 100 bytes."""

    __slots__ = ("consumer_id", "message_id", "present", "producer_id", "sequence_id")

    def __init__(self, ctype: int, body: Any) -> None:
        fields = SINGULAR_FIELDS.get(ctype, _BODY_IDS)
        self.present = tuple(n for n in _BODY_IDS if n in fields and body.HasField(n))
        self.producer_id = body.producer_id if "producer_id" in self.present else 0
        self.sequence_id = body.sequence_id if "sequence_id" in self.present else 0
        self.consumer_id = body.consumer_id if "consumer_id" in self.present else 0
        mid = body.message_id if "message_id" in self.present else None
        self.message_id = None if mid is None else _Id(mid.ledgerId, mid.entryId)

    def HasField(self, name: str) -> bool:  # the protobuf method it stands for
        return name in self.present


#: The ids of a SEND's and a MESSAGE's body that a pair row reads.
_BODY_IDS = ("consumer_id", "producer_id", "sequence_id", "message_id")


def _held(frame: Frame) -> Frame:
    """A SEND or MESSAGE as it waits for its answer: what its pair row reads (its ids,
    times, packets, offset, topic, command name), without its decoded command, metadata,
    payload view or bytes, which kept about 3 KB per frame alive (a consumer that never
    acks holds MAX_PENDING deliveries)."""
    ids = _Ids(frame.command_type, frame.body)
    return frame._replace(
        command=None, body=ids, metadata=None, broker_entry=None, payload=None, raw=None
    )


def _no_pair(*args: Any, **kwargs: Any) -> Pair:
    return _NO_PAIR


def _opposite(d: Direction) -> Direction:
    return B2C if d is C2B else C2B


class ConversationState:
    """State of one connection; see the module docstring."""

    def __init__(self, conn_id: int, *, pairs: bool = True) -> None:
        """pairs: False when nobody reads the timeline: requests are still matched (entities
        learn from their answers) but no Pair is made or returned."""
        self.conn_id = conn_id
        self.pairing = pairs
        self.entities = Entities()
        self.info = self.entities.info
        self.producers = self.entities.producers
        self.consumers = self.entities.consumers
        self._pair = partial(make_pair, conn_id, self.entities) if pairs else _no_pair
        self._by_request: dict[tuple[Direction, int], Frame] = {}  # (direction, request_id)
        self._again: dict[tuple[Direction, int], list[Frame]] = {}  # the same key, in flight
        self._sends: dict[tuple[int, int], deque[Frame]] = {}  # (producer_id, sequence_id)
        self._fifo: dict[tuple[Direction, int], deque[Frame]] = {}  # (direction, type)
        # consumer_id -> (ledger, entry) -> MESSAGE frame, in delivery order (and by id)
        self._delivered: dict[int, Deliveries[Frame]] = {}
        # consumer_id -> (ledger, entry) -> packet number of the ACK that acknowledged it
        self._acked_ids: dict[int, OrderedDict[tuple[int, int], int]] = {}
        self._pending = 0
        self.overflowed = 0

    # ------------------------------------------------------------------ public API

    def observe(self, frame: Frame) -> tuple[str | None, list[Pair]]:
        """Learn from one frame; return its topic and the pairs it completes."""
        body = frame.body
        if body is None:
            return None, []
        ctype = frame.command_type
        step = ENTITY_STEPS.get(ctype)
        topic = step(self.entities, frame, ctype, body) if step is not None else None
        pairs: list[Pair] = []
        on = _ON_COMMAND.get(ctype)
        if on is not None:
            on(self, frame, ctype, body, pairs)
        if self._pending > MAX_PENDING:
            pairs.extend(self._shed())
        return topic, pairs if self.pairing else _NO_PAIRS

    def observe_run(self, run: FrameRun) -> list[str | None]:
        """Learn from the frames of a run (SEND, SEND_RECEIPT, MESSAGE, ACK; made only when
        no pair is wanted) what `observe` learns from each, from the scanned columns: the
        entity steps (messages sent and delivered); return each frame's topic. Without
        pairs nothing waits for an answer (see `_on_send`)."""
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
        for queue in self._sends.values():
            pending.extend(queue)
        for fifo in self._fifo.values():
            pending.extend(fifo)
        for delivered in self._delivered.values():
            pending.extend(delivered.live.values())
        pending.sort(key=lambda f: (f.last_ts, f.stream_offset))
        self._by_request.clear()
        self._again.clear()
        self._sends.clear()
        self._fifo.clear()
        self._delivered.clear()
        self._acked_ids.clear()
        self._pending = 0
        self.entities.close()
        return [self._pair(f, None, None) for f in pending] if self.pairing else []

    # ------------------------------------------------------------------ handlers
    # Each takes (frame, type, sub-message, pairs so far) and appends the pairs it completes.

    def _on_request(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        if body.HasField("request_id"):
            key = (frame.direction, body.request_id)
            self._pending += 1
            if key in self._by_request:
                self._again.setdefault(key, []).append(frame)
            else:
                self._by_request[key] = frame

    def _on_close(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        """A request, unless it is a broker's notification (request_id -1)."""
        if body.HasField("request_id") and body.request_id != _NO_ID:
            self._on_request(frame, ctype, body, pairs)

    def _on_response(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        if ctype == _PRODUCER_SUCCESS and not body.producer_ready:
            return  # the producer waits for exclusive access: its answer is the ready one
        if body.HasField("request_id"):
            rid = body.request_id
            key = (_opposite(frame.direction), rid)
            if key in self._again:
                request: Frame | None = self._answered(key, ctype)
            else:
                request = self._by_request.pop(key, None)
            if request is not None:
                self._pending -= 1
            pairs.append(self._pair(request, frame, rid))
            self.entities.responded(request, frame)

    def _answered(self, key: tuple[Direction, int], ctype: int) -> Frame:
        """Of the requests in flight with this key, the oldest a response of `ctype` answers
        by type, else the oldest; the others keep waiting."""
        waiting = [self._by_request.pop(key), *self._again.pop(key)]
        only = _ANSWERS.get(ctype)
        chosen = next(
            (
                f
                for f in waiting
                if (f.command_type == only if only is not None else True)
                and (ctype != _SUCCESS or f.command_type not in _ANSWERED)
            ),
            waiting[0],
        )
        waiting.remove(chosen)
        self._by_request[key] = waiting[0]
        if len(waiting) > 1:
            self._again[key] = waiting[1:]
        return chosen

    def _on_send(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        """A SEND waits for its receipt, when pairs are made: without them nothing reads
        what waits (entities count SENDs, deliveries and acks in their own steps), so
        nothing is kept (a consumer that never acks held MAX_PENDING deliveries for no row)."""
        if not self.pairing:
            return
        key = (body.producer_id, body.sequence_id)
        queue = self._sends.get(key)
        if queue is None:
            queue = self._sends[key] = deque()
        queue.append(_held(frame))
        self._pending += 1

    def _on_receipt(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        """SEND_RECEIPT or SEND_ERROR: answers the oldest SEND of its (producer, sequence)."""
        if not self.pairing:
            return
        key = (body.producer_id, body.sequence_id)
        queue = self._sends.get(key)
        request = queue.popleft() if queue else None
        if request is not None:
            self._pending -= 1
            if not queue:  # one key per message: an emptied queue would stay for good
                del self._sends[key]
        pairs.append(self._pair(request, frame, None))

    def _on_fifo_request(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        self._fifo.setdefault((frame.direction, ctype), deque()).append(frame)
        self._pending += 1

    def _on_fifo_response(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        queue = self._fifo.get((_opposite(frame.direction), _FIFO_PAIRS[ctype]))
        request = queue.popleft() if queue else None
        if request is not None:
            self._pending -= 1
        pairs.append(self._pair(request, frame, None))

    def _on_connect(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        self._on_fifo_request(frame, ctype, body, pairs)
        self.entities.connect(body)

    def _on_connected(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        self._on_fifo_response(frame, ctype, body, pairs)
        self.entities.connected(body)

    # ------------------------------------------------------------------ internals

    def _shed(self) -> list[Pair]:
        """Too much pending: the oldest requests of every kind are declared unanswered."""
        self.overflowed += 1
        waiting: list[tuple[tuple[int, int], Frame, Any, Any]] = []
        frame: Frame
        for key, frame in self._by_request.items():
            waiting.append(((frame.last_ts, frame.stream_offset), frame, self._by_request, key))
        for queues in (self._sends, self._fifo, self._again):
            for queue in queues.values():
                for frame in queue:
                    waiting.append(((frame.last_ts, frame.stream_offset), frame, queue, None))
        for delivered in self._delivered.values():
            for mid, frame in delivered.live.items():
                waiting.append(((frame.last_ts, frame.stream_offset), frame, delivered.live, mid))
        waiting.sort(key=lambda w: w[0])
        target = MAX_PENDING * 9 // 10
        pairs = []
        for _, frame, store, where in waiting[: max(1, len(waiting) - target)]:
            if where is None:
                store.remove(frame)
            else:
                del store[where]
            pairs.append(self._pair(frame, None, None))
        self._sends = {key: queue for key, queue in self._sends.items() if queue}
        self._again = {key: again for key, again in self._again.items() if again}
        self._promote()
        self._pending = sum(len(q) for q in self._sends.values())
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

    def _on_message(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        """A delivery (counted by the entity step): pending until acknowledged."""
        if not self.pairing:
            return
        mid = body.message_id
        delivered = self._delivered.get(body.consumer_id)
        if delivered is None:
            delivered = self._delivered[body.consumer_id] = Deliveries()
        key = (mid.ledgerId, mid.entryId)
        old = delivered.add(key, _held(frame))
        if old is not None:  # delivered again before any ack: the broker redelivered it
            pairs.append(self._pair(old, frame, None, ack_of=key, outcome=Outcome.REDELIVERED))
        else:
            self._pending += 1

    def _on_ack(self, frame: Frame, ctype: int, body: Any, pairs: list[Pair]) -> None:
        """ACK or REDELIVER_UNACKNOWLEDGED_MESSAGES: completes the deliveries it names."""
        if not self.pairing:
            return
        pairs.extend(self._acked(frame, ctype, body))

    def _acked(self, frame: Frame, ctype: int, body: Any) -> list[Pair]:
        cid = body.consumer_id
        found = self._delivered.get(cid)
        delivered = found.live if found is not None else OrderedDict()
        done = self._acked_ids.setdefault(cid, OrderedDict())
        ids = body.message_id if ctype == _ACK else body.message_ids
        pairs = []
        if ctype == _ACK and body.ack_type == 1:  # cumulative: all up to the id
            partial = False
            for mid in ids:
                upto = (mid.ledgerId, mid.entryId)
                if len(mid.ack_set) > 0 and any(mid.ack_set):  # its batch only in part
                    partial = partial or upto in delivered
                    upto = (mid.ledgerId, mid.entryId - 1)
                covered = found.take_upto(upto) if found else []
                for key, delivery in covered:
                    pairs.append(self._pair(delivery, frame, None, ack_of=key))
                    self._pending -= 1
                    self._remember_ack(done, key, frame)
            if not pairs and ids and not partial:
                key = (ids[0].ledgerId, ids[0].entryId)
                pairs.append(self._stray(frame, key, done))
            return pairs
        if ctype == _REDELIVER and not ids:  # redeliver everything unacked
            for key in list(delivered):
                pairs.append(self._pair(delivered.pop(key), frame, None, ack_of=key))
                self._pending -= 1
            return pairs
        for mid in ids:
            key = (mid.ledgerId, mid.entryId)
            request = delivered.get(key)
            if request is None:
                pairs.append(self._stray(frame, key, done))
                continue
            if ctype == _ACK and len(mid.ack_set) > 0 and any(mid.ack_set):
                continue  # batch-index ack of part of the batch: the delivery stays pending
            del delivered[key]
            self._pending -= 1
            if ctype == _ACK:
                self._remember_ack(done, key, frame)
            pairs.append(self._pair(request, frame, None, ack_of=key))
        return pairs

    def _remember_ack(
        self, done: OrderedDict[tuple[int, int], int], key: tuple[int, int], frame: Frame
    ) -> None:
        done[key] = frame.last_packet
        if len(done) > ACKED_MEMORY:
            done.popitem(last=False)

    def _stray(
        self, frame: Frame, key: tuple[int, int], done: OrderedDict[tuple[int, int], int]
    ) -> Pair:
        """An ack or redelivery request for no pending delivery: unmatched, and why if known."""
        pair = self._pair(None, frame, None, ack_of=key)
        earlier = done.get(key)
        if earlier is not None:
            pair = pair._replace(
                error_message=f"already acknowledged (packet {earlier})", first_ack_packet=earlier
            )
        return pair


Handler = Callable[[ConversationState, Frame, int, Any, list[Pair]], None]


def _then(first: Handler, second: Handler) -> Handler:
    def both(
        state: ConversationState, frame: Frame, ctype: int, body: Any, pairs: list[Pair]
    ) -> None:
        first(state, frame, ctype, body, pairs)
        second(state, frame, ctype, body, pairs)

    return both


def _dispatch() -> dict[int, Handler]:
    """BaseCommand.type -> its pairing handler (the table of the module docstring)."""
    s = ConversationState
    on: dict[int, Handler] = {}
    for t in _WITH_REQUEST:  # the request_id rule first
        on[t] = s._on_response if t in _RESPONSES else s._on_request
    for t in _CLOSES:
        on[t] = s._on_close
    special: dict[int, Handler] = {
        T["SEND"]: s._on_send,
        T["SEND_RECEIPT"]: s._on_receipt,
        T["SEND_ERROR"]: s._on_receipt,
        T["MESSAGE"]: s._on_message,
        T["ACK"]: s._on_ack,
        T["REDELIVER_UNACKNOWLEDGED_MESSAGES"]: s._on_ack,
    }
    special.update(dict.fromkeys(_FIFO_REQUESTS, s._on_fifo_request))
    special.update(dict.fromkeys(_FIFO_PAIRS, s._on_fifo_response))
    special[T["CONNECT"]] = s._on_connect
    special[T["CONNECTED"]] = s._on_connected
    for t, handler in special.items():
        first = on.get(t)
        on[t] = handler if first is None else _then(first, handler)
    return on


_ON_COMMAND: dict[int, Handler] = _dispatch()
