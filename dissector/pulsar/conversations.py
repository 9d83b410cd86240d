"""Sans-IO conversation state of one connection: handshake, entities, request/response pairs.

Input: the decoded frames of one connection in order (`observe`), then `close`.
Output: the frame's topic, `Pair` records (one timeline row each) as responses arrive, and at
close the pairs never answered plus a `Summary` of the handshake and entities.
Rules (the pairing table):
- request_id: a command carrying one is a request unless its name says response (…_RESPONSE,
  SUCCESS, ERROR, PRODUCER_SUCCESS, WATCH_TOPIC_LIST_SUCCESS); a response pairs with the
  request of the same id sent the other way. SEND pairs with SEND_RECEIPT/SEND_ERROR by
  (producer_id, sequence_id); CONNECT with CONNECTED; PING with PONG and AUTH_CHALLENGE with
  AUTH_RESPONSE, first in first out, per direction.
- MESSAGE pairs with the ACK that acknowledges it: individual ids, cumulative (everything of
  that consumer up to the id), or with a redelivery request; a batch-index ack (an ack_set
  with bits still set) acknowledges part of a batch and completes nothing yet.
- A response nobody asked for is `unmatched`; a request left at close is `unanswered`.
  request_id -1 (all bits set) marks a broker's notification (CLOSE_PRODUCER/CLOSE_CONSUMER),
  which expects no answer.
Memory: pending requests and deliveries per connection are bounded (MAX_PENDING); the oldest
are reported unanswered when the bound is passed.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dissector.events import Direction, Frame
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_NAMES, COMMAND_TYPES, BaseCommand

#: Requests (and deliveries) awaiting an answer per connection before the oldest is dropped.
MAX_PENDING = 100_000
#: Acknowledged message ids remembered per consumer, to tell a repeated ack from a stray one.
ACKED_MEMORY = 10_000

T = COMMAND_TYPES
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT


def _field_names() -> dict[int, frozenset[str]]:
    out = {}
    for ctype, body_field in BODY_FIELDS.items():
        desc = BaseCommand.DESCRIPTOR.fields_by_name[body_field].message_type
        assert desc is not None
        out[ctype] = frozenset(f.name for f in desc.fields if not f.is_repeated)
    return out


_FIELDS = _field_names()  # type -> names of the singular fields of its sub-message


def _has(ctype: int, name: str) -> bool:
    return name in _FIELDS.get(ctype, ())


def _types_with(name: str) -> frozenset[int]:
    return frozenset(t for t, names in _FIELDS.items() if name in names)


# Per-frame checks are set lookups, not descriptor walks: the hot path runs once per frame.
_WITH_PRODUCER = _types_with("producer_id")
_WITH_CONSUMER = _types_with("consumer_id")
_WITH_SEQUENCE = _types_with("sequence_id")
_WITH_REQUEST = _types_with("request_id")
_WITH_TOPIC = _types_with("topic")


_RESPONSES = frozenset(
    t
    for t, n in COMMAND_NAMES.items()
    if n.endswith("_RESPONSE")
    or n in ("SUCCESS", "ERROR", "PRODUCER_SUCCESS", "WATCH_TOPIC_LIST_SUCCESS")
)
_FIFO_PAIRS = {
    T["PONG"]: T["PING"],
    T["AUTH_RESPONSE"]: T["AUTH_CHALLENGE"],
    T["CONNECTED"]: T["CONNECT"],
}
_FIFO_REQUESTS = frozenset(_FIFO_PAIRS.values())
_SEND, _SEND_RECEIPT, _SEND_ERROR = T["SEND"], T["SEND_RECEIPT"], T["SEND_ERROR"]
_MESSAGE, _ACK, _REDELIVER = T["MESSAGE"], T["ACK"], T["REDELIVER_UNACKNOWLEDGED_MESSAGES"]
_FAILED = {T["LOOKUP_RESPONSE"]: 2, T["PARTITIONED_METADATA_RESPONSE"]: 1}  # response == Failed
_NO_ID = (1 << 64) - 1  # request_id -1: brokers' CLOSE_PRODUCER/CONSUMER notifications
_CLOSES = frozenset({T["CLOSE_PRODUCER"], T["CLOSE_CONSUMER"]})


class Pair(NamedTuple):
    """One timeline row: a request and its response (either may be missing)."""

    conn_id: int
    request: Frame | None
    response: Frame | None
    outcome: str  # success | error | unanswered | unmatched | redelivered
    request_id: int | None
    producer_id: int | None
    consumer_id: int | None
    sequence_id: int | None
    ledger_id: int | None
    entry_id: int | None
    topic: str | None
    error_code: str | None
    error_message: str | None


@dataclass(slots=True)
class Entity:
    """A producer or consumer of the connection."""

    kind: str  # producer | consumer
    entity_id: int
    topic: str | None
    created_ts: int
    name: str | None = None
    subscription: str | None = None
    sub_type: str | None = None
    access_mode: str | None = None
    state: str = "pending"  # pending | created | failed | closed_by_client | closed_by_broker
    closed_ts: int | None = None
    permits: int = 0  # consumers: FLOW permits granted
    delivered: int = 0  # consumers: messages delivered (batch entries counted)
    sent: int = 0  # producers: messages sent (batch entries counted)


@dataclass(slots=True)
class Summary:
    """What the connection said about itself (for the conversations table)."""

    client_version: str | None = None
    server_version: str | None = None
    client_protocol: int | None = None
    server_protocol: int | None = None
    auth_method: str | None = None
    proxy_to_broker_url: str | None = None
    original_principal: str | None = None
    max_message_size: int | None = None
    feature_flags: list[str] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)


def _error(body: Any, ctype: int) -> tuple[str | None, str | None]:
    """(error code, message) when a response reports a failure."""
    code = message = None
    for name in ("error", "error_code"):
        if _has(ctype, name) and body.HasField(name):
            fd = body.DESCRIPTOR.fields_by_name[name]
            value = getattr(body, name)
            enum = fd.enum_type
            known = enum.values_by_number.get(value) if enum is not None else None
            code = known.name if known is not None else str(value)
    for name in ("message", "error_message"):
        if _has(ctype, name) and body.HasField(name):
            message = getattr(body, name)
    if code is None and ctype in _FAILED and body.response == _FAILED[ctype]:
        code = "Failed"
    return code, message


def _opposite(d: Direction) -> Direction:
    return B2C if d is C2B else C2B


class ConversationState:
    """State of one connection; see the module docstring."""

    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id
        self.summary = Summary()
        self.producers: dict[int, Entity] = {}
        self.consumers: dict[int, Entity] = {}
        self._by_request: dict[tuple[Direction, int], Frame] = {}  # (direction, request_id)
        self._sends: dict[tuple[int, int], deque[Frame]] = {}  # (producer_id, sequence_id)
        self._fifo: dict[tuple[Direction, int], deque[Frame]] = {}  # (direction, type)
        # consumer_id -> (ledger, entry) -> MESSAGE frame, in delivery order
        self._delivered: dict[int, OrderedDict[tuple[int, int], Frame]] = {}
        # consumer_id -> (ledger, entry) -> packet number of the ACK that acknowledged it
        self._acked_ids: dict[int, OrderedDict[tuple[int, int], int]] = {}
        self._pending = 0
        self.overflowed = 0

    # ------------------------------------------------------------------ public API

    def observe(self, frame: Frame) -> tuple[str | None, list[Pair]]:
        """Learn from one frame; return its topic and the pairs it completes."""
        ctype = frame.command_type
        body = frame.body
        pairs: list[Pair] = []
        if body is None:
            return None, pairs
        topic = self._entities(frame, ctype, body)
        if (
            ctype in _WITH_REQUEST
            and body.HasField("request_id")
            and not (ctype in _CLOSES and body.request_id == _NO_ID)
        ):
            rid = body.request_id
            if ctype in _RESPONSES:
                request = self._by_request.pop((_opposite(frame.direction), rid), None)
                if request is not None:
                    self._pending -= 1
                pairs.append(self._pair(request, frame, rid))
                self._responded(request, frame)
            else:
                self._remember(self._by_request, (frame.direction, rid), frame)
        if ctype == _SEND:
            key = (body.producer_id, body.sequence_id)
            self._sends.setdefault(key, deque()).append(frame)
            self._pending += 1
            self._count_sent(frame)
        elif ctype in (_SEND_RECEIPT, _SEND_ERROR):
            queue = self._sends.get((body.producer_id, body.sequence_id))
            request = queue.popleft() if queue else None
            if request is not None:
                self._pending -= 1
            pairs.append(self._pair(request, frame, None))
        elif ctype in _FIFO_REQUESTS:
            self._fifo.setdefault((frame.direction, ctype), deque()).append(frame)
            self._pending += 1
        elif ctype in _FIFO_PAIRS:
            queue = self._fifo.get((_opposite(frame.direction), _FIFO_PAIRS[ctype]))
            request = queue.popleft() if queue else None
            if request is not None:
                self._pending -= 1
            pairs.append(self._pair(request, frame, None))
            self._handshake(ctype, body)
        elif ctype == _MESSAGE:
            pairs.extend(self._deliver(frame, body))
        elif ctype in (_ACK, _REDELIVER):
            pairs.extend(self._acked(frame, ctype, body))
        if ctype == T["CONNECT"]:
            self._handshake(ctype, body)
        if self._pending > MAX_PENDING:
            pairs.extend(self._shed())
        return topic, pairs

    def close(self) -> list[Pair]:
        """End of the connection: every request still pending is unanswered."""
        pending: list[Frame] = list(self._by_request.values())
        for queue in self._sends.values():
            pending.extend(queue)
        for queue in self._fifo.values():
            pending.extend(queue)
        for delivered in self._delivered.values():
            pending.extend(delivered.values())
        pending.sort(key=lambda f: (f.last_ts, f.stream_offset))
        self._by_request.clear()
        self._sends.clear()
        self._fifo.clear()
        self._delivered.clear()
        self._acked_ids.clear()
        self._pending = 0
        self.summary.entities = [*self.producers.values(), *self.consumers.values()]
        return [self._pair(f, None, None) for f in pending]

    # ------------------------------------------------------------------ internals

    def _remember(self, table: dict[Any, Frame], key: Any, frame: Frame) -> None:
        if key not in table:
            self._pending += 1
        table[key] = frame

    def _shed(self) -> list[Pair]:
        """Too much pending: the oldest requests of every kind are declared unanswered."""
        self.overflowed += 1
        waiting: list[tuple[tuple[int, int], Frame, Any, Any]] = []
        for key, frame in self._by_request.items():
            waiting.append(((frame.last_ts, frame.stream_offset), frame, self._by_request, key))
        for queues in (self._sends, self._fifo):
            for queue in queues.values():
                for frame in queue:
                    waiting.append(((frame.last_ts, frame.stream_offset), frame, queue, None))
        for delivered in self._delivered.values():
            for mid, frame in delivered.items():
                waiting.append(((frame.last_ts, frame.stream_offset), frame, delivered, mid))
        waiting.sort(key=lambda w: w[0])
        target = MAX_PENDING * 9 // 10
        pairs = []
        for _, frame, store, key in waiting[: max(1, len(waiting) - target)]:
            if key is None:
                store.remove(frame)
            else:
                del store[key]
            pairs.append(self._pair(frame, None, None))
        self._pending = sum(len(q) for q in self._sends.values())
        self._pending += sum(len(q) for q in self._fifo.values())
        self._pending += len(self._by_request) + sum(len(d) for d in self._delivered.values())
        return pairs

    def _topic(self, frame: Frame | None) -> str | None:
        """The topic of a frame already observed: named by it, or of its producer/consumer."""
        if frame is None or frame.body is None:
            return None
        if frame.topic is not None:
            return frame.topic
        ctype, body = frame.command_type, frame.body
        for key, types, entities in (
            ("producer_id", _WITH_PRODUCER, self.producers),
            ("consumer_id", _WITH_CONSUMER, self.consumers),
        ):
            if ctype in types and body.HasField(key):
                entity = entities.get(getattr(body, key))
                return None if entity is None else entity.topic
        if ctype in _WITH_TOPIC and body.HasField("topic"):
            topic: str = body.topic
            return topic
        return None

    def _entities(self, frame: Frame, ctype: int, body: Any) -> str | None:
        if ctype == T["PRODUCER"]:
            p = Entity("producer", body.producer_id, body.topic, frame.last_ts)
            p.name = body.producer_name if body.HasField("producer_name") else None
            p.access_mode = _enum_name(body, "producer_access_mode")
            self.producers[body.producer_id] = p
            return p.topic
        if ctype == T["SUBSCRIBE"]:
            c = Entity("consumer", body.consumer_id, body.topic, frame.last_ts)
            c.subscription = body.subscription
            c.sub_type = _enum_name(body, "subType")
            c.name = body.consumer_name if body.HasField("consumer_name") else None
            self.consumers[body.consumer_id] = c
            return c.topic
        if ctype in _WITH_PRODUCER and body.HasField("producer_id"):
            entity = self.producers.get(body.producer_id)
            if entity is not None and ctype == T["CLOSE_PRODUCER"]:
                entity.state = "closed_by_client" if frame.direction is C2B else "closed_by_broker"
                entity.closed_ts = frame.last_ts
            return None if entity is None else entity.topic
        if ctype in _WITH_CONSUMER and body.HasField("consumer_id"):
            entity = self.consumers.get(body.consumer_id)
            if entity is not None:
                if ctype == T["CLOSE_CONSUMER"]:
                    entity.state = (
                        "closed_by_client" if frame.direction is C2B else "closed_by_broker"
                    )
                    entity.closed_ts = frame.last_ts
                elif ctype == T["FLOW"]:
                    entity.permits += body.messagePermits
            return None if entity is None else entity.topic
        if ctype in _WITH_TOPIC:
            fd = body.DESCRIPTOR.fields_by_name["topic"]
            if not fd.is_repeated and body.HasField("topic"):
                topic: str = body.topic
                return topic
        return None

    def _responded(self, request: Frame | None, response: Frame) -> None:
        """Entity lifecycle: PRODUCER / SUBSCRIBE answered."""
        if request is None or request.body is None:
            return
        rtype = request.command_type
        failed = response.command_type == T["ERROR"]
        if rtype == T["PRODUCER"]:
            entity = self.producers.get(request.body.producer_id)
            if entity is not None:
                entity.state = "failed" if failed else "created"
                if response.command_type == T["PRODUCER_SUCCESS"]:
                    entity.name = response.body.producer_name or entity.name
        elif rtype == T["SUBSCRIBE"]:
            entity = self.consumers.get(request.body.consumer_id)
            if entity is not None:
                entity.state = "failed" if failed else "created"

    def _count_sent(self, frame: Frame) -> None:
        entity = self.producers.get(frame.body.producer_id)
        if entity is not None:
            body = frame.body
            entity.sent += body.num_messages if body.HasField("num_messages") else 1

    def _deliver(self, frame: Frame, body: Any) -> list[Pair]:
        mid = body.message_id
        cid = body.consumer_id
        entity = self.consumers.get(cid)
        if entity is not None:
            meta = frame.metadata
            entity.delivered += meta.num_messages_in_batch if meta is not None else 1
        delivered = self._delivered.setdefault(cid, OrderedDict())
        key = (mid.ledgerId, mid.entryId)
        pairs = []
        old = delivered.pop(key, None)
        if old is not None:  # delivered again before any ack: the broker redelivered it
            pairs.append(self._pair(old, frame, None, ack_of=key, outcome="redelivered"))
        else:
            self._pending += 1
        delivered[key] = frame
        return pairs

    def _acked(self, frame: Frame, ctype: int, body: Any) -> list[Pair]:
        cid = body.consumer_id
        delivered = self._delivered.get(cid, OrderedDict())
        done = self._acked_ids.setdefault(cid, OrderedDict())
        ids = body.message_id if ctype == _ACK else body.message_ids
        pairs = []
        if ctype == _ACK and body.ack_type == 1:  # cumulative: all up to the id
            for mid in ids:
                upto = (mid.ledgerId, mid.entryId)
                for key in [k for k in delivered if k <= upto]:
                    pairs.append(self._pair(delivered.pop(key), frame, None, ack_of=key))
                    self._pending -= 1
                    self._remember_ack(done, key, frame)
            if not pairs and ids:
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
            pair = pair._replace(error_message=f"already acknowledged (packet {earlier})")
        return pair

    def _handshake(self, ctype: int, body: Any) -> None:
        s = self.summary
        if ctype == T["CONNECT"]:
            s.client_version = body.client_version
            s.client_protocol = body.protocol_version if body.HasField("protocol_version") else None
            s.auth_method = body.auth_method_name if body.HasField("auth_method_name") else None
            if s.auth_method is None and body.HasField("auth_method"):
                s.auth_method = _enum_name(body, "auth_method")
            if body.HasField("proxy_to_broker_url"):
                s.proxy_to_broker_url = body.proxy_to_broker_url
            if body.HasField("original_principal"):
                s.original_principal = body.original_principal
            if body.HasField("feature_flags"):
                s.feature_flags = [f.name for f, v in body.feature_flags.ListFields() if v]
        elif ctype == T["CONNECTED"]:
            s.server_version = body.server_version
            s.server_protocol = body.protocol_version if body.HasField("protocol_version") else None
            if body.HasField("max_message_size"):
                s.max_message_size = body.max_message_size

    def _pair(
        self,
        request: Frame | None,
        response: Frame | None,
        rid: int | None,
        *,
        ack_of: tuple[int, int] | None = None,
        outcome: str | None = None,
    ) -> Pair:
        ref = request if request is not None else response
        assert ref is not None
        body = ref.body
        ctype = ref.command_type
        producer_id = (
            body.producer_id if ctype in _WITH_PRODUCER and body.HasField("producer_id") else None
        )
        consumer_id = (
            body.consumer_id if ctype in _WITH_CONSUMER and body.HasField("consumer_id") else None
        )
        sequence_id = (
            body.sequence_id if ctype in _WITH_SEQUENCE and body.HasField("sequence_id") else None
        )
        if rid is None and ctype in _WITH_REQUEST and body.HasField("request_id"):
            rid = body.request_id
        ledger = entry = None
        if ack_of is not None:
            ledger, entry = ack_of
        elif ctype == _MESSAGE:
            ledger, entry = body.message_id.ledgerId, body.message_id.entryId
        elif response is not None and response.command_type == _SEND_RECEIPT:
            mid = response.body.message_id
            ledger, entry = mid.ledgerId, mid.entryId
        code = message = None
        if outcome is not None:
            pass
        elif response is None:
            outcome = "unanswered"
        elif request is None:
            outcome = "unmatched"
        elif response.command_type == _REDELIVER:
            outcome = "redelivered"
        else:
            code, message = _error(response.body, response.command_type)
            outcome = (
                "error" if code is not None or response.command_type == T["ERROR"] else "success"
            )
        topic = self._topic(request) or self._topic(response)
        return Pair(
            self.conn_id,
            request,
            response,
            outcome,
            rid,
            producer_id,
            consumer_id,
            sequence_id,
            ledger,
            entry,
            topic,
            code,
            message,
        )


def _enum_name(body: Any, name: str) -> str | None:
    if not body.HasField(name):
        return None
    fd = body.DESCRIPTOR.fields_by_name[name]
    value = getattr(body, name)
    known = fd.enum_type.values_by_number.get(value) if fd.enum_type is not None else None
    return known.name if known is not None else str(value)
