"""Subscriptions across connections: consumer.redelivered_after_ack, and what a SEEK resets.

Input: from the per-connection rules (through dissector.diagnose.spanning), deliveries and
acks (with the ACK frame) of subscribed consumers; from spanning's handlers, SEEK requests,
their answers (SUCCESS or ERROR) and SUBSCRIBEs; at the end, the context to emit into
(`finish`).
Output: finding consumer.redelivered_after_ack, one row per connection where a
subscription's acknowledged messages were delivered again: that connection's MESSAGEs and
the ACK packets that had acknowledged them (wherever they were) as evidence, the summary
naming the connections of those ACKs.
Rules:
- A MESSAGE for an id the subscription acknowledged (individually, or up to a cumulative
  ack) after its delivery was captured is redelivered after ack; a batch-index ack with
  bits still set acknowledges nothing, nor does an ACK in a transaction (the consumer rules
  pass neither on). An id's ack is its first (the earliest proof).
- Unless the MESSAGE may have been on its way before the broker could have seen the ACK
  (the ACK crossing it on the wire, within the connection's round trip or during the
  dispatch that read it: dissector.diagnose.crossing): then it proves nothing.
- A SEEK moves the cursor on purpose. From the SEEK to its answer the broker disconnects
  the subscription's consumers (CLOSE_CONSUMER) and resets the cursor, which overrides
  every ack reaching it meanwhile (Apache Pulsar's resetCursor; a Java client's grouped ACK
  may go out right after the SEEK): deliveries then are not judged and acks are held.
  SUCCESS forgets the subscription's acks, held ones too; ERROR (no reset) makes the held
  acks count; a SUBSCRIBE of the subscription on another connection while the answer is
  pending (its connection dropped) forgets them too, the seek having perhaps been done. An
  ack after the answer counts as any other; a redelivery found before a seek stays found.
Memory: at most MAX_KEYS subscriptions and pending SEEKs; acked ids (and acks held) at most
dissector.facts.bounds.MAX_PENDING per subscription (as many as the facts keep deliveries
unacknowledged on a connection: an id acked longer ago is no longer told apart); at most
MAX_CUMULATIVE cumulative acks per subscription (an id below the oldest kept counts as acked
by it), MAX_ROWS connections with redeliveries per subscription (later ones are not told),
MAX_EVIDENCE ACK packets and connections per row.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

from dissector.diagnose import crossing
from dissector.diagnose.state import (
    MAX_EVIDENCE,
    MAX_KEYS,
    ConnState,
    ConsumerState,
    Context,
    Evidence,
    bounded,
    finding,
)
from dissector.events import Frame
from dissector.facts.bounds import MAX_PENDING
from dissector.findings import FindingCode

Id = tuple[int, int]  # (ledger, entry)
AckedSubKey = tuple[str | None, str]  # (topic, subscription)
#: Cumulative acks remembered per subscription (each moves the cursor further).
MAX_CUMULATIVE = 64
#: Connections with redeliveries told per subscription.
MAX_ROWS = 1_000


class _Ack(NamedTuple):
    """The ACK that acknowledged an id: where and when."""

    packet: int
    ts: int
    conn_id: int


@dataclass(slots=True)
class _Again:
    """A subscription's acknowledged messages delivered again on one connection."""

    conn: ConnState
    messages: Evidence = field(default_factory=Evidence)
    acks: dict[int, int] = field(default_factory=dict)  # their ACKs: packet -> time
    ack_conns: list[int] = field(default_factory=list)  # where those ACKs were, in order

    def add(self, f: Frame, ack: _Ack) -> None:
        self.messages.add(f)
        if ack.packet not in self.acks and len(self.acks) < MAX_EVIDENCE:
            self.acks[ack.packet] = ack.ts
        if ack.conn_id not in self.ack_conns and len(self.ack_conns) < MAX_EVIDENCE:
            self.ack_conns.append(ack.conn_id)

    def evidence(self) -> Evidence:
        """The MESSAGEs, and the ACKs (count 0: they show it, they are no more cases)."""
        ev = Evidence()
        for packet, ts in sorted(self.acks.items()):
            ev.add_at(packet, ts, count=0)
        ev.merge(self.messages)
        ev.packets.sort()
        return ev

    def where(self) -> str:
        """Where the ACKs were, in words."""
        conns = [c for c in self.ack_conns if c != self.conn.conn_id]
        here = len(conns) < len(self.ack_conns)
        named = ", ".join(str(c) for c in conns)
        there = f"conn {named}" if len(conns) == 1 else f"conns {named}"
        if here and conns:
            return f"on this connection and on {there}"
        return "on this connection" if here else f"on {there}"


