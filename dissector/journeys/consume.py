"""The consumers' side of a journey: SUBSCRIBE, MESSAGE and ACK, per subscription.

Input: those frames of one connection (`HANDLERS`), with the joiner's index and the
connection's state.
Output: deliveries and acks of stored messages in subscriptions; each handler returns the
stored message a MESSAGE delivered (the extractor's entries that follow complete it).
Rules:
- A consumer id means the subscription its connection's SUBSCRIBE named; one whose
  SUBSCRIBE the capture missed is a subscription of its own, (connection, consumer id).
- A MESSAGE finds its stored message by (topic, ledger, entry); else, by (topic, producer
  name, sequence id), a SEND still waiting for its receipt; else it makes one (the capture
  saw only this side). A batch's entries are those its payload holds
  (dissector.journeys.batches); its `ack_set`, when set, names those it delivers (set bits).
- A chunked message is delivered by its last chunk (the consumer can assemble it then);
  its first chunk's id finds it, and every chunk's id finds it again.
- An ACK without ack_set acknowledges every message of the entry it names; with one,
  those whose bits are clear, among the entries known (a batch only acks showed: those of
  the words its first ack_set carries, ACK_WORD bits each, up to its claimed size). A
  cumulative ACK also acknowledges every message delivered to the subscription with a
  smaller id. The first ack counts; an ack of a message whose delivery was not captured
  makes a delivery with `deliveries` 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissector.events import Frame
from dissector.facts.batches import bounded, claimed, plain_bound
from dissector.journeys.batches import ClaimedBatch
from dissector.journeys.index import Index
from dissector.journeys.produce import entries, facts
from dissector.journeys.state import (
    ACK_WORD,
    Conn,
    Consumer,
    Msg,
    Stored,
    bounded_put,
)
from dissector.pulsar.chunks import is_chunk
from dissector.pulsar.wire import COMMAND_TYPES, enum_name

T = COMMAND_TYPES
_CUMULATIVE = 1


def on_subscribe(ix: Index, conn: Conn, frame: Frame, body: Any) -> None:
    topic, name = body.topic, body.subscription
    sub = ix.sub((topic, name), topic, name, enum_name(body, "subType"))
    consumer_name = body.consumer_name if body.HasField("consumer_name") else None
    bounded_put(conn.consumers, body.consumer_id, Consumer(sub, consumer_name))


def _consumer(ix: Index, conn: Conn, frame: Frame, cid: int) -> Consumer:
    """The consumer of `cid`; a subscription of its own when its SUBSCRIBE was missed."""
    c = conn.consumers.get(cid)
    if c is None:
        c = Consumer(ix.sub((conn.conn_id, cid), frame.topic, None, None), None)
        bounded_put(conn.consumers, cid, c)
    return c


def _bit(ack_set: Any, i: int) -> bool:
    """Bit i of a BitSet as Java's toLongArray() words carry it (signed 64-bit words)."""
    word = i >> 6
    return word < len(ack_set) and bool((ack_set[word] >> (i & 63)) & 1)


def _partial(ack_set: Any) -> bool:
    """An ack_set with bits set: some entries are left out."""
    return len(ack_set) > 0 and any(ack_set)


def _found(ix: Index, topic: str | None, mid: Any, meta: Any) -> Stored:
    """The stored message a delivery of `mid` is of (made when the capture has none)."""
    ledger, entry = mid.ledgerId, mid.entryId
    s = ix.find(topic, ledger, entry)
    if s is None and meta is not None:
        name = meta.producer_name if meta.HasField("producer_name") else None
        s = ix.by_name(topic, name, meta.sequence_id)
        if s is not None:  # its SEND, whose receipt the capture has not (yet) shown
            ix.unname(s)
            ix.identify(s, ledger, entry, mid.partition)
    if s is None:
        s = ix.stored(topic)
        facts(ix, s, meta)
        if meta is not None and is_chunk(meta):
            s.chunks = meta.num_chunks_from_msg
        ix.identify(s, ledger, entry, mid.partition)
    else:
        facts(ix, s, meta)  # a receipt alone made it: what the metadata says
    return s


