"""The TCP flow table: segments in, connections with ordered stream bytes and exact gaps out.

Input: `Segment`s (one per captured TCP packet) in capture order, then `close()`.
Output: `ConnOpened`, `StreamData` (in-order bytes of one direction), `StreamGap` (bytes
missing from the capture, with their exact size), `ConnClosed`, and `Anomaly` events.
Rules:
- Connections are keyed once, by a normalised FlowKey (client side, broker side), as
  `flow.classify.roles` judges the first packet: the side on a configured broker port, else
  the SYN's receiver, else the first packet's destination (`ConnOpened.guessed`). The key
  stays: when a CONNECT later judges the roles the other way round, the caller swaps the
  sides of what this table says of the connection (`flow.sides.swap`).
- Each direction is reassembled by its own `reassembly.HalfStream` (sequence arithmetic,
  reordering, retransmissions, gaps); this module finds the connection and its direction,
  handles SYN/FIN/RST/ACK, and bounds the table (MAX_OPEN_FLOWS, MAX_CLOSED_KEPT).
- Open connections are kept in order of their latest packet, so that past MAX_OPEN_FLOWS the
  least recently active one is evicted in constant time (`tcp.flow_evicted`, then closed).
- FIN/RST close a connection; a new SYN on the same ports starts a new conversation. The
  side whose FIN or RST came first is told (`ConnClosed.closed_by`): who ended it.
- Idle timeout (optional, as Zeek's inactivity timeout): a connection without a packet for
  longer than `idle_timeout` µs is closed (`timeout`, at its own last packet) and forgotten:
  a later packet of it starts a new connection. Time is `clock`: the latest time seen so far,
  from segments and from `expire(now)` (the pipeline calls it with every packet of the
  capture, whatever its protocol or shard, so that each worker of a parallel read has the
  clock of a one-process read); a timestamp behind the clock does not move it back. A
  connection's idleness runs from the clock at its latest packet, so a clock step back
  neither ends nor keeps a connection, and the least recently active connection, first in the
  table, is also the longest idle: each check costs O(1) and ends exactly the idle ones.
- An ACK of bytes not captured yet waits ACK_GRACE_US of capture time for them
  (`HalfStream.acked`); a connection keeps the earliest deadline of its two directions, so
  that every packet of it checks it with one comparison (`HalfStream.overdue`).
- A connection the caller `ignore`s is still tracked (its end is reported) but delivers nothing.
- A connection forgotten (its packets no longer found: timed out, or past MAX_CLOSED_KEPT
  closed ones) is told to `on_forget` when given: no event of its id comes after, so what a
  caller keeps per connection beyond its close can go then.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    CloseReason,
    ConnClosed,
    ConnOpened,
    Direction,
    FlowKey,
    Segment,
    TcpEvent,
)
from dissector.events import StreamData as StreamData  # re-exported: tcp's output
from dissector.events import StreamGap as StreamGap
from dissector.flow.classify import roles
from dissector.flow.reassembly import NEVER, HalfStream, RetransmitWindow
from dissector.flow.reassembly import seq_diff as seq_diff

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
_MASK = 0xFFFFFFFF

#: Open connections tracked at once; beyond it the least recently active one is closed.
MAX_OPEN_FLOWS = 100_000
#: Closed connections remembered (for trailing packets and port reuse) before being forgotten.
MAX_CLOSED_KEPT = 10_000

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT

_ENDED_BY_PEER = frozenset({CloseReason.FIN, CloseReason.RST})
#: The clock before any time is seen.
_BEFORE_ALL = -(1 << 62)


class _Conn:
    __slots__ = (
        "active",
        "closed",
        "closer",
        "conn_id",
        "counts",
        "deadline",
        "halves",
        "isn",
        "key",
        "last_packet",
        "last_ts",
    )

    def __init__(self, conn_id: int, key: FlowKey, ts: int, window: RetransmitWindow) -> None:
        self.conn_id = conn_id
        self.key = key
        self.halves = {
            C2B: HalfStream(conn_id, C2B, window),
            B2C: HalfStream(conn_id, B2C, window),
        }
        self.isn: int | None = None  # client's SYN sequence number
        self.closed = False
        self.last_ts = ts  # time and number of the connection's latest packet
        self.last_packet = 0
        self.active = ts  # the flow table's clock at its latest packet (idle timeout)
        self.counts = {C2B: [0, 0], B2C: [0, 0]}  # direction -> [packets, payload bytes]
        self.deadline = NEVER  # the earliest grace end of an unseen ACK (never: none)
        #: the side whose FIN or RST came first, its packet and time (None: none yet)
        self.closer: tuple[Direction, int, int] | None = None


class Reassembler:
    """Reassemble every TCP connection of a capture; see the module docstring."""

    def __init__(
        self,
        broker_ports: frozenset[int] | set[int] = frozenset({6650, 6651}),
        first_id: int = 1,
        idle_timeout: int | None = None,
        on_forget: Callable[[int], None] | None = None,
    ) -> None:
        """idle_timeout: microseconds without a packet after which a connection is closed.
        on_forget: told the conn_id of each connection forgotten (module docstring)."""
        self.broker_ports = frozenset(broker_ports)
        self.idle_timeout = idle_timeout
        self.on_forget = on_forget
        self._flows: dict[tuple[str, int, str, int], tuple[_Conn, Direction]] = {}
        # Open connections, least recently active first (moved to the end on every packet).
        self._conns: OrderedDict[int, _Conn] = OrderedDict()
        self._touch = self._conns.move_to_end
        self._closed: deque[_Conn] = deque()  # recently closed, oldest first
        self._window = RetransmitWindow()  # what each direction keeps, by open connections
        self._next_id = first_id
        #: The latest time seen (µs): what the idle timeout measures with.
        self.clock = _BEFORE_ALL

    # ------------------------------------------------------------------ public API

    @property
    def next_id(self) -> int:
        """The conn_id the next connection opened gets."""
        return self._next_id

    def feed(self, seg: Segment) -> list[TcpEvent]:
        out: list[TcpEvent] = []
        ts = seg.ts
        if self.idle_timeout is not None and ts > self.clock:
            self._expire(ts, out)
        entry = self._flows.get((seg.src_ip, seg.src_port, seg.dst_ip, seg.dst_port))
        flags = seg.flags
        if entry is None or (flags & SYN and not flags & ACK and self._is_new_syn(entry[0], seg)):
            if entry is not None and not entry[0].closed:
                self._close(entry[0], CloseReason.PORT_REUSE, seg, out)
            if not (flags & SYN or seg.payload or seg.missing):
                return out  # a stray ACK/FIN/RST of a connection we never saw
            entry = self._open(seg, out)
        conn, direction = entry
        conn.last_ts = ts
        conn.last_packet = seg.number
        count = conn.counts[direction]
        count[0] += 1
        count[1] += len(seg.payload) + seg.missing
        if conn.closed:
            if seg.payload and not flags & RST:
                conn.halves[direction].late_data(seg, out)
            return out
        self._touch(conn.conn_id)  # the most recently active now
        conn.active = self.clock
        if ts > conn.deadline:  # an ACK of bytes still not seen is past its grace
            self._overdue(conn, ts, out)
        half = conn.halves[direction]
        seq = seg.seq
        if flags & SYN:
            if direction is C2B:
                conn.isn = seq
            if half.next_seq is None or half.offset == 0:
                half.next_seq = (seq + 1) & _MASK
            seq = (seq + 1) & _MASK
        if half.next_seq is None:
            half.next_seq = seq
            half.midstream = True
            out.append(
                _anomaly(
                    conn.conn_id,
                    direction,
                    0,
                    seg,
                    AnomalyCode.TCP_MIDSTREAM_START,
                    "no SYN: stream offsets start at the first byte seen",
                )
            )
        payload = seg.payload
        if payload and seq == half.next_seq and not seg.missing and not half.ooo:
            # The common case, in order and whole: deliver without the general machinery.
            half.deliver(payload, 0, seg.number, seg.ts, out)
        elif payload or seg.missing:
            half.segment(seq, payload, seg.missing, seg, out)
        if flags & (FIN | RST) and conn.closer is None:
            conn.closer = (direction, seg.number, ts)
        if flags & FIN:
            half.fin_seq = (seq + len(payload) + seg.missing) & _MASK
        if flags & ACK:
            other = conn.halves[B2C if direction is C2B else C2B]
            if other.next_seq is not None and other.next_seq != seg.ack:
                other.acked(seg.ack, seg, out)
                if other.deadline < conn.deadline:
                    conn.deadline = other.deadline
        if flags & RST:
            self._close(conn, CloseReason.RST, seg, out)
            return out
        if half.fin_seq is not None and half.next_seq == half.fin_seq:
            half.done = True
        if conn.halves[C2B].done and conn.halves[B2C].done:
            self._close(conn, CloseReason.FIN, seg, out)
        return out

    def close(self) -> list[TcpEvent]:
        """End of capture: flush buffered data (with gaps) and close every connection."""
        out: list[TcpEvent] = []
        for conn in list(self._conns.values()):
            self._close(conn, CloseReason.CAPTURE_END, None, out)
        self._conns.clear()
        self._closed.clear()
        self._flows.clear()
        return out

    def expire(self, now: int) -> list[TcpEvent]:
        """The clock reads `now` (µs since the epoch; behind it, the clock stays): close the
        connections idle for longer than the idle timeout. For a caller whose clock runs
        without segments: every packet of a capture, the wall clock of a live capture."""
        out: list[TcpEvent] = []
        if self.idle_timeout is not None and now > self.clock:
            self._expire(now, out)
        return out

    def tick(self, now: int) -> list[TcpEvent] | None:
        """`expire(now)` for a caller that calls it with every packet: None (no list made)
        when nothing ends."""
        timeout = self.idle_timeout
        if timeout is None or now <= self.clock:
            return None
        self.clock = now
        conns = self._conns
        if not conns or next(iter(conns.values())).active >= now - timeout:
            return None
        out: list[TcpEvent] = []
        self._expire(now, out)
        return out

    def _overdue(self, conn: _Conn, now: int, out: list[TcpEvent]) -> None:
        c2b, b2c = conn.halves[C2B], conn.halves[B2C]
        c2b.overdue(now, out)
        b2c.overdue(now, out)
        conn.deadline = min(c2b.deadline, b2c.deadline)

    def _expire(self, now: int, out: list[TcpEvent]) -> None:
        assert self.idle_timeout is not None
        self.clock = now
        limit = now - self.idle_timeout
        conns = self._conns
        while conns:
            oldest = next(iter(conns.values()))  # the least recently active: the most idle
            if oldest.active >= limit:
                return
            self._close(oldest, CloseReason.TIMEOUT, None, out)
            self._forget(oldest)  # its next packet starts a new connection

    def ignore(self, conn_id: int) -> None:
        """Stop delivering data for a connection (e.g. not Pulsar); it is still tracked."""
        conn = self._conns.get(conn_id)
        if conn is not None:
            for half in conn.halves.values():
                half.ignore()

    # ------------------------------------------------------------------ internals

    def _is_new_syn(self, conn: _Conn, seg: Segment) -> bool:
        return conn.closed or (conn.isn is not None and conn.isn != seg.seq)

    def _open(self, seg: Segment, out: list[TcpEvent]) -> tuple[_Conn, Direction]:
        src = (seg.src_ip, seg.src_port)
        dst = (seg.dst_ip, seg.dst_port)
        flags = seg.flags
        to_broker, guessed = roles(
            seg.src_port, seg.dst_port, bool(flags & SYN), bool(flags & ACK), self.broker_ports
        )
        client, broker = (src, dst) if to_broker else (dst, src)
        if len(self._conns) >= MAX_OPEN_FLOWS:
            self._evict(seg, out)
        conn = _Conn(self._next_id, FlowKey(*client, *broker), seg.ts, self._window)
        conn.active = self.clock
        self._next_id += 1
        self._conns[conn.conn_id] = conn
        self._window.fit(2 * len(self._conns))
        self._flows[(client[0], client[1], broker[0], broker[1])] = (conn, C2B)
        self._flows[(broker[0], broker[1], client[0], client[1])] = (conn, B2C)
        syn = bool(seg.flags & SYN)
        out.append(ConnOpened(conn.conn_id, conn.key, seg.ts, seg.number, syn, guessed))
        return conn, (C2B if src == client else B2C)

    def _evict(self, seg: Segment, out: list[TcpEvent]) -> None:
        oldest = next(iter(self._conns.values()))  # the least recently active
        out.append(
            _anomaly(
                oldest.conn_id,
                None,
                None,
                seg,
                AnomalyCode.TCP_FLOW_EVICTED,
                f"more than {MAX_OPEN_FLOWS} open connections",
            )
        )
        self._close(oldest, CloseReason.EVICTED, seg, out)

    def _forget(self, conn: _Conn) -> None:
        if self.on_forget is not None:
            self.on_forget(conn.conn_id)
        k = conn.key
        for tup in (
            (k.client_ip, k.client_port, k.broker_ip, k.broker_port),
            (k.broker_ip, k.broker_port, k.client_ip, k.client_port),
        ):
            if self._flows.get(tup, (None,))[0] is conn:
                del self._flows[tup]

    def _close(
        self, conn: _Conn, reason: CloseReason, seg: Segment | None, out: list[TcpEvent]
    ) -> None:
        """Flush what is buffered (holes become gaps, up to a seen FIN) and close."""
        last, now = (seg.number, seg.ts) if seg else (conn.last_packet, conn.last_ts)
        for half in conn.halves.values():
            half.finish(last, now, out)
        conn.closed = True
        if seg is not None and reason in _ENDED_BY_PEER:
            ts, packet = seg.ts, seg.number
        else:  # capture end, eviction, port reuse, timeout: the connection's own last packet
            ts, packet = conn.last_ts, conn.last_packet
        (p1, b1), (p2, b2) = conn.counts[C2B], conn.counts[B2C]
        by, by_packet, by_ts = conn.closer or (None, 0, 0)
        out.append(
            ConnClosed(conn.conn_id, reason, ts, packet, p1, p2, b1, b2, by, by_packet, by_ts)
        )
        self._conns.pop(conn.conn_id, None)
        self._window.fit(2 * len(self._conns))
        self._closed.append(conn)
        if len(self._closed) > MAX_CLOSED_KEPT:
            self._forget(self._closed.popleft())


def _anomaly(
    conn_id: int,
    direction: Direction | None,
    offset: int | None,
    seg: Segment,
    code: str,
    detail: str,
) -> Anomaly:
    return Anomaly.of(
        code,
        conn_id=conn_id,
        direction=direction,
        stream_offset=offset,
        detail=detail,
        packet=seg.number,
        ts=seg.ts,
    )
