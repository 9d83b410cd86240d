"""What the joiner remembers: stored messages, their deliveries, subscriptions, connections.

Input: nothing (records filled in by dissector.journeys.index, .produce and .consume).
Output: `Stored` (one SEND or one stored entry: what its batch entries share), `Msg` (one
application message: a batch entry, or the whole entry when not batched), `Delivery` (a
message's way to one subscription), `Sub` (a subscription), `Producer`, `Conn` (what one
connection's ids mean), and the bounds.
Rules: producer ids are only unique on their connection, so they live in its `Conn` (a
consumer id's subscription is the protocol facts' to say: dissector.facts.consumed);
subscriptions and stored messages span connections. Every collection is bounded
(the constants below): past a bound the oldest is forgotten, and a stored message pushed
out makes its rows at once (`Stored.evicted`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from dissector.events import TraceFormat

#: A message's trace context: trace_id, span_id, trace_format.
TraceIds = tuple[str, str | None, TraceFormat]
#: Who hears of each end-to-end latency as the join first knows it (`Index.end_to_end`):
#: called with (topic, subscription, end_to_end_us), the values of the row it will make.
EndToEnd = Callable[[str | None, str | None, int], None]

#: Application messages held for joining (batch entries counted): a message's rows wait
#: for the end of the capture because more deliveries and acks of it may come; past this
#: the oldest stored message makes its rows at once. About 0.9 KB each (a stored message,
#: its message and delivery, their index entries and integers: measured with tracemalloc,
#: issue 42), so about 90 MB at the bound.
MAX_HELD = 100_000
#: Characters of the values (--values: each message's JSON, up to 1 MiB) the held messages
#: keep for their rows: past it the oldest stored message makes its rows at once, as past
#: MAX_HELD (100,000 values of 1 MiB would otherwise be held until the end).
MAX_HELD_VALUE_BYTES = 32 << 20
#: Producers per connection, subscriptions, SENDs
#: waiting to be joined by producer name, chunked messages being sent or delivered: ids
#: and names come from the wire, so a flood of them must not grow memory without bound.
MAX_KEYS = 100_000
#: Producer names kept as one copy each however many messages name them (the latest ones).
MAX_NAMES = 1_000
#: Chunk ids that find one chunked message (each chunk is stored as an entry of its own):
#: a 5 GiB message in 5 MiB chunks has 1,024; the chunks of a longer run are not indexed
#: (an ack naming one of them finds nothing).
MAX_CHUNK_IDS = 10_000


class Delivery:
    """A message's way to one subscription (`sub`): its first delivery and first ack."""

    __slots__ = (
        "acked_packet", "acked_ts", "conn_id", "consumer_id", "consumer_name", "delivered_packet",
        "delivered_ts", "deliveries", "redelivery_count", "sub",
    )  # fmt: skip

    def __init__(self, sub: Sub, conn_id: int, consumer_id: int, consumer_name: str | None) -> None:
        self.sub = sub
        self.conn_id, self.consumer_id, self.consumer_name = conn_id, consumer_id, consumer_name
        self.delivered_ts: int | None = None
        self.delivered_packet: int | None = None
        self.acked_ts: int | None = None
        self.acked_packet: int | None = None
        self.deliveries = 0  # MESSAGE frames seen delivering it
        self.redelivery_count = 0  # the highest the broker said (MESSAGE.redelivery_count)

    def copy(self) -> Delivery:
        d = Delivery(self.sub, self.conn_id, self.consumer_id, self.consumer_name)
        d.fold(self)
        return d

    def fold(self, other: Delivery, keep_ack: bool = False) -> None:
        """Take in what `other` saw of the same message in the same subscription (the
        same message found twice before its id joined them): the earlier hops, the sum
        of the deliveries. keep_ack: its ack, when it has one, stays (its message's SEND is
        known: the end-to-end latency was told then, docs/journeys.md)."""
        if other.delivered_ts is not None and (
            self.delivered_ts is None or other.delivered_ts < self.delivered_ts
        ):
            self.delivered_ts, self.delivered_packet = other.delivered_ts, other.delivered_packet
            self.conn_id, self.consumer_id = other.conn_id, other.consumer_id
            self.consumer_name = other.consumer_name
        if other.acked_ts is not None and (
            self.acked_ts is None or (other.acked_ts < self.acked_ts and not keep_ack)
        ):
            self.acked_ts, self.acked_packet = other.acked_ts, other.acked_packet
        self.deliveries += other.deliveries
        self.redelivery_count = max(self.redelivery_count, other.redelivery_count)


