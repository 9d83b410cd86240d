"""One direction of one TCP connection: sequence numbers in, ordered stream bytes and gaps out.

Input: the segments of one direction (sequence number, payload, bytes known to be missing),
the peer's acknowledgements, and the end of the connection; `tcp.Reassembler` (the flow
table) routes each packet of a connection to its direction's `HalfStream`.
Output: `StreamData` (in-order bytes at their stream offset), `StreamGap` (bytes missing from
the capture, with their exact size) and `Anomaly` events, appended to the caller's list.
Rules:
- Sequence numbers are compared modulo 2**32 (`seq_diff`), so wrap-around is transparent.
- Retransmitted and overlapping bytes are dropped; when they differ from what was delivered
  (within the last RETRANSMIT_WINDOW bytes, fewer when many connections are open, so that
  all of them together keep about RETRANSMIT_BUDGET) that is reported. `flow.recent` keeps
  those bytes, bounded in pieces too, and compares a segment in time independent of how
  much it keeps (a flood of one-byte-advancing overlaps stays linear). Keep-alive probes
  are ignored.
- Out-of-order segments wait in a buffer bounded by MAX_OUT_OF_ORDER_BYTES. A hole becomes a
  gap when the peer has acknowledged bytes past it (they were sent but not captured) and
  either bytes the sender sent after those acknowledged arrive (a direction's segments keep
  their order in the capture, also in one file per direction) or the acknowledgement is
  older than ACK_GRACE_US; or when the bound is exceeded, or when the connection ends.
  Until then acknowledged bytes may still arrive and fill the hole: with one file per
  direction (a full-duplex TAP) or a skewed clock, the ACK is often merged before the data
  it acknowledges. The gap carries the ACK's packet and time, as if declared at once.
  Missing bytes are never zero-filled.
- An ignored direction keeps counting offsets but delivers nothing and buffers nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from dissector import _core
from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly, Direction, Segment, StreamData, StreamGap
from dissector.flow.recent import Recent, RecentBytes

_MASK = 0xFFFFFFFF
_HALF = 1 << 31

#: Out-of-order bytes buffered per direction before the hole is declared a gap. Several
#: loopback windows' worth (a window can reach a few MiB); beyond it memory must not grow.
MAX_OUT_OF_ORDER_BYTES = 16 << 20
#: Recently delivered bytes kept per direction to compare retransmissions with.
RETRANSMIT_WINDOW = 256 << 10
#: Delivered bytes kept for that comparison by all open directions together: with many open
#: connections each keeps less (down to MIN_RETRANSMIT_WINDOW, plus its last segment).
RETRANSMIT_BUDGET = 256 << 20
MIN_RETRANSMIT_WINDOW = 4 << 10
#: A sequence jump larger than this is not reordering or loss but a different stream.
MAX_JUMP = 1 << 30
#: How long (µs of capture time, never the machine's clock: reads stay deterministic) bytes
#: the peer acknowledged may still arrive before their hole is declared a gap. Copies from
#: another tap port or interface, or a file whose clock is skewed, come within milliseconds;
#: a second is far beyond that and still reports a real loss promptly in a live capture.
ACK_GRACE_US = 1_000_000
#: Acknowledgements waiting for their grace per direction (each a few words). Past it the
#: newest replaces the last one kept: the bytes between are then declared later, never early.
MAX_PENDING_ACKS = 64
#: The deadline of a direction without pending acknowledgements (36,000 years after 1970;
#: below 2**62, so that compiled code compares it as a machine word, not a Python int).
NEVER: Final = 1 << 60


def seq_diff(a: int, b: int) -> int:
    """Signed distance from sequence number b to a, modulo 2**32."""
    return ((a - b + _HALF) & _MASK) - _HALF


class EventSink(Protocol):
    """Where events go: the caller's list of events."""

    def append(self, event: StreamData | StreamGap | Anomaly, /) -> None: ...


#: Builds a NamedTuple from a tuple without its keyword-aware __new__ (several times faster).
_new = tuple.__new__


class RetransmitWindow:
    """The bytes each open direction keeps for comparing retransmissions, shared by the
    directions of one flow table, which resizes it as connections open and close; and what
    they keep them in (`kind`: dissector._core.recent_bytes, chosen once per flow table)."""

    __slots__ = ("kind", "size")

    def __init__(self) -> None:
        self.size = RETRANSMIT_WINDOW
        compiled = _core.recent_bytes()
        self.kind: Callable[[], Recent] = RecentBytes if compiled is None else compiled

    def fit(self, directions: int) -> None:
        share = RETRANSMIT_BUDGET // max(directions, 1)
        self.size = max(MIN_RETRANSMIT_WINDOW, min(RETRANSMIT_WINDOW, share))


