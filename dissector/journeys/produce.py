"""The producer's side of a journey: the producers' names, SEND, and the facts' answers.

Input: SEND frames of one connection (`HANDLERS`), its producers' lifecycle facts
(`on_life`: declared by PRODUCER, created by PRODUCER_SUCCESS, with the name each gives),
and the protocol facts' answer to each SEND (`answered`: the SEND_RECEIPT or SEND_ERROR
frame and the SEND it answers, as dissector.facts pairs them), with the joiner's index and
the connection's state.
Output: stored messages made (one per SEND, its batch entries as messages) and given their
id by the receipt; each handler returns the stored message the frame concerns, so the
messages extractor's entries that follow it can complete its messages.
Rules:
- Which SEND a receipt answers is the facts' to say (dissector.facts.acks: by producer and
  sequence id, oldest first); a SEND waits for that answer by its stream offset (the chunks
  of one message are one stored message with one answer due per chunk SEND).
- A batch (metadata num_messages_in_batch = n) is the messages its payload holds, else the
  claim bounded by its bytes (dissector.journeys.batches, dissector.facts.batches), indexes
  0 .. n-1, sequence ids the first's + index until the extractor gives the entries' own.
- A chunked message is one stored message from its first chunk's SEND; its id is the first
  chunk's receipt's, every chunk's id finds it, and its receipt time is its last chunk's.
- A receipt whose SEND the capture missed still makes a stored message (send unknown).
- Marker SENDs (replication, transactions) are not application messages: no journey.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissector.events import Frame, Lifecycle, LifeStep, Pair
from dissector.facts.batches import claimed, plain_bound
from dissector.journeys.batches import ClaimedBatch
from dissector.journeys.index import Index
from dissector.journeys.state import Conn, Producer, Stored, bounded_put
from dissector.pulsar.chunks import is_chunk
from dissector.pulsar.wire import COMMAND_TYPES, enum_name

T = COMMAND_TYPES
_SEND, _SEND_ERROR = T["SEND"], T["SEND_ERROR"]


def facts(ix: Index, s: Stored, meta: Any) -> None:
    """What the metadata says of the message, where `s` does not know it yet."""
    if meta is None:
        return
    if s.producer_name is None and meta.HasField("producer_name"):
        s.producer_name = ix.shared(meta.producer_name)
    if s.sequence_id is None and meta.HasField("sequence_id"):
        s.sequence_id = meta.sequence_id
    if s.publish_time is None and meta.HasField("publish_time"):
        s.publish_time = meta.publish_time
    if s.batch_size is None:
        s.batch_size = claimed(meta)


def entries(ix: Index, s: Stored) -> None:
    """The message of `s` when it is not a batch: the whole entry."""
    ix.msg(s, None, s.sequence_id)


def batch_entries(ix: Index, conn: Conn, frame: Frame, s: Stored) -> None:
    """The messages of the batch `s`: those its payload holds (dissector.journeys.batches),
    made as the extractor's rows of the frame name them."""
    assert s.batch_size is not None
    first = s.sequence_id

    def take(i: int | None) -> None:
        ix.msg(s, i, first if first is None or i is None else first + i)

    ix.batch = ClaimedBatch(conn.conn_id, s.batch_size, plain_bound(frame, frame.metadata), take)


def _sent(ix: Index, conn: Conn, frame: Frame, body: Any) -> Stored:
    s = ix.stored(frame.topic)
    s.produced = True
    s.producer_conn, s.producer_id = conn.conn_id, body.producer_id
    s.send_ts, s.send_packet = frame.last_ts, frame.last_packet
    facts(ix, s, frame.metadata)
    if s.producer_name is None:
        producer = conn.producers.get(body.producer_id)
        s.producer_name = None if producer is None else producer.name
    if s.sequence_id is None:
        s.sequence_id = body.sequence_id
    return s


def on_send(ix: Index, conn: Conn, frame: Frame, body: Any) -> Stored | None:
    if body.marker:
        return None
    meta = frame.metadata
    if meta is not None and is_chunk(meta):
        return _chunk(ix, conn, frame, body, meta)
    s = _sent(ix, conn, frame, body)
    if s.batch_size is None:
        entries(ix, s)
    else:
        batch_entries(ix, conn, frame, s)
    ix.wait(conn, s, frame, body.producer_id, body.sequence_id)
    return s