@dataclass(slots=True)
class _Sub:
    acked: OrderedDict[Id, _Ack] = field(default_factory=OrderedDict)
    #: cumulative acks: ids in increasing order, each with its ACK
    upto: list[Id] = field(default_factory=list)
    upto_acks: list[_Ack] = field(default_factory=list)
    again: dict[int, _Again] = field(default_factory=dict)  # conn_id -> its redeliveries
    #: its SEEKs not answered yet: (conn_id, request_id) -> the connection
    seeking: dict[tuple[int, int], ConnState] = field(default_factory=dict)
    held: list[tuple[Id, bool, _Ack]] = field(default_factory=list)  # acks while seeking

    def forget(self) -> None:
        """The cursor was reset: acks so far, held ones too, no longer hold."""
        self.acked.clear()
        self.upto.clear()
        self.upto_acks.clear()
        self.held.clear()

    def record(self, key: Id, cumulative: bool, ack: _Ack) -> None:
        if cumulative:
            if not self.upto or key > self.upto[-1]:  # a cursor moves forward only
                self.upto.append(key)
                self.upto_acks.append(ack)
                if len(self.upto) > MAX_CUMULATIVE:
                    del self.upto[0], self.upto_acks[0]
            return
        if key not in self.acked:
            self.acked[key] = ack
            if len(self.acked) > MAX_PENDING:
                self.acked.popitem(last=False)

    def ack_of(self, key: Id) -> _Ack | None:
        """The first ACK that acknowledged `key`: individually, or the earliest cumulative
        one reaching it."""
        ack = self.acked.get(key)
        at = bisect_left(self.upto, key)
        if at < len(self.upto) and (ack is None or self.upto_acks[at].ts < ack.ts):
            ack = self.upto_acks[at]
        return ack


class AckedSubscriptions:
    """Acks and seeks of each subscription of one capture; see the module docstring."""

    def __init__(self) -> None:
        self.subs: dict[AckedSubKey, _Sub] = {}
        self.seeks: dict[tuple[int, int], AckedSubKey] = {}  # pending SEEKs, their subscription

    def delivered(self, conn: ConnState, c: ConsumerState, key: Id, f: Frame) -> None:
        crossing.dispatched(c, f.last_ts)
        if c.subscription is None:
            return
        st = self.subs.get((c.topic, c.subscription))
        if st is None or st.seeking:
            return  # a cursor being reset may send anything again
        ack = st.ack_of(key)
        if ack is None or crossing.crossed(conn, c, ack.ts, f.last_ts):
            return
        again = st.again.get(conn.conn_id)
        if again is None:
            if len(st.again) >= MAX_ROWS:
                return
            again = st.again[conn.conn_id] = _Again(conn)
        again.add(f, ack)

    def acked(self, c: ConsumerState, key: Id, *, cumulative: bool, ack: Frame) -> None:
        if c.subscription is None:
            return
        st = bounded(self.subs, (c.topic, c.subscription), _Sub)
        by = _Ack(ack.last_packet, ack.last_ts, ack.conn_id)
        if not st.seeking:
            st.record(key, cumulative, by)
        elif len(st.held) < MAX_PENDING:
            st.held.append((key, cumulative, by))

    def seek(self, conn: ConnState, c: ConsumerState, request_id: int) -> None:
        """SEEK: the subscription's cursor is being reset until the answer comes."""
        if c.subscription is None:
            return
        sub = (c.topic, c.subscription)
        bounded(self.subs, sub, _Sub).seeking[(conn.conn_id, request_id)] = conn
        self.seeks[(conn.conn_id, request_id)] = sub
        if len(self.seeks) > MAX_KEYS:
            del self.seeks[next(iter(self.seeks))]

    def seek_answered(self, conn: ConnState, request_id: int, *, done: bool) -> None:
        """The SEEK's answer: done (SUCCESS), the cursor was reset; else (ERROR) it was not."""
        sub = self.seeks.pop((conn.conn_id, request_id), None)
        st = None if sub is None else self.subs.get(sub)
        if st is None or st.seeking.pop((conn.conn_id, request_id), None) is None:
            return
        if done:
            st.forget()
        elif not st.seeking:
            held, st.held = st.held, []
            for key, cumulative, by in held:
                st.record(key, cumulative, by)

    def subscribed(self, conn: ConnState, topic: str | None, subscription: str) -> None:
        """A SUBSCRIBE: a SEEK pending on another connection may never be answered."""
        st = self.subs.get((topic, subscription))
        if st is None or all(seek_conn is conn for seek_conn in st.seeking.values()):
            return
        st.seeking = {k: v for k, v in st.seeking.items() if v is conn}
        st.forget()

    def finish(self, ctx: Context) -> None:
        for (topic, sub), st in self.subs.items():
            for again in st.again.values():
                n = again.messages.count
                ctx.emit(
                    finding(
                        FindingCode.CONSUMER_REDELIVERED_AFTER_ACK,
                        again.evidence(),
                        conn=again.conn,
                        topic=topic,
                        entity=f"subscription {sub}",
                        summary=f"{n} messages delivered again to subscription {sub} on "
                        f"this connection after it had acknowledged them {again.where()}",
                        value=n,
                        unit="messages",
                        count=n,
                    )
                )