class Sub:
    """A subscription: (topic, name), or a consumer whose SUBSCRIBE the capture missed.

    `live` holds the stored messages delivered to it with entries not acknowledged yet, by
    serial; `heap` orders their (ledger, entry, serial) by id for cumulative acks, lazily:
    entries whose serial is no longer live are skipped when they come up (a stale entry is
    three ints, never a stored message kept alive), and the heap is rebuilt when it holds
    more than 1.5 times what is live."""

    __slots__ = ("heap", "live", "name", "sub_type", "topic")

    def __init__(self, topic: str | None, name: str | None, sub_type: str | None) -> None:
        self.topic, self.name, self.sub_type = topic, name, sub_type
        self.live: dict[int, Stored] = {}
        self.heap: list[tuple[int, int, int]] = []


class Msg:
    """One application message: a batch entry (index >= 0) or a whole entry (None).

    Its deliveries, one per subscription (`delivery`, `deliveries`, `add`), are kept as
    None, the one Delivery (the common case: no dict), or a dict by subscription."""

    __slots__ = ("_subs", "index", "sequence_id", "trace", "value")

    def __init__(self, index: int | None, sequence_id: int | None = None) -> None:
        self.index = index
        self.sequence_id = sequence_id  # the entry's own, when the messages extractor said
        self._subs: Delivery | dict[Sub, Delivery] | None = None
        #: (trace_id, span_id, trace_format) from its properties, as the messages extractor
        #: read them from the first frame of it that carried them (SEND, else MESSAGE)
        self.trace: TraceIds | None = None
        #: --values: (value, value_schema, value_error) of its AppMessage (the SEND's
        #: first, else a delivery's; a decoded value wins over an error)
        self.value: tuple[str | None, str | None, str | None] | None = None

    def delivery(self, sub: Sub) -> Delivery | None:
        """Its delivery in `sub`, if any."""
        subs = self._subs
        if subs is None or type(subs) is Delivery:
            return subs if subs is not None and subs.sub is sub else None
        assert isinstance(subs, dict)
        return subs.get(sub)

    def deliveries(self) -> Collection[Delivery]:
        """Its deliveries, in the order their subscriptions first had it (a view)."""
        subs = self._subs
        if subs is None:
            return ()
        if type(subs) is Delivery:
            return (subs,)
        assert isinstance(subs, dict)
        return subs.values()

    def add(self, d: Delivery) -> None:
        """`d` is its delivery in `d.sub` (it has none there yet)."""
        subs = self._subs
        if subs is None:
            self._subs = d
        elif type(subs) is Delivery:
            self._subs = {subs.sub: subs, d.sub: d}
        else:
            assert isinstance(subs, dict)
            subs[d.sub] = d


