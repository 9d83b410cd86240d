"""The consumers' side of a journey: the protocol facts of MESSAGE and ACK, per subscription.

Input: the facts of what a MESSAGE or ACK says of its consumer's messages (`FACTS`:
dissector.facts.consumed's `Delivering` and `AckedIds`: the consumer and its SUBSCRIBE, the
ids, the batch indexes an ack_set names, cumulative or not) with their frame (its metadata,
times and packet); its consumers' lifecycle facts (`on_life`: a SUBSCRIBE declared names
its subscription's type); the joiner's index
and the connection's state.
Output: deliveries and acks of stored messages in subscriptions; each fact's handler returns
the stored message a MESSAGE delivered (the extractor's entries that follow complete it).
Rules:
- A consumer means the subscription its SUBSCRIBE named (the facts' entity of its id); one
  whose SUBSCRIBE the capture missed is a subscription of its own, (connection, consumer
  id). A subscription's type is its latest SUBSCRIBE's.
- A MESSAGE finds its stored message by (topic, ledger, entry); else, by (topic, producer
  name, sequence id), a SEND still waiting for its receipt; else it makes one (the capture
  saw only this side). A batch's entries are those its payload holds
  (dissector.journeys.batches); its ack_set, when it names entries, those it delivers.
- A chunked message is delivered by its last chunk (the consumer can assemble it then);
  its first chunk's id finds it, and every chunk's id finds it again.
- An ACK of a whole entry acknowledges every message of it; of batch indexes, those the
  ack_set acknowledges among the entries known (a batch only acks showed: those of the
  words its first ack_set carries, ACK_WORD bits each, up to its claimed size). A
  cumulative ACK also acknowledges every message delivered to the subscription with a
  smaller id, on any connection (the journeys' own join, across connections). The first
  ack counts; an ack of a message whose delivery was not captured makes a delivery with
  `deliveries` 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissector.events import AckedId, AckedIds, Delivering, Frame, Lifecycle, LifeStep
from dissector.facts.batches import claimed, plain_bound
from dissector.facts.consumed import ACK_WORD, has
from dissector.journeys.batches import ClaimedBatch
from dissector.journeys.index import Index
from dissector.journeys.produce import entries, facts
from dissector.journeys.state import Conn, Msg, Stored, Sub
from dissector.pulsar.chunks import is_chunk
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES


def on_life(ix: Index, conn: Conn, fact: Lifecycle) -> None:
    """A consumer's step, as the facts tell it: a SUBSCRIBE names its subscription's type."""
    entity = fact.entity
    if fact.step is LifeStep.DECLARED and entity is not None:
        topic, name = entity.topic, entity.subscription
        assert name is not None  # a SUBSCRIBE names its subscription
        ix.sub((topic, name), topic, name, entity.sub_type)


def _sub(ix: Index, frame: Frame, fact: Delivering | AckedIds) -> Sub:
    """The subscription of the fact's consumer; one of its own when its SUBSCRIBE was
    missed."""
    c = fact.consumer
    if c is None:
        return ix.sub((fact.conn_id, fact.consumer_id), frame.topic, None, None)
    name = c.subscription
    assert name is not None  # a consumer's SUBSCRIBE names its subscription
    return ix.sub((c.topic, name), c.topic, name, None)


def _found(
    ix: Index, topic: str | None, ledger: int, entry: int, partition: int, meta: Any
) -> Stored:
    """The stored message a delivery of (ledger, entry) is of (made when the capture has
    none)."""
    s = ix.find(topic, ledger, entry)
    if s is None and meta is not None:
        name = meta.producer_name if meta.HasField("producer_name") else None
        s = ix.by_name(topic, name, meta.sequence_id)
        if s is not None:  # its SEND, whose receipt the capture has not (yet) shown
            ix.unname(s)
            ix.identify(s, ledger, entry, partition)
    if s is None:
        s = ix.stored(topic)
        facts(ix, s, meta)
        if meta is not None and is_chunk(meta):
            s.chunks = meta.num_chunks_from_msg
        ix.identify(s, ledger, entry, partition)
    else:
        facts(ix, s, meta)  # a receipt alone made it: what the metadata says
    return s


def on_delivering(ix: Index, conn: Conn, frame: Frame, fact: Delivering) -> Stored | None:
    """A MESSAGE's fact (`frame` is the MESSAGE)."""
    sub = _sub(ix, frame, fact)
    meta = frame.metadata
    topic = frame.topic if frame.topic is not None else sub.topic
    if meta is not None and is_chunk(meta):
        whole = _chunk(ix, conn, topic, fact, meta)
        if whole is None:
            return None
        s = whole
        n = None
    else:
        s = _found(ix, topic, fact.ledger, fact.entry, fact.partition, meta)
        n = claimed(meta) if meta is not None else s.batch_size
    be = frame.broker_entry
    if be is not None and be.HasField("broker_timestamp"):
        s.broker_ts = be.broker_timestamp
    if n is None:
        _deliver(ix, sub, frame, fact, s, None)
        return s
    ack_set = fact.ack_set

    def take(i: int | None) -> None:  # the entries it delivers
        if i is None or not ack_set or has(ack_set, i):
            _deliver(ix, sub, frame, fact, s, i)

    ix.batch = ClaimedBatch(conn.conn_id, n, plain_bound(frame, meta), take)
    return s


