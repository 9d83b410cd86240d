"""consumer.busy: SUBSCRIBEs refused with ConsumerBusy, and who holds the subscription.

Input: the consumers' lifecycle facts (dissector.facts.lifecycles) through
dissector.diagnose.refusals: a SUBSCRIBE answered SUCCESS (created), refused (failed, with
the ERROR's code), a CLOSE_CONSUMER from either side (closed); the end of each connection
(`ended`: FIN/RST or the capture's end) and the rows of one connection (`close`).
Output: findings consumer.busy, one row per (connection, topic, subscription) whose
SUBSCRIBEs were refused with ConsumerBusy(5): the count of refusals, the ERROR packets as
evidence, and, when the capture shows it, the consumer holding the subscription.
Rules:
- A consumer holds its (topic, subscription) from the SUCCESS answering its SUBSCRIBE until
  a CLOSE_CONSUMER of it (either side). Its connection ending without one (FIN/RST) leaves it
  held as far as the capture knows: the broker lets go when it notices the connection gone,
  which it may not (a zombie consumer). A later SUBSCRIBE of the subscription answered SUCCESS
  shows the broker let go of the consumers of connections already ended.
- A refusal names the latest holder other than the refused consumer itself, on any connection
  (the same one included), with whether its connection is still open or ended (how, when)
  without CLOSE_CONSUMER. A holder on a connection with bytes missing (a TCP gap may hide its
  CLOSE_CONSUMER) is not named: the holder is then unknown, as when the capture saw no
  SUBSCRIBE of the subscription succeed.
Memory: holders of at most MAX_KEYS subscriptions, MAX_HOLDERS each (the oldest forgotten:
a Shared subscription may have many consumers, none of which can make a ConsumerBusy);
refusals of at most MAX_KEYS (connection, subscription) pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissector.diagnose.state import MAX_KEYS, ConnState, Context, Evidence, bounded, finding
from dissector.events import CloseReason, Frame, Lifecycle
from dissector.findings import FindingCode

#: Consumers remembered per subscription (the latest ones).
MAX_HOLDERS = 32
BUSY = "ConsumerBusy"
_Sub = tuple[str, str]  # (topic, subscription)


@dataclass(slots=True)
class _Holder:
    conn: ConnState
    consumer_id: int
    name: str | None
    ts: int  # its SUCCESS
    packet: int
    ended: CloseReason | None = None  # its connection ended without CLOSE_CONSUMER
    ended_ts: int = 0


@dataclass(slots=True)
class _Refused:
    conn: ConnState
    topic: str
    subscription: str
    evidence: Evidence = field(default_factory=Evidence)
    holder: str = ""  # the latest refusal's holder, in words


def _where(conn: ConnState) -> str:
    key = conn.key
    return f"conn {conn.conn_id}" + (f" ({key.client_ip}:{key.client_port})" if key else "")


class Holders:
    """Subscriptions held and refused across the connections of one capture."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.subs: dict[_Sub, list[_Holder]] = {}
        self.by_conn: dict[int, set[_Sub]] = {}  # connection -> subscriptions it holds
        self.refused: dict[int, dict[_Sub, _Refused]] = {}  # connection -> its refusals

    # ------------------------------------------------------------------ facts

    def created(self, conn: ConnState, fact: Lifecycle, sub: _Sub) -> None:
        """SUCCESS answered a SUBSCRIBE: its consumer holds the subscription; consumers of
        connections already ended do not (the broker took this one)."""
        held = bounded(self.subs, sub, list)
        held[:] = [
            h
            for h in held
            if h.ended is None and not (h.conn is conn and h.consumer_id == fact.entity_id)
        ]
        held.append(
            _Holder(conn, fact.entity_id, fact.name, fact.frame.last_ts, fact.frame.last_packet)
        )
        del held[:-MAX_HOLDERS]
        keys = self.by_conn.get(conn.conn_id)
        if keys is None:
            keys = self.by_conn[conn.conn_id] = set()
            if len(self.by_conn) > MAX_KEYS:
                del self.by_conn[next(iter(self.by_conn))]
        if len(keys) < MAX_KEYS:
            keys.add(sub)

    def closed(self, conn: ConnState, consumer_id: int) -> None:
        """CLOSE_CONSUMER (either side): its consumer holds nothing now."""
        for sub in self.by_conn.get(conn.conn_id, ()):
            held = self.subs.get(sub)
            if held:
                held[:] = [h for h in held if not (h.conn is conn and h.consumer_id == consumer_id)]

    def refused_with(self, conn: ConnState, fact: Lifecycle, sub: _Sub, frame: Frame) -> None:
        """ERROR ConsumerBusy answered a SUBSCRIBE of `sub` (frame: the ERROR)."""
        mine = bounded(self.refused, conn.conn_id, dict)
        refused = mine.get(sub)
        if refused is None:
            refused = mine[sub] = _Refused(conn, *sub)
            if len(mine) > MAX_KEYS:
                del mine[next(iter(mine))]
        refused.evidence.add(frame)
        refused.holder = self._holder(conn, fact.entity_id, sub, refused.evidence.first_ts)

    def _holder(self, conn: ConnState, consumer_id: int, sub: _Sub, first: int) -> str:
        """The latest holder of `sub` but the refused consumer, in words (times: before the
        connection's first refusal, `first`); "" when the capture does not show one."""
        for h in reversed(self.subs.get(sub, ())):
            if h.conn is conn and h.consumer_id == consumer_id:
                continue  # the refused one itself (re-subscribing)
            if not h.conn.intact:
                return ""
            who = f"consumer {h.consumer_id}" + (f" ({h.name})" if h.name else "")
            since = (first - h.ts) / 1e6
            where = "this connection" if h.conn is conn else _where(h.conn)
            said = (
                f"held by {who} on {where}, subscribed {since:.1f} s before the first refusal "
                f"(packet {h.packet})"
            )
            if h.ended is not None:
                gone = (first - h.ended_ts) / 1e6
                return (
                    f"{said}, whose connection ended ({h.ended}) {gone:.1f} s before it "
                    "without CLOSE_CONSUMER: a zombie consumer the broker still holds"
                )
            return f"{said}, its connection still open and the consumer not closed"
        return ""

    # ------------------------------------------------------------------ connections

    def ended(self, conn: ConnState, reason: CloseReason, ts: int) -> None:
        """The connection ended (FIN/RST): its consumers not closed are held still, as far as
        the capture knows."""
        for sub in self.by_conn.pop(conn.conn_id, ()):
            for h in self.subs.get(sub, ()):
                if h.conn is conn and h.ended is None:
                    h.ended, h.ended_ts = reason, ts

    def close(self, conn: ConnState) -> None:
        """The rows of one connection (it ended, or the capture did)."""
        for r in self.refused.pop(conn.conn_id, {}).values():
            ev = r.evidence
            times = "once" if ev.count == 1 else f"{ev.count} times"
            holder = r.holder or "no consumer holding it is in the capture"
            self.ctx.emit(
                finding(
                    FindingCode.CONSUMER_BUSY,
                    ev,
                    conn=conn,
                    topic=r.topic,
                    entity=f"subscription {r.subscription}",
                    summary=f"SUBSCRIBE of subscription {r.subscription} refused with "
                    f"ConsumerBusy {times}: {holder}",
                    value=ev.count,
                    unit="refusals",
                )
            )