def on_message(ix: Index, conn: Conn, frame: Frame, body: Any) -> Stored | None:
    c = _consumer(ix, conn, frame, body.consumer_id)
    mid, meta = body.message_id, frame.metadata
    topic = frame.topic if frame.topic is not None else c.sub.topic
    if meta is not None and is_chunk(meta):
        whole = _chunk(ix, conn, c, topic, body, meta)
        if whole is None:
            return None
        s = whole
        n = None
    else:
        s = _found(ix, topic, mid, meta)
        n = claimed(meta) if meta is not None else s.batch_size
    be = frame.broker_entry
    if be is not None and be.HasField("broker_timestamp"):
        s.broker_ts = be.broker_timestamp
    if n is None:
        _deliver(ix, c, conn, frame, body, s, None)
        return s
    ack_set = body.ack_set
    partial = _partial(ack_set)

    def take(i: int | None) -> None:  # set bits: the entries delivered
        if i is None or not partial or _bit(ack_set, i):
            _deliver(ix, c, conn, frame, body, s, i)

    ix.batch = ClaimedBatch(conn.conn_id, n, plain_bound(frame, meta), take)
    return s


def _deliver(
    ix: Index, c: Consumer, conn: Conn, frame: Frame, body: Any, s: Stored, i: int | None
) -> None:
    """Message `i` of `s` delivered to the consumer's subscription by this MESSAGE."""
    first = s.sequence_id
    m = ix.msg(s, i, first if i is None or first is None else first + i)
    d = ix.delivery(m, c.sub, conn.conn_id, body.consumer_id, c.name)
    d.deliveries += 1
    if d.delivered_ts is None:
        d.delivered_ts, d.delivered_packet = frame.last_ts, frame.last_packet
        d.conn_id, d.consumer_id, d.consumer_name = conn.conn_id, body.consumer_id, c.name
    d.redelivery_count = max(d.redelivery_count, body.redelivery_count)
    ix.live(c.sub, s)


def _chunk(
    ix: Index, conn: Conn, c: Consumer, topic: str | None, body: Any, meta: Any
) -> Stored | None:
    """One chunk delivered: the message when it is the last."""
    key = (body.consumer_id, meta.uuid)
    mid = body.message_id
    s = conn.receiving.get(key)
    if s is None or meta.chunk_id == 0:
        s = _found(ix, topic, mid, meta)
        if s.chunks is None:  # found by its id: the wire says it is chunked
            s.chunks = meta.num_chunks_from_msg
        ix.inflight(conn, True, key, s)
    else:
        ix.alias(s, mid.ledgerId, mid.entryId)
    if meta.chunk_id < meta.num_chunks_from_msg - 1:
        return None
    conn.receiving.pop(key, None)
    if not s.count():
        entries(ix, s)
    return s


def on_ack(ix: Index, conn: Conn, frame: Frame, body: Any) -> None:
    c = _consumer(ix, conn, frame, body.consumer_id)
    topic = frame.topic if frame.topic is not None else c.sub.topic
    for mid in body.message_id:
        if body.ack_type == _CUMULATIVE:
            for before in list(ix.below(c.sub, mid.ledgerId, mid.entryId)):
                for m in before.messages():
                    if m.delivery(c.sub) is not None:
                        _acked(m, c, conn, frame, body)
                c.sub.live.pop(before.serial, None)
        s = ix.find(topic, mid.ledgerId, mid.entryId)
        if s is None and mid.HasField("first_chunk_message_id"):
            first = mid.first_chunk_message_id
            s = ix.find(topic, first.ledgerId, first.entryId)
        partial = _partial(mid.ack_set)
        if s is None:
            s = _unseen(ix, topic, mid, partial)
            if s is None:
                continue
        if partial:
            for i in range(s.span):
                if not _bit(mid.ack_set, i):
                    _acked(ix.msg(s, i), c, conn, frame, body)
        else:
            for m in list(s.messages()):
                _acked(m, c, conn, frame, body)
        ix.settled(c.sub, s)


def _acked(m: Msg, c: Consumer, conn: Conn, frame: Frame, body: Any) -> None:
    d = Index.delivery(m, c.sub, conn.conn_id, body.consumer_id, c.name)
    if d.acked_ts is None:
        d.acked_ts, d.acked_packet = frame.last_ts, frame.last_packet


def _unseen(ix: Index, topic: str | None, mid: Any, partial: bool) -> Stored | None:
    """A stored message acknowledged before the capture showed any of it: its entry, or
    of a batch-index ack the batch when the ack says its size (else nothing to name)."""
    if partial and (not mid.HasField("batch_size") or mid.batch_size < 1):
        return None
    s = ix.stored(topic)
    ix.identify(s, mid.ledgerId, mid.entryId, mid.partition)
    if partial:
        s.batch_size = bounded(mid.batch_size)
        s.span = min(s.batch_size, ACK_WORD * len(mid.ack_set))
    else:
        ix.msg(s, None)
    return s


#: command type -> its handler (dissector.journeys.joiner.CommandStep)
HANDLERS: dict[int, Callable[..., Stored | None]] = {
    T["SUBSCRIBE"]: on_subscribe,
    T["MESSAGE"]: on_message,
    T["ACK"]: on_ack,
}