class Stored:
    """One SEND (producer side) or one stored entry (consumer side): what its messages
    share. `serial` orders stored messages as first seen (rows come in that order).

    Held by the tens of thousands, so what most have one of is kept without a container:
    its messages (`messages`, `message`, `add`, `drop`) as None, the one Msg, or a dict by
    index; the ids indexed to it (`ids`) as None, the one (ledger, entry), or a list."""

    __slots__ = (
        "_ids", "_msgs", "batch_size", "broker_ts", "chunk_receipts", "chunks", "due", "entry",
        "error", "evicted", "inflight", "ledger", "partition", "produced", "producer_conn",
        "producer_id", "producer_name", "publish_time", "receipt_packet", "receipt_ts",
        "send_packet", "send_ts", "sequence_id", "serial", "span", "topic", "waiting",
    )  # fmt: skip

    def __init__(self, serial: int, topic: str | None) -> None:
        self.serial, self.topic = serial, topic
        self.ledger: int | None = None
        self.entry: int | None = None
        self.partition = -1  # the id's, when the wire gives one
        self._ids: tuple[int, int] | list[tuple[int, int]] | None = None  # see `ids`
        self.producer_name: str | None = None
        self.sequence_id: int | None = None  # the SEND's (a batch's first entry's)
        self.publish_time: int | None = None  # ms
        self.batch_size: int | None = None  # None: not batched (or not known); as claimed
        #: batch entries a batch-index ack may name: 1 + the highest index of its messages,
        #: or for a batch only acks showed, 64 per word of its first ack_set (bounded by the
        #: claim)
        self.span = 0
        self.chunks: int | None = None  # chunked: chunks of the message
        self.chunk_receipts = 0
        self.produced = False  # its SEND or receipt was seen
        self.producer_conn: int | None = None
        self.producer_id: int | None = None
        self.send_ts: int | None = None
        self.send_packet: int | None = None
        self.receipt_ts: int | None = None
        self.receipt_packet: int | None = None
        self.error: str | None = None  # SEND_ERROR's ServerError
        self.broker_ts: int | None = None  # broker entry metadata's timestamp, ms
        self._msgs: Msg | dict[int | None, Msg] | None = None
        # (conn_id, producer_id, sequence_id) while it waits for its receipt(s), and how
        # many are due (one per chunk sent: the facts answer each SEND, `Conn.sends`)
        self.waiting: tuple[int, int, int] | None = None
        self.due = 0
        # where a chunked message waits for its next chunk: (conn_id, receiving, key) of
        # Conn.sending / Conn.receiving (some may be gone: checked when used); None: nowhere
        self.inflight: list[tuple[int, bool, tuple[int, str]]] | None = None
        self.evicted = False

    # ------------------------------------------------------------------ its messages

    def messages(self) -> Collection[Msg]:
        """Its messages (a view: copy it to add or drop while going through it)."""
        msgs = self._msgs
        if msgs is None:
            return ()
        if type(msgs) is Msg:
            return (msgs,)
        assert isinstance(msgs, dict)
        return msgs.values()

    def message(self, index: int | None) -> Msg | None:
        msgs = self._msgs
        if msgs is None or type(msgs) is Msg:
            return msgs if msgs is not None and msgs.index == index else None
        assert isinstance(msgs, dict)
        return msgs.get(index)

    def count(self) -> int:
        msgs = self._msgs
        if msgs is None or isinstance(msgs, Msg):
            return 0 if msgs is None else 1
        return len(msgs)

    def add(self, m: Msg) -> None:
        """`m` is its message `m.index` (it has none of that index yet)."""
        msgs = self._msgs
        if msgs is None:
            self._msgs = m
        elif type(msgs) is Msg:
            self._msgs = {msgs.index: msgs, m.index: m}
        else:
            assert isinstance(msgs, dict)
            msgs[m.index] = m

    def drop(self, index: int | None) -> None:
        msgs = self._msgs
        if type(msgs) is Msg:
            if msgs.index == index:
                self._msgs = None
        elif msgs is not None:
            assert isinstance(msgs, dict)
            msgs.pop(index, None)

    def forget(self) -> None:
        """Merged into another record: let go of its messages and places."""
        self._msgs = None
        self.inflight = None

    # ------------------------------------------------------------------ its ids

    def ids(self) -> Sequence[tuple[int, int]]:
        """Every (ledger, entry) indexed to it (its id, its chunks'; a view: copy it to add
        or drop while going through it)."""
        ids = self._ids
        if ids is None:
            return ()
        if type(ids) is tuple:
            return (ids,)
        assert isinstance(ids, list)
        return ids

    def add_id(self, key: tuple[int, int]) -> None:
        ids = self._ids
        if ids is None:
            self._ids = key
        elif type(ids) is tuple:
            self._ids = [ids, key]
        else:
            assert isinstance(ids, list)
            ids.append(key)

    def drop_id(self, key: tuple[int, int]) -> None:
        ids = self._ids
        if type(ids) is tuple:
            if ids == key:
                self._ids = None
        elif ids is not None:
            assert isinstance(ids, list)
            if key in ids:
                ids.remove(key)


@dataclass(slots=True)
class Producer:
    name: str | None  # PRODUCER's producer_name, else PRODUCER_SUCCESS's


@dataclass(slots=True)
class Conn:
    """What one connection's ids mean, and its messages on their way."""

    conn_id: int
    producers: dict[int, Producer] = field(default_factory=dict)
    #: stream offset of a SEND -> its stored message, until the protocol facts answer that
    #: SEND (receipted, failed or unanswered: dissector.facts pairs them, bounded there);
    #: a message that stopped waiting (`Stored.waiting` None) is found by none of them
    sends: dict[int, Stored] = field(default_factory=dict)
    #: (producer_id, uuid) -> the chunked message being sent; (consumer_id, uuid) -> the
    #: chunked message being delivered
    sending: dict[tuple[int, str], Stored] = field(default_factory=dict)
    receiving: dict[tuple[int, str], Stored] = field(default_factory=dict)


K = TypeVar("K")
V = TypeVar("V")


def value_bytes(s: Stored) -> int:
    """Characters of the values its messages keep (MAX_HELD_VALUE_BYTES)."""
    return sum(len(m.value[0] or "") for m in s.messages() if m.value is not None)


def bounded_put(table: dict[K, V], key: K, value: V) -> None:
    """table[key] = value, forgetting the oldest key beyond MAX_KEYS."""
    table[key] = value
    if len(table) > MAX_KEYS:
        del table[next(iter(table))]
