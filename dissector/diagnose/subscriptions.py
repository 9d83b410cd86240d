"""Subscriptions across connections: consumer.redelivered_after_ack, and what a SEEK resets.

Input: from the per-connection rules (through dissector.diagnose.spanning), deliveries and
acks of subscribed consumers; from spanning's handlers, SEEK requests, their answers
(SUCCESS or ERROR) and SUBSCRIBEs; at the end, the context to emit into (`finish`).
Output: finding consumer.redelivered_after_ack, one row per (topic, subscription).
Rules:
- A MESSAGE for an id the subscription acknowledged (individually, or up to a cumulative
  ack) after its delivery was captured is redelivered after ack; a batch-index ack with
  bits still set acknowledges nothing, nor does an ACK in a transaction (the consumer rules
  pass neither on).
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
unacknowledged on a connection: an id acked longer ago is no longer told apart).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from dissector.diagnose.state import (
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


@dataclass(slots=True)
class _Sub:
    acked: OrderedDict[Id, None] = field(default_factory=OrderedDict)
    cumulative: Id | None = None
    again: Evidence = field(default_factory=Evidence)
    last: ConnState | None = None
    #: its SEEKs not answered yet: (conn_id, request_id) -> the connection
    seeking: dict[tuple[int, int], ConnState] = field(default_factory=dict)
    held: list[tuple[Id, bool]] = field(default_factory=list)  # acks while seeking

    def forget(self) -> None:
        """The cursor was reset: acks so far, held ones too, no longer hold."""
        self.acked.clear()
        self.cumulative = None
        self.held.clear()

    def record(self, key: Id, cumulative: bool) -> None:
        if cumulative:
            if self.cumulative is None or key > self.cumulative:
                self.cumulative = key
            return
        self.acked[key] = None
        if len(self.acked) > MAX_PENDING:
            self.acked.popitem(last=False)


class AckedSubscriptions:
    """Acks and seeks of each subscription of one capture; see the module docstring."""

    def __init__(self) -> None:
        self.subs: dict[AckedSubKey, _Sub] = {}
        self.seeks: dict[tuple[int, int], AckedSubKey] = {}  # pending SEEKs, their subscription

    def delivered(self, conn: ConnState, c: ConsumerState, key: Id, f: Frame) -> None:
        if c.subscription is None:
            return
        st = self.subs.get((c.topic, c.subscription))
        if st is None or st.seeking:
            return  # a cursor being reset may send anything again
        if key in st.acked or (st.cumulative is not None and key <= st.cumulative):
            st.again.add(f)
            st.last = conn

    def acked(self, c: ConsumerState, key: Id, *, cumulative: bool) -> None:
        if c.subscription is None:
            return
        st = bounded(self.subs, (c.topic, c.subscription), _Sub)
        if not st.seeking:
            st.record(key, cumulative)
        elif len(st.held) < MAX_PENDING:
            st.held.append((key, cumulative))

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
            for key, cumulative in held:
                st.record(key, cumulative)

    def subscribed(self, conn: ConnState, topic: str | None, subscription: str) -> None:
        """A SUBSCRIBE: a SEEK pending on another connection may never be answered."""
        st = self.subs.get((topic, subscription))
        if st is None or all(seek_conn is conn for seek_conn in st.seeking.values()):
            return
        st.seeking = {k: v for k, v in st.seeking.items() if v is conn}
        st.forget()

    def finish(self, ctx: Context) -> None:
        for (topic, sub), st in self.subs.items():
            if st.again:
                ctx.emit(
                    finding(
                        FindingCode.CONSUMER_REDELIVERED_AFTER_ACK,
                        st.again,
                        conn=st.last,
                        topic=topic,
                        entity=f"subscription {sub}",
                        summary=f"{st.again.count} messages delivered again to subscription "
                        f"{sub} after it had acknowledged them",
                        value=st.again.count,
                        unit="messages",
                    )
                )
