"""The joiner: pipeline events in, message journeys out. Sans-IO.

Input: the events the pipeline already makes, in order (`feed`): frames (SEND, MESSAGE,
ACK, the answers to SENDs; the others are passed over), the producers' and consumers'
lifecycle facts (`Lifecycle`: their names and subscriptions' types), the protocol facts'
answers to SENDs (`Pair`s of dissector.facts whose request or response is a SEND,
SEND_RECEIPT or SEND_ERROR: receipted, failed, never answered) and of what each MESSAGE and
ACK says of its consumer's messages (`Delivering`, `AckedIds`), the messages extractor's
`AppMessage`s (batch entries' own sequence ids, each message's trace context from its
properties), connections opening and ending; then `finish` at the end of the capture (or
group).
Output: `Journey` records (dissector.events): from `feed` for messages the bound pushed
out, from `finish` for every other message, in the order their messages were first seen.
Rules (docs/journeys.md says them with the wire's reasons):
- Made only when the journeys table is asked for (dissector.tables.builders): it costs the
  other reads nothing. It reads frames one by one: a read that makes it takes no frame runs
  (FrameRun events are passed over).
- Which SEND a receipt or SEND_ERROR answers is the facts' (`answer`; the read plan makes
  them when journeys are asked for): the joiner keeps no queue of SENDs of its own. What a
  MESSAGE or ACK delivers or acknowledges, and to which consumer's subscription, is the
  facts' too (dissector.facts.consumed): the joiner reads no consumer id, message id or
  ack_set from a frame; it joins those facts across connections (dissector.journeys.consume).
- Each command type has one handler (`DISPATCH`, from the HANDLERS of dissector.journeys.
  produce), each fact of a MESSAGE or ACK (`consume.FACTS`, given its frame: the latest),
  and each lifecycle fact, by its entity's kind (`LIVES`: the steps in `LIFE_STEPS`); a
  handler returns the stored message its frame concerns, and the `AppMessage`s that follow
  that frame (the pipeline publishes a frame's messages right after it) give its batch
  entries their own sequence ids, each message its trace context (read once, by the messages
  extractor: the first frame that has one gives it), and its messages their values
  (--values); a batch's rows say which entries it holds (dissector.journeys.batches),
  settled by the next frame or connection event.
- Ids are per connection (`Index.conns`), dropped when the connection ends; stored
  messages and subscriptions span connections.
- `end_to_end` (given only when metrics are asked for: None costs nothing) hears each
  row's end-to-end latency once, as (topic, subscription, end_to_end_us), when the join
  first knows it (the first ack of a message whose SEND is known), not when its rows are
  made (dissector.journeys.index).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dissector.events import (
    AckedIds,
    AppMessage,
    Conversation,
    ConversationOpened,
    Delivering,
    EntityKind,
    Frame,
    Journey,
    Lifecycle,
    LifeStep,
    Pair,
)
from dissector.journeys import consume, produce
from dissector.journeys.index import Index
from dissector.journeys.rows import journeys
from dissector.journeys.state import Conn, EndToEnd, Stored

#: What a command handler does with one frame: the stored message it concerns, if any.
CommandStep = Callable[[Index, Conn, Frame, Any], Stored | None]
DISPATCH: dict[int, CommandStep] = {**produce.HANDLERS}
#: The frames the joiner reads: those it handles, the answers to SENDs and the MESSAGEs and
#: ACKs (their facts follow them).
COMMANDS = frozenset(DISPATCH) | produce.ANSWERS | consume.FRAMES
#: A producer's or consumer's lifecycle fact -> its handler, by kind; the steps they read.
LIVES = {EntityKind.PRODUCER: produce.on_life, EntityKind.CONSUMER: consume.on_life}
LIFE_STEPS = frozenset({LifeStep.DECLARED, LifeStep.CREATED})
#: Events that come after every row of the frame before them (anomalies of a frame come
#: among its rows: they settle nothing).
_SETTLING = (Frame, ConversationOpened, Conversation, Lifecycle)


class Joiner:
    """Journeys of one capture (or group of captures); see the module docstring."""

    def __init__(self, *, values: bool = False, end_to_end: EndToEnd | None = None) -> None:
        self.ix = Index()
        self.ix.end_to_end = end_to_end  # told each end-to-end latency (module rules)
        self.values = values  # asked for: a message without one says why (rows.NO_VALUE)
        self._current: Stored | None = None  # the stored message of the latest frame
        self._current_conn = 0
        self._frame: Frame | None = None  # the latest frame (a SEND's answer: its fact follows)

    def feed(self, ev: object) -> list[Journey]:
        """One pipeline event; the journeys of messages the bound pushed out."""
        kind = type(ev)
        if kind is AppMessage:
            assert isinstance(ev, AppMessage)
            self._entry(ev)
            return []
        if self.ix.batch is not None and kind in _SETTLING:
            self._settle()
        if kind is Pair:
            assert isinstance(ev, Pair)
            return self._pair(ev)
        if kind is Delivering or kind is AckedIds:
            assert isinstance(ev, (Delivering, AckedIds))
            return self._consumed(ev)
        if kind is Frame:
            assert isinstance(ev, Frame)
            self._current = None
            self._frame = ev
            handler = DISPATCH.get(ev.command_type)
            if handler is not None and ev.body is not None:
                self._current = handler(self.ix, self.ix.conn(ev.conn_id), ev, ev.body)
                self._current_conn = ev.conn_id
                self.ix.check_bound()
                if self.ix.evicted:
                    return self._evicted()
        elif kind is Lifecycle:
            assert isinstance(ev, Lifecycle)
            self._current = None  # its frame's: none
            if ev.step in LIFE_STEPS:
                LIVES[ev.kind](self.ix, self.ix.conn(ev.conn_id), ev)
        elif kind is ConversationOpened:
            assert isinstance(ev, ConversationOpened)
            self.ended(ev.conn_id)  # a connection id reused: the old one's ids mean nothing
        elif kind is Conversation:
            assert isinstance(ev, Conversation)
            self.ended(ev.conn_id)
        return []

    @property
    def latest(self) -> Frame | None:
        """The latest frame fed (the facts of a frame follow it)."""
        return self._frame

    def answer(self, conn_id: int, send: int | None, frame: Frame | None) -> list[Journey]:
        """The facts' answer to a SEND of connection `conn_id` at stream offset `send` (None:
        the facts found no SEND for it): `frame`, its SEND_RECEIPT or SEND_ERROR, or None
        when none came (the SEND is unanswered); the journeys of messages the bound pushed
        out."""
        if frame is None:
            known = self.ix.conns.get(conn_id)
            if known is not None:
                Index.answered(known, send)  # waits no more (a bound, its connection's end)
            return []
        conn = self.ix.conn(conn_id)
        self._current = produce.answered(self.ix, conn, frame, send)
        self._current_conn = conn_id
        self.ix.check_bound()
        return self._evicted() if self.ix.evicted else []

    def finish(self) -> Iterator[Journey]:
        """The capture ended: every message still held makes its rows, made as they are
        read (each stored message let go once its rows are made)."""
        self._settle()
        out = self._evicted()
        held = self.ix.drain()
        self.ix.conns.clear()
        self._current = self._frame = None
        yield from out
        held.reverse()
        while held:
            yield from journeys(held.pop(), self.values)

    def ended(self, conn_id: int) -> None:
        """Connection `conn_id` ended (as a `Conversation` event says): its ids mean nothing
        any more, and receipts can no longer come on it."""
        conn = self.ix.conns.pop(conn_id, None)
        if conn is None:
            return
        for s in conn.sends.values():  # their receipts can no longer come
            if s.waiting is not None and s.waiting[0] == conn_id:
                s.waiting, s.due = None, 0

    # ------------------------------------------------------------------ internals

    def _settle(self) -> None:
        """The rows of the latest batched frame are all here: its entries are known."""
        batch, self.ix.batch = self.ix.batch, None
        if batch is not None:
            batch.settle()

    def _pair(self, pair: Pair) -> list[Journey]:
        """A completion fact: those of a SEND are its answer (`answer`), the others are
        passed over (deliveries and acks are read from their frames)."""
        told = produce.send_answer(pair)
        if told is None:
            return []
        send, came = told
        if not came:
            return self.answer(pair.conn_id, send, None)
        response = pair.response
        assert response is not None  # an answer came
        frame = self._frame  # the published answer, its topic set
        if frame is None or frame[:3] != response[:3]:  # conn_id, direction, offset
            frame = response._replace(topic=pair.topic)
        return self.answer(pair.conn_id, send, frame)

    def _consumed(self, fact: Delivering | AckedIds) -> list[Journey]:
        """The fact of the latest frame, a MESSAGE or ACK; the journeys of messages the
        bound pushed out."""
        frame = self._frame
        if frame is None or frame.conn_id != fact.conn_id:  # not its frame's: nothing to read
            return []
        conn = self.ix.conn(fact.conn_id)
        self._current = consume.FACTS[type(fact)](self.ix, conn, frame, fact)
        self._current_conn = fact.conn_id
        self.ix.check_bound()
        return self._evicted() if self.ix.evicted else []

    def _evicted(self) -> list[Journey]:
        out: list[Journey] = []
        for s in self.ix.take_evicted():
            out.extend(journeys(s, self.values))
        return out

    def _entry(self, m: AppMessage) -> None:
        """A message of the latest frame: a batch entry's own sequence id, the message's
        trace context (a batch entry's own, from its properties), its value (--values)."""
        s = self._current
        if s is None or m.conn_id != self._current_conn:
            return
        batch = self.ix.batch
        if batch is not None and m.conn_id == batch.conn_id:
            batch.entry(m.batch_index)
        msg = s.message(m.batch_index)
        if msg is None:
            return
        if m.batch_index is not None and m.sequence_id is not None:
            msg.sequence_id = m.sequence_id
        if msg.trace is None and m.trace_format is not None:
            assert m.trace_id is not None
            msg.trace = (m.trace_id, m.span_id, m.trace_format)
        valued = m.value_schema is not None or m.value_error is not None  # --values
        if valued and (msg.value is None or (msg.value[0] is None and m.value is not None)):
            if m.value is not None and s in self.ix.held:  # what the bound counts
                self.ix.held_value_bytes += len(m.value)
            msg.value = (m.value, m.value_schema, m.value_error)