class HalfStream:
    """State of one direction of one connection; see the module docstring."""

    __slots__ = (
        "acks",
        "conn_id",
        "deadline",
        "direction",
        "done",
        "fin_seq",
        "ignored",
        "midstream",
        "next_seq",
        "offset",
        "ooo",
        "ooo_bytes",
        "recent",
        "window",
    )

    def __init__(
        self, conn_id: int, direction: Direction, window: RetransmitWindow | None = None
    ) -> None:
        self.window = RetransmitWindow() if window is None else window
        self.conn_id = conn_id
        self.direction = direction
        self.next_seq: int | None = None  # sequence number of the next byte to deliver
        self.offset = 0  # stream offset of next_seq
        self.midstream = False
        self.fin_seq: int | None = None
        self.done = False  # FIN reached or RST seen
        self.ignored = False  # the caller is not interested: count offsets, deliver nothing
        self.ooo: dict[int, tuple[bytes, int, int, int]] = {}  # offset -> data, missing, pkt, ts
        self.ooo_bytes = 0
        # the pieces last delivered, to compare retransmissions
        self.recent: Recent = self.window.kind()
        # Acknowledgements of bytes not seen yet, oldest first: (stream offset acknowledged,
        # packet, ts) with increasing offsets; `deadline` is when the first one's grace ends.
        self.acks: list[tuple[int, int, int]] = []
        self.deadline = NEVER

    def ignore(self) -> None:
        """Deliver nothing from now on and drop what is buffered."""
        self.ignored = True
        self.ooo.clear()
        self.ooo_bytes = 0
        self.recent.clear()
        self.acks.clear()
        self.deadline = NEVER

    @property
    def recent_bytes(self) -> int:
        """Bytes kept to compare retransmissions with."""
        return self.recent.kept

    def segment(self, seq: int, data: bytes, missing: int, seg: Segment, out: EventSink) -> None:
        """Bytes at sequence number `seq` (general case: out of order, overlapping, lost)."""
        assert self.next_seq is not None
        d = seq_diff(seq, self.next_seq)
        if d == 0:
            self.deliver(data, missing, seg.number, seg.ts, out)
            if self.ooo:
                self.drain(out, seg.ts)
        elif d > 0:
            if d > MAX_JUMP:
                return
            if self.ignored:
                return
            offset = self.offset + d
            old = self.ooo.get(offset)
            if old is None or len(old[0]) + old[1] < len(data) + missing:
                self.ooo_bytes += len(data) - (len(old[0]) if old else 0)
                self.ooo[offset] = (data, missing, seg.number, seg.ts)
            if self.ooo_bytes > MAX_OUT_OF_ORDER_BYTES:
                out.append(
                    self._anomaly(
                        self.offset,
                        seg,
                        AnomalyCode.TCP_OUT_OF_ORDER_OVERFLOW,
                        f"{self.ooo_bytes} bytes buffered behind a hole",
                    )
                )
                self.advance(min(self.ooo), seg.number, seg.ts, out)
            elif self.acks and self.acks[0][0] <= offset:
                # Bytes sent after acknowledged ones are here, those are not: lost.
                while self.acks and self.acks[0][0] <= offset:
                    self._settle(*self.acks.pop(0), out)
                self.deadline = self.acks[0][2] + ACK_GRACE_US if self.acks else NEVER
        else:
            end = d + len(data) + missing
            if d == -1 and len(data) <= 1 and not missing:
                return  # keep-alive probe: one old byte (or none) below next_seq
            if d < -MAX_JUMP:
                return
            self._compare(self.offset + d, data[:-d], seg, out)
            if end > 0:
                cut = -d
                if cut <= len(data):
                    self.deliver(data[cut:], missing, seg.number, seg.ts, out)
                else:
                    self.deliver(b"", missing - (cut - len(data)), seg.number, seg.ts, out)
                if self.ooo:
                    self.drain(out, seg.ts)

    def deliver(self, data: bytes, missing: int, packet: int, ts: int, out: EventSink) -> None:
        """`data` continues the stream, then `missing` bytes were not captured."""
        n = len(data)
        if n:
            if not self.ignored:
                offset = self.offset
                out.append(
                    _new(StreamData, (self.conn_id, self.direction, offset, data, packet, ts))
                )
                self.recent.add(offset, data, self.window.size)
            self.offset += n
        if missing:
            if not self.ignored:
                out.append(
                    StreamGap(self.conn_id, self.direction, self.offset, missing, packet, ts)
                )
                out.append(
                    Anomaly.of(
                        AnomalyCode.TCP_GAP,
                        conn_id=self.conn_id,
                        direction=self.direction,
                        stream_offset=self.offset,
                        length=missing,
                        packet=packet,
                        ts=ts,
                        detail=f"{missing} bytes not captured",
                    )
                )
            self.offset += missing
        self.next_seq = ((self.next_seq or 0) + n + missing) & _MASK

    def drain(self, out: EventSink, now: int) -> None:
        """Deliver buffered segments that now continue the stream.

        They keep their own packet number (provenance) but are stamped `now`, the time the
        hole before them was filled: stream bytes are never available before that.
        """
        ooo = self.ooo
        while ooo:
            start = min(ooo)
            if start > self.offset:
                return
            data, missing, packet, ts = ooo.pop(start)
            ts = max(ts, now)
            self.ooo_bytes -= len(data)
            cut = self.offset - start
            if cut < len(data):
                self.deliver(data[cut:], missing, packet, ts, out)
            elif cut < len(data) + missing:
                self.deliver(b"", len(data) + missing - cut, packet, ts, out)

    def advance(self, target: int, packet: int, ts: int, out: EventSink) -> None:
        """Declare everything up to stream offset `target` received: holes become gaps."""
        while self.offset < target:
            if self.ooo and min(self.ooo) <= self.offset:
                self.drain(out, ts)
                continue
            upto = min(target, min(self.ooo)) if self.ooo else target
            self.deliver(b"", upto - self.offset, packet, ts, out)
        if self.ooo:
            self.drain(out, ts)

    def acked(self, ack: int, seg: Segment, out: EventSink) -> None:
        """The peer acknowledged up to `ack`: bytes before it were sent even if not captured
        yet. They may still arrive (the ACK was merged ahead of them): the hole becomes a gap
        only when the ACK is older than ACK_GRACE_US (`overdue`) or the connection ends."""
        assert self.next_seq is not None
        if self.fin_seq is not None and seq_diff(ack, self.fin_seq) > 0:
            ack = self.fin_seq
        d = seq_diff(ack, self.next_seq)
        if 0 < d <= MAX_JUMP:
            if self.ignored:  # nothing is delivered nor buffered: only offsets move
                self.advance(self.offset + d, seg.number, seg.ts, out)
                return
            target = self.offset + d
            acks = self.acks
            while acks and acks[0][0] <= self.offset:
                del acks[0]  # its bytes arrived
            if not acks or target > acks[-1][0]:
                if len(acks) < MAX_PENDING_ACKS:
                    acks.append((target, seg.number, seg.ts))
                else:
                    acks[-1] = (target, seg.number, seg.ts)
            self.deadline = acks[0][2] + ACK_GRACE_US

    def overdue(self, now: int, out: EventSink) -> None:
        """Capture time is `now`: holes acknowledged more than ACK_GRACE_US ago become gaps."""
        acks = self.acks
        while acks and acks[0][2] + ACK_GRACE_US < now:
            target, packet, ts = acks.pop(0)
            self._settle(target, packet, ts, out)
        self.deadline = acks[0][2] + ACK_GRACE_US if acks else NEVER

    def _settle(self, target: int, packet: int, ts: int, out: EventSink) -> None:
        """What was acknowledged up to stream offset `target` (by `packet` at `ts`) was
        sent: holes before it become gaps (not past a FIN seen since)."""
        if self.fin_seq is not None and self.next_seq is not None:
            target = min(target, self.offset + max(0, seq_diff(self.fin_seq, self.next_seq)))
        if target > self.offset:
            self.advance(target, packet, ts, out)

    def finish(self, packet: int, ts: int, out: EventSink) -> None:
        """The connection ends: buffered bytes and holes up to a seen FIN are delivered
        (holes acknowledged earlier as gaps at their acknowledgement)."""
        for target, ack_packet, ack_ts in self.acks:
            self._settle(target, ack_packet, ack_ts, out)
        self.acks.clear()
        self.deadline = NEVER
        ends = [k + len(v[0]) + v[1] for k, v in self.ooo.items()]
        if self.fin_seq is not None and self.next_seq is not None:
            ends.append(self.offset + max(0, seq_diff(self.fin_seq, self.next_seq)))
        if ends:
            self.advance(max(ends), packet, ts, out)
        self.recent.clear()

    def late_data(self, seg: Segment, out: EventSink) -> None:
        """A segment after the connection closed: reported when it carries new bytes."""
        if self.next_seq is not None and seq_diff(seg.seq, self.next_seq) >= 0:
            out.append(
                self._anomaly(
                    self.offset, seg, AnomalyCode.TCP_DATA_AFTER_CLOSE, f"{len(seg.payload)} bytes"
                )
            )

    def _compare(self, offset: int, data: bytes, seg: Segment, out: EventSink) -> None:
        """Report when retransmitted bytes at `offset` differ from those delivered."""
        if self.ignored:
            return
        differ = self.recent.differs(offset, data)
        if differ is not None:
            lo, hi = differ
            out.append(
                self._anomaly(
                    lo,
                    seg,
                    AnomalyCode.TCP_RETRANSMISSION_MISMATCH,
                    f"bytes {lo}..{hi} differ from the first copy",
                )
            )

    def _anomaly(self, offset: int, seg: Segment, code: str, detail: str) -> Anomaly:
        return Anomaly.of(
            code,
            conn_id=self.conn_id,
            direction=self.direction,
            stream_offset=offset,
            detail=detail,
            packet=seg.number,
            ts=seg.ts,
        )