def _name(fact: Delivering | AckedIds) -> str | None:
    """The consumer's name, as its SUBSCRIBE said it."""
    return None if fact.consumer is None else fact.consumer.name


def _deliver(ix: Index, sub: Sub, frame: Frame, fact: Delivering, s: Stored, i: int | None) -> None:
    """Message `i` of `s` delivered to the consumer's subscription by this MESSAGE."""
    first = s.sequence_id
    m = ix.msg(s, i, first if i is None or first is None else first + i)
    name = _name(fact)
    d = ix.delivery(m, sub, fact.conn_id, fact.consumer_id, name)
    d.deliveries += 1
    if d.delivered_ts is None:
        d.delivered_ts, d.delivered_packet = frame.last_ts, frame.last_packet
        d.conn_id, d.consumer_id, d.consumer_name = fact.conn_id, fact.consumer_id, name
    d.redelivery_count = max(d.redelivery_count, fact.redelivery_count)
    ix.live(sub, s)


def _chunk(ix: Index, conn: Conn, topic: str | None, fact: Delivering, meta: Any) -> Stored | None:
    """One chunk delivered: the message when it is the last."""
    key = (fact.consumer_id, meta.uuid)
    s = conn.receiving.get(key)
    if s is None or meta.chunk_id == 0:
        s = _found(ix, topic, fact.ledger, fact.entry, fact.partition, meta)
        if s.chunks is None:  # found by its id: the wire says it is chunked
            s.chunks = meta.num_chunks_from_msg
        ix.inflight(conn, True, key, s)
    else:
        ix.alias(s, fact.ledger, fact.entry)
    if meta.chunk_id < meta.num_chunks_from_msg - 1:
        return None
    conn.receiving.pop(key, None)
    if not s.count():
        entries(ix, s)
    return s


def on_acked(ix: Index, conn: Conn, frame: Frame, fact: AckedIds) -> None:
    """An ACK's fact (`frame` is the ACK)."""
    sub = _sub(ix, frame, fact)
    topic = frame.topic if frame.topic is not None else sub.topic
    for a in fact.ids:
        if fact.cumulative:
            for before in list(ix.below(sub, a.ledger, a.entry)):
                for m in before.messages():
                    if m.delivery(sub) is not None:
                        _acked(ix, before, m, sub, frame, fact)
                sub.live.pop(before.serial, None)
        s = ix.find(topic, a.ledger, a.entry)
        if s is None and a.first_chunk is not None:
            s = ix.find(topic, *a.first_chunk)
        if s is None:
            s = _unseen(ix, topic, a)
            if s is None:
                continue
        if a.ack_set:
            for i in range(s.span):
                if not has(a.ack_set, i):
                    _acked(ix, s, ix.msg(s, i), sub, frame, fact)
        else:
            for m in list(s.messages()):
                _acked(ix, s, m, sub, frame, fact)
        ix.settled(sub, s)


def _acked(ix: Index, s: Stored, m: Msg, sub: Sub, frame: Frame, fact: AckedIds) -> None:
    """Message `m` of `s` acknowledged in `sub` by this ACK: its first ack counts, and with
    the SEND of `s` known its end-to-end latency is told (`Index.end_to_end`)."""
    d = Index.delivery(m, sub, fact.conn_id, fact.consumer_id, _name(fact))
    if d.acked_ts is None:
        ts = frame.last_ts
        d.acked_ts, d.acked_packet = ts, frame.last_packet
        told = ix.end_to_end
        if told is not None and s.send_ts is not None:
            told(s.topic, sub.name, ts - s.send_ts)


def _unseen(ix: Index, topic: str | None, a: AckedId) -> Stored | None:
    """A stored message acknowledged before the capture showed any of it: its entry, or
    of a batch-index ack the batch when the ack says its size (else nothing to name)."""
    if a.ack_set and a.batch_size is None:
        return None
    s = ix.stored(topic)
    ix.identify(s, a.ledger, a.entry, a.partition)
    if a.ack_set:
        assert a.batch_size is not None
        s.batch_size = a.batch_size
        s.span = min(s.batch_size, ACK_WORD * len(a.ack_set))
    else:
        ix.msg(s, None)
    return s


#: fact type -> its handler, given the fact's frame (the latest frame: its facts follow it)
FACTS: dict[type, Callable[..., Stored | None]] = {
    Delivering: on_delivering,
    AckedIds: on_acked,
}
#: The frames whose facts `FACTS` reads: the joiner keeps each (metadata, times, packet).
FRAMES: frozenset[int] = frozenset({T["MESSAGE"], T["ACK"]})
