"""Sans-IO TCP reassembly: segments in, ordered stream bytes and exact gaps out.

Input: `Segment`s (one per captured TCP packet) in capture order, then `close()`.
Output: `ConnOpened`, `StreamData` (in-order bytes of one direction), `StreamGap` (bytes
missing from the capture, with their exact size), `ConnClosed`, and `Anomaly` events.
Rules:
- Connections are keyed by a normalised FlowKey (client side, broker side). The broker side
  is the one on a configured broker port, else the SYN receiver, else the first packet's
  destination (`ConnOpened.guessed` tells the caller it may swap roles, e.g. on CONNECT).
- Sequence numbers are compared modulo 2**32 (`seq_diff`), so wrap-around is transparent.
- Retransmitted and overlapping bytes are dropped; when they differ from what was delivered
  (within RETRANSMIT_WINDOW) that is reported. Keep-alive probes are ignored.
- Out-of-order segments wait in a buffer bounded by MAX_OUT_OF_ORDER_BYTES. A hole becomes a
  gap when the peer acknowledges bytes past it (they were sent but not captured), when the
  bound is exceeded, or when the connection ends. Missing bytes are never zero-filled.
- FIN/RST close a connection; a new SYN on the same ports starts a new conversation.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from dissector.events import Anomaly, Direction, Segment

FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
_MASK = 0xFFFFFFFF
_HALF = 1 << 31

#: Out-of-order bytes buffered per direction before the hole is declared a gap. Several
#: loopback windows' worth (a window can reach a few MiB); beyond it memory must not grow.
MAX_OUT_OF_ORDER_BYTES = 16 << 20
#: Recently delivered bytes kept per direction to compare retransmissions with.
RETRANSMIT_WINDOW = 256 << 10
#: Open connections tracked at once; beyond it the least recently active one is closed.
MAX_OPEN_FLOWS = 100_000
#: Closed connections remembered (for trailing packets and port reuse) before being forgotten.
MAX_CLOSED_KEPT = 10_000
#: A sequence jump larger than this is not reordering or loss but a different stream.
_MAX_JUMP = 1 << 30

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT


def seq_diff(a: int, b: int) -> int:
    """Signed distance from sequence number b to a, modulo 2**32."""
    return ((a - b + _HALF) & _MASK) - _HALF


class FlowKey(NamedTuple):
    client_ip: str
    client_port: int
    broker_ip: str
    broker_port: int


class ConnOpened(NamedTuple):
    conn_id: int
    key: FlowKey
    ts: int
    packet: int
    syn_seen: bool  # the capture holds the connection's SYN
    guessed: bool  # neither a broker port nor a SYN told which side is the broker


class StreamData(NamedTuple):
    conn_id: int
    direction: Direction
    offset: int  # stream offset of data[0] (0 = first byte after the SYN or first seen)
    data: bytes
    packet: int
    ts: int


class StreamGap(NamedTuple):
    conn_id: int
    direction: Direction
    offset: int
    length: int
    packet: int
    ts: int


class ConnClosed(NamedTuple):
    conn_id: int
    reason: str  # fin | rst | capture_end | port_reuse | evicted
    ts: int
    packet: int
    packets_c2b: int = 0  # packets seen per direction (retransmissions included)
    packets_b2c: int = 0
    bytes_c2b: int = 0  # TCP payload bytes on the wire per direction (retransmissions included)
    bytes_b2c: int = 0


TcpEvent = ConnOpened | StreamData | StreamGap | ConnClosed | Anomaly

#: Builds a NamedTuple from a tuple without its keyword-aware __new__ (several times faster).
_new = tuple.__new__


class _Half:
    """State of one direction of one connection."""

    __slots__ = (
        "direction",
        "done",
        "fin_seq",
        "midstream",
        "next_seq",
        "offset",
        "ooo",
        "ooo_bytes",
        "recent",
        "recent_bytes",
    )

    def __init__(self, direction: Direction) -> None:
        self.direction = direction
        self.next_seq: int | None = None  # sequence number of the next byte to deliver
        self.offset = 0  # stream offset of next_seq
        self.midstream = False
        self.fin_seq: int | None = None
        self.done = False  # FIN reached or RST seen
        self.ooo: dict[int, tuple[bytes, int, int, int]] = {}  # offset -> data, missing, pkt, ts
        self.ooo_bytes = 0
        self.recent: deque[tuple[int, bytes]] = deque()  # (offset, data) last delivered
        self.recent_bytes = 0


class _Conn:
    __slots__ = (
        "closed",
        "conn_id",
        "counts",
        "halves",
        "ignored",
        "isn",
        "key",
        "last_packet",
        "last_ts",
    )

    def __init__(self, conn_id: int, key: FlowKey, ts: int) -> None:
        self.conn_id = conn_id
        self.key = key
        self.halves = {C2B: _Half(C2B), B2C: _Half(B2C)}
        self.isn: int | None = None  # client's SYN sequence number
        self.closed = False
        self.ignored = False  # the caller is not interested: track, deliver nothing
        self.last_ts = ts  # time and number of the connection's latest packet
        self.last_packet = 0
        self.counts = {C2B: [0, 0], B2C: [0, 0]}  # direction -> [packets, payload bytes]


class Reassembler:
    """Reassemble every TCP connection of a capture; see the module docstring."""

    def __init__(
        self, broker_ports: frozenset[int] | set[int] = frozenset({6650, 6651}), first_id: int = 1
    ) -> None:
        self.broker_ports = frozenset(broker_ports)
        self._flows: dict[tuple[str, int, str, int], tuple[_Conn, Direction]] = {}
        self._conns: dict[int, _Conn] = {}  # open connections
        self._closed: deque[_Conn] = deque()  # recently closed, oldest first
        self._next_id = first_id

    # ------------------------------------------------------------------ public API

    def feed(self, seg: Segment) -> list[TcpEvent]:
        out: list[TcpEvent] = []
        entry = self._flows.get((seg.src_ip, seg.src_port, seg.dst_ip, seg.dst_port))
        flags = seg.flags
        if entry is None or (flags & SYN and not flags & ACK and self._is_new_syn(entry[0], seg)):
            if entry is not None and not entry[0].closed:
                self._close(entry[0], "port_reuse", seg, out)
            if not (flags & SYN or seg.payload or seg.missing):
                return out  # a stray ACK/FIN/RST of a connection we never saw
            entry = self._open(seg, out)
        conn, direction = entry
        conn.last_ts = seg.ts
        conn.last_packet = seg.number
        count = conn.counts[direction]
        count[0] += 1
        count[1] += len(seg.payload) + seg.missing
        if conn.closed:
            if seg.payload and not flags & RST:
                half = conn.halves[direction]
                if half.next_seq is not None and seq_diff(seg.seq, half.next_seq) >= 0:
                    out.append(
                        self._anomaly(
                            conn,
                            direction,
                            half.offset,
                            seg,
                            "tcp.data_after_close",
                            f"{len(seg.payload)} bytes",
                        )
                    )
            return out
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
                self._anomaly(
                    conn,
                    direction,
                    0,
                    seg,
                    "tcp.midstream_start",
                    "no SYN: stream offsets start at the first byte seen",
                )
            )
        payload = seg.payload
        if payload and seq == half.next_seq and not seg.missing and not half.ooo:
            # The common case, in order and whole: deliver without the general machinery.
            self._deliver(conn, half, payload, 0, seg.number, seg.ts, out)
        elif payload or seg.missing:
            self._segment(conn, half, seq, payload, seg.missing, seg, out)
        if flags & FIN:
            half.fin_seq = (seq + len(payload) + seg.missing) & _MASK
        if flags & ACK:
            other = conn.halves[B2C if direction is C2B else C2B]
            if other.next_seq is not None and other.next_seq != seg.ack:
                self._acked(conn, other, seg.ack, seg, out)
        if flags & RST:
            self._close(conn, "rst", seg, out)
            return out
        if half.fin_seq is not None and half.next_seq == half.fin_seq:
            half.done = True
        if conn.halves[C2B].done and conn.halves[B2C].done:
            self._close(conn, "fin", seg, out)
        return out

    def close(self) -> list[TcpEvent]:
        """End of capture: flush buffered data (with gaps) and close every connection."""
        out: list[TcpEvent] = []
        for conn in list(self._conns.values()):
            self._close(conn, "capture_end", None, out)
        self._conns.clear()
        self._closed.clear()
        self._flows.clear()
        return out

    def ignore(self, conn_id: int) -> None:
        """Stop delivering data for a connection (e.g. not Pulsar); it is still tracked."""
        conn = self._conns.get(conn_id)
        if conn is not None:
            conn.ignored = True
            for half in conn.halves.values():
                half.ooo.clear()
                half.ooo_bytes = 0
                half.recent.clear()

    def swap_roles(self, conn_id: int) -> FlowKey:
        """The side taken for the client is the broker: swap them; returns the new key."""
        conn = self._conns[conn_id]
        k = conn.key
        conn.key = FlowKey(k.broker_ip, k.broker_port, k.client_ip, k.client_port)
        c2b, b2c = conn.halves[C2B], conn.halves[B2C]
        c2b.direction, b2c.direction = B2C, C2B
        conn.halves = {C2B: b2c, B2C: c2b}
        conn.counts = {C2B: conn.counts[B2C], B2C: conn.counts[C2B]}
        for tup, (c, d) in list(self._flows.items()):
            if c is conn:
                self._flows[tup] = (conn, B2C if d is C2B else C2B)
        return conn.key

    # ------------------------------------------------------------------ internals

    def _is_new_syn(self, conn: _Conn, seg: Segment) -> bool:
        return conn.closed or (conn.isn is not None and conn.isn != seg.seq)

    def _open(self, seg: Segment, out: list[TcpEvent]) -> tuple[_Conn, Direction]:
        src = (seg.src_ip, seg.src_port)
        dst = (seg.dst_ip, seg.dst_port)
        guessed = False
        if seg.dst_port in self.broker_ports:
            client, broker = src, dst
        elif seg.src_port in self.broker_ports:
            client, broker = dst, src
        elif seg.flags & SYN:
            client, broker = (dst, src) if seg.flags & ACK else (src, dst)
        else:
            client, broker = src, dst
            guessed = True
        if len(self._conns) >= MAX_OPEN_FLOWS:
            self._evict(seg, out)
        conn = _Conn(self._next_id, FlowKey(*client, *broker), seg.ts)
        self._next_id += 1
        self._conns[conn.conn_id] = conn
        self._flows[(client[0], client[1], broker[0], broker[1])] = (conn, C2B)
        self._flows[(broker[0], broker[1], client[0], client[1])] = (conn, B2C)
        syn = bool(seg.flags & SYN)
        out.append(ConnOpened(conn.conn_id, conn.key, seg.ts, seg.number, syn, guessed))
        return conn, (C2B if src == client else B2C)

    def _evict(self, seg: Segment, out: list[TcpEvent]) -> None:
        oldest = min(self._conns.values(), key=lambda c: c.last_ts)
        out.append(
            self._anomaly(
                oldest,
                None,
                None,
                seg,
                "tcp.flow_evicted",
                f"more than {MAX_OPEN_FLOWS} open connections",
            )
        )
        self._close(oldest, "evicted", seg, out)

    def _forget(self, conn: _Conn) -> None:
        k = conn.key
        for tup in (
            (k.client_ip, k.client_port, k.broker_ip, k.broker_port),
            (k.broker_ip, k.broker_port, k.client_ip, k.client_port),
        ):
            if self._flows.get(tup, (None,))[0] is conn:
                del self._flows[tup]

    def _segment(
        self,
        conn: _Conn,
        half: _Half,
        seq: int,
        data: bytes,
        missing: int,
        seg: Segment,
        out: list[TcpEvent],
    ) -> None:
        assert half.next_seq is not None
        d = seq_diff(seq, half.next_seq)
        if d == 0:
            self._deliver(conn, half, data, missing, seg.number, seg.ts, out)
            if half.ooo:
                self._drain(conn, half, out, seg.ts)
        elif d > 0:
            if d > _MAX_JUMP:
                return
            if conn.ignored:
                return
            offset = half.offset + d
            old = half.ooo.get(offset)
            if old is None or len(old[0]) + old[1] < len(data) + missing:
                half.ooo_bytes += len(data) - (len(old[0]) if old else 0)
                half.ooo[offset] = (data, missing, seg.number, seg.ts)
            if half.ooo_bytes > MAX_OUT_OF_ORDER_BYTES:
                out.append(
                    self._anomaly(
                        conn,
                        half.direction,
                        half.offset,
                        seg,
                        "tcp.out_of_order_overflow",
                        f"{half.ooo_bytes} bytes buffered behind a hole",
                    )
                )
                self._advance(conn, half, min(half.ooo), seg, out)
        else:
            end = d + len(data) + missing
            if d == -1 and len(data) <= 1 and not missing:
                return  # keep-alive probe: one old byte (or none) below next_seq
            if d < -_MAX_JUMP:
                return
            self._compare(conn, half, half.offset + d, data[:-d], seg, out)
            if end > 0:
                cut = -d
                if cut <= len(data):
                    self._deliver(conn, half, data[cut:], missing, seg.number, seg.ts, out)
                else:
                    self._deliver(
                        conn, half, b"", missing - (cut - len(data)), seg.number, seg.ts, out
                    )
                if half.ooo:
                    self._drain(conn, half, out, seg.ts)

    def _deliver(
        self,
        conn: _Conn,
        half: _Half,
        data: bytes,
        missing: int,
        packet: int,
        ts: int,
        out: list[TcpEvent],
    ) -> None:
        n = len(data)
        if n:
            if not conn.ignored:
                offset = half.offset
                out.append(
                    _new(StreamData, (conn.conn_id, half.direction, offset, data, packet, ts))
                )
                recent = half.recent
                recent.append((offset, data))
                half.recent_bytes += n
                if half.recent_bytes >= RETRANSMIT_WINDOW + n:
                    while half.recent_bytes - len(recent[0][1]) >= RETRANSMIT_WINDOW:
                        half.recent_bytes -= len(recent.popleft()[1])
            half.offset += n
        if missing:
            if not conn.ignored:
                out.append(
                    StreamGap(conn.conn_id, half.direction, half.offset, missing, packet, ts)
                )
                out.append(
                    Anomaly.of(
                        "tcp.gap",
                        conn_id=conn.conn_id,
                        direction=half.direction,
                        stream_offset=half.offset,
                        length=missing,
                        packet=packet,
                        ts=ts,
                        detail=f"{missing} bytes not captured",
                    )
                )
            half.offset += missing
        half.next_seq = ((half.next_seq or 0) + n + missing) & _MASK

    def _drain(self, conn: _Conn, half: _Half, out: list[TcpEvent], now: int) -> None:
        """Deliver buffered segments that now continue the stream.

        They keep their own packet number (provenance) but are stamped `now`, the time the
        hole before them was filled: stream bytes are never available before that.
        """
        ooo = half.ooo
        while ooo:
            start = min(ooo)
            if start > half.offset:
                return
            data, missing, packet, ts = ooo.pop(start)
            ts = max(ts, now)
            half.ooo_bytes -= len(data)
            cut = half.offset - start
            if cut < len(data):
                self._deliver(conn, half, data[cut:], missing, packet, ts, out)
            elif cut < len(data) + missing:
                self._deliver(conn, half, b"", len(data) + missing - cut, packet, ts, out)

    def _advance(
        self, conn: _Conn, half: _Half, target: int, seg: Segment | None, out: list[TcpEvent]
    ) -> None:
        """Declare everything up to stream offset `target` received: holes become gaps."""
        packet, ts = (seg.number, seg.ts) if seg else (conn.last_packet, conn.last_ts)
        while half.offset < target:
            if half.ooo and min(half.ooo) <= half.offset:
                self._drain(conn, half, out, ts)
                continue
            upto = min(target, min(half.ooo)) if half.ooo else target
            self._deliver(conn, half, b"", upto - half.offset, packet, ts, out)
        if half.ooo:
            self._drain(conn, half, out, ts)

    def _acked(self, conn: _Conn, half: _Half, ack: int, seg: Segment, out: list[TcpEvent]) -> None:
        """The peer acknowledged up to `ack`: bytes before it were sent even if not captured."""
        assert half.next_seq is not None
        if half.fin_seq is not None and seq_diff(ack, half.fin_seq) > 0:
            ack = half.fin_seq
        d = seq_diff(ack, half.next_seq)
        if 0 < d <= _MAX_JUMP:
            self._advance(conn, half, half.offset + d, seg, out)

    def _compare(
        self,
        conn: _Conn,
        half: _Half,
        offset: int,
        data: bytes,
        seg: Segment,
        out: list[TcpEvent],
    ) -> None:
        """Report when retransmitted bytes at `offset` differ from those delivered."""
        if conn.ignored or not data:
            return
        end = offset + len(data)
        for start, old in half.recent:
            old_end = start + len(old)
            if old_end <= offset or start >= end:
                continue
            lo, hi = max(start, offset), min(old_end, end)
            if old[lo - start : hi - start] != data[lo - offset : hi - offset]:
                out.append(
                    self._anomaly(
                        conn,
                        half.direction,
                        lo,
                        seg,
                        "tcp.retransmission_mismatch",
                        f"bytes {lo}..{hi} differ from the first copy",
                    )
                )
                return

    def _close(self, conn: _Conn, reason: str, seg: Segment | None, out: list[TcpEvent]) -> None:
        """Flush what is buffered (holes become gaps, up to a seen FIN) and close."""
        for half in conn.halves.values():
            ends = [k + len(v[0]) + v[1] for k, v in half.ooo.items()]
            if half.fin_seq is not None and half.next_seq is not None:
                ends.append(half.offset + max(0, seq_diff(half.fin_seq, half.next_seq)))
            if ends:
                self._advance(conn, half, max(ends), seg, out)
            half.recent.clear()
            half.recent_bytes = 0
        conn.closed = True
        if seg is not None and reason in ("fin", "rst"):
            ts, packet = seg.ts, seg.number
        else:  # capture end, eviction, port reuse: the connection's own last packet
            ts, packet = conn.last_ts, conn.last_packet
        (p1, b1), (p2, b2) = conn.counts[C2B], conn.counts[B2C]
        out.append(ConnClosed(conn.conn_id, reason, ts, packet, p1, p2, b1, b2))
        self._conns.pop(conn.conn_id, None)
        self._closed.append(conn)
        if len(self._closed) > MAX_CLOSED_KEPT:
            self._forget(self._closed.popleft())

    def _anomaly(
        self,
        conn: _Conn,
        direction: Direction | None,
        offset: int | None,
        seg: Segment,
        code: str,
        detail: str,
    ) -> Anomaly:
        return Anomaly.of(
            code,
            conn_id=conn.conn_id,
            direction=direction,
            stream_offset=offset,
            detail=detail,
            packet=seg.number,
            ts=seg.ts,
        )