def _chunk(ix: Index, conn: Conn, frame: Frame, body: Any, meta: Any) -> Stored:
    """One chunk's SEND: the first makes the message, every one waits for a receipt."""
    key = (body.producer_id, meta.uuid)
    s = conn.sending.get(key)
    if (
        s is None
        or meta.chunk_id == 0
        or (s.waiting is not None and s.waiting[1:] != (body.producer_id, body.sequence_id))
    ):  # a first chunk, or one of another sequence id: another message
        s = _sent(ix, conn, frame, body)
        s.chunks = meta.num_chunks_from_msg
        s.batch_size = None
        entries(ix, s)
        ix.inflight(conn, False, key, s)
    ix.wait(conn, s, frame, body.producer_id, body.sequence_id)
    if meta.chunk_id >= meta.num_chunks_from_msg - 1:
        conn.sending.pop(key, None)
    return s


def answered(ix: Index, conn: Conn, frame: Frame, send: int | None) -> Stored | None:
    """The facts' answer to a SEND: `frame` (SEND_RECEIPT or SEND_ERROR) answers the SEND at
    stream offset `send` (None: a receipt whose SEND the capture missed); the stored message
    it concerns."""
    body = frame.body
    s = Index.answered(conn, send)
    if s is not None:
        ix.unname(s)
    if frame.command_type == _SEND_ERROR:
        if s is None:
            return None
        s.error = enum_name(body, "error")
        ix.unwait(s)  # every chunk of it failed
        return s
    if s is None:  # its SEND is not in the capture
        s = ix.stored(frame.topic)
        s.produced = True
        s.producer_conn, s.producer_id = conn.conn_id, body.producer_id
        s.sequence_id = body.sequence_id
        producer = conn.producers.get(body.producer_id)
        s.producer_name = None if producer is None else producer.name
        entries(ix, s)
    mid = body.message_id if body.HasField("message_id") else None
    if s.chunks is not None:
        s.chunk_receipts += 1
        if s.chunk_receipts < s.chunks:  # the message is not whole yet
            if mid is not None:
                _chunk_id(ix, s, mid)
            return s
    s.receipt_ts, s.receipt_packet = frame.last_ts, frame.last_packet
    if mid is not None:
        _chunk_id(ix, s, mid)
    return s


def _chunk_id(ix: Index, s: Stored, mid: Any) -> None:
    """The id of `s` (its first chunk's), else one more id that finds it (a chunk's)."""
    if s.ledger is None:
        ix.identify(s, mid.ledgerId, mid.entryId, mid.partition)
    else:
        ix.alias(s, mid.ledgerId, mid.entryId)


def on_life(ix: Index, conn: Conn, fact: Lifecycle) -> None:
    """A producer's step, as the facts tell it: declared (named as its PRODUCER names it),
    created (named as its PRODUCER_SUCCESS names it)."""
    if fact.step is LifeStep.DECLARED:
        bounded_put(conn.producers, fact.entity_id, Producer(fact.name))
    elif fact.step is LifeStep.CREATED:
        producer = conn.producers.get(fact.entity_id)
        if producer is not None:
            producer.name = fact.name


#: command type -> its handler (dissector.journeys.joiner.CommandStep)
HANDLERS: dict[int, Callable[..., Stored | None]] = {T["SEND"]: on_send}
#: The answers to a SEND: the facts pair each with its SEND (`answered`).
ANSWERS: frozenset[int] = frozenset({T["SEND_RECEIPT"], _SEND_ERROR})


def send_answer(pair: Pair) -> tuple[int | None, bool] | None:
    """What a completion fact tells the journeys (the joiner, and the fleet's recorder of
    its events): (the stream offset of the SEND answered, None when the facts found no SEND
    for the answer; whether an answer came: False for a SEND never answered), or None for a
    fact of no SEND."""
    request, response = pair.request, pair.response
    if response is not None:
        if response.command_type not in ANSWERS:
            return None
        return (None if request is None else request.stream_offset), True
    if request is not None and request.command_type == _SEND:
        return request.stream_offset, False
    return None
