"""The benchmark captures: small frames, large segments, 1 MiB payloads.

Input: a path and a scale (1.0 is the issue's size; the quick mode uses tiny ones).
Output: a classic pcap at the path and a CaptureInfo: packets, frames, messages and
commands written (the generator's own record, the ground truth the benchmark checks
against).
Rule: every capture is a complete conversation per connection (handshake, CONNECT,
PRODUCER, traffic, CLOSE_PRODUCER, FIN), written with benchmarks.synthetic's precompiled
structs; payloads are seeded random bytes, so a scale gives the same file every time.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.synthetic import ACK, ETHERNET_MSS, PSH, Conn, PcapWriter
from benchmarks.traffic import Session

#: Full-scale parameters (scale 1.0), chosen to match the captures measured in issue 12.
SMALL_ROUNDS = 12_044  # 8 connections: ~195,800 packets, ~316,000 frames
SMALL_SENDS_PER_PACKET = (1, 2, 2, 1, 2, 2, 1, 2)  # 1.625 frames per data packet
SMALL_PAYLOAD = 100  # bytes of each small message
LARGE_FRAMES = 6_660  # SEND frames per connection, 16 connections: ~1.62 M packets, ~1.2 GB
LARGE_PAYLOAD = 10_240  # a SEND frame spans about 7 full 1448-byte segments
MIB_MESSAGES = 1_024  # 1 MiB messages over 4 connections: ~1.07 GB
MIB_PAYLOAD = 1 << 20
LOOPBACK_MSS = 65_000  # what a loopback (64 KiB MTU) capture of bulk transfer holds


@dataclass
class CaptureInfo:
    """What a generator wrote."""

    name: str
    path: str
    description: str
    connections: int
    packets: int = 0
    frames: int = 0
    messages: int = 0  # application messages (batches split, chunks joined), both directions
    file_bytes: int = 0
    payload_bytes: int = 0  # TCP payload bytes
    commands: dict[str, int] = field(default_factory=dict)


def finish_capture(info: CaptureInfo, writer: PcapWriter, commands: Counter[str]) -> CaptureInfo:
    writer.close()
    info.packets = writer.packets
    info.payload_bytes = writer.payload_bytes
    info.commands = dict(sorted(commands.items()))
    info.frames = sum(commands.values())
    info.file_bytes = Path(info.path).stat().st_size
    return info


def open_session(w: PcapWriter, conn: Conn, s: Session) -> None:
    """Handshake, CONNECT / CONNECTED and PRODUCER / PRODUCER_SUCCESS, one frame a packet."""
    w.handshake(conn)
    for request, response in (s.connect(), s.producer()):
        w.packet(conn, True, request, ACK | PSH)
        w.packet(conn, False, response, ACK | PSH)


def close_session(w: PcapWriter, conn: Conn, s: Session) -> None:
    request, response = s.close_producer()
    w.packet(conn, True, request, ACK | PSH)
    w.packet(conn, False, response, ACK | PSH)
    w.finish(conn)


def small(path: Path, scale: float = 1.0, connections: int = 8) -> CaptureInfo:
    """Small SEND / SEND_RECEIPT frames, one to three a packet, a PING / PONG now and then."""
    rounds = max(8, round(SMALL_ROUNDS * scale))
    info = CaptureInfo(
        "small",
        str(path),
        f"{connections} producer connections; per round a packet of 1-2 SEND frames "
        f"({SMALL_PAYLOAD}-byte messages) and one of their SEND_RECEIPTs; PING/PONG every "
        "64 rounds",
        connections,
    )
    commands: Counter[str] = Counter()
    payload = random.Random(1).randbytes(SMALL_PAYLOAD)
    sessions = [Session(i, commands) for i in range(connections)]
    conns = [Conn(i) for i in range(connections)]
    w = PcapWriter(path)
    for conn, s in zip(conns, sessions, strict=True):
        open_session(w, conn, s)
    seq = 0
    for r in range(rounds):
        k = SMALL_SENDS_PER_PACKET[r % len(SMALL_SENDS_PER_PACKET)]
        for conn, s in zip(conns, sessions, strict=True):
            w.packet(conn, True, b"".join(s.send(seq + j, payload) for j in range(k)), ACK | PSH)
            w.packet(
                conn, False, b"".join(s.receipt(seq + j, seq + j) for j in range(k)), ACK | PSH
            )
        seq += k
        if r % 64 == 63:
            for conn, s in zip(conns, sessions, strict=True):
                w.packet(conn, False, s.make("PING"), ACK | PSH)
                w.packet(conn, True, s.make("PONG"), ACK | PSH)
    for conn, s in zip(conns, sessions, strict=True):
        close_session(w, conn, s)
    info.messages = commands["SEND"]
    return finish_capture(info, w, commands)


class _Bulk:
    """One connection streaming SEND frames back to back, cut into full segments."""

    def __init__(self, conn: Conn, session: Session, frames: int, payload: bytes) -> None:
        self.conn, self.session, self.left, self.payload = conn, session, frames, payload
        self.pending = bytearray()
        self.sent = 0  # stream bytes of SEND frames written so far
        self.ends: deque[tuple[int, int]] = deque()  # (stream end, sequence id) not acked
        self.seq = 0

    def segment(self, mss: int) -> bytes:
        while len(self.pending) < mss and self.left:
            self.pending += self.session.send(self.seq, self.payload)
            self.ends.append((self.sent + len(self.pending), self.seq))
            self.seq += 1
            self.left -= 1
        data = bytes(self.pending[:mss])
        del self.pending[:mss]
        self.sent += len(data)
        return data

    def receipts(self) -> bytes:
        """SEND_RECEIPTs of every frame completed by the bytes sent so far."""
        out = []
        while self.ends and self.ends[0][0] <= self.sent:
            _, seq = self.ends.popleft()
            out.append(self.session.receipt(seq, seq))
        return b"".join(out)


def _bulk(path: Path, info: CaptureInfo, frames: int, payload: int, mss: int) -> CaptureInfo:
    """Interleave the connections segment by segment: the client's full segment, the
    broker's pure ACK, and a packet of SEND_RECEIPTs when frames completed."""
    commands: Counter[str] = Counter()
    rng = random.Random(2)
    bulks = []
    w = PcapWriter(path, step_us=2)
    for i in range(info.connections):
        conn, s = Conn(i), Session(i, commands)
        open_session(w, conn, s)
        bulks.append(_Bulk(conn, s, frames, rng.randbytes(payload)))
    active = list(bulks)
    while active:
        for b in active:
            w.packet(b.conn, True, b.segment(mss), ACK | PSH)
            w.packet(b.conn, False)
            receipts = b.receipts()
            if receipts:
                w.packet(b.conn, False, receipts, ACK | PSH)
        active = [b for b in active if b.left or b.pending]
    for b in bulks:
        close_session(w, b.conn, b.session)
    info.messages = commands["SEND"]
    return finish_capture(info, w, commands)


def large(
    path: Path, scale: float = 1.0, connections: int = 16, name: str = "large"
) -> CaptureInfo:
    """Frames larger than a segment, streamed in full 1448-byte segments."""
    frames = max(2, round(LARGE_FRAMES * scale))
    info = CaptureInfo(
        name,
        str(path),
        f"{connections} producer connections each streaming {frames:,} SEND frames of "
        f"{LARGE_PAYLOAD:,}-byte messages back to back in full {ETHERNET_MSS}-byte segments "
        "(frames span segments); the broker ACKs every segment and sends SEND_RECEIPTs",
        connections,
    )
    return _bulk(path, info, frames, LARGE_PAYLOAD, ETHERNET_MSS)


def half(path: Path, scale: float = 1.0) -> CaptureInfo:
    """The large capture at half its size: peak memory must not depend on capture size."""
    return large(path, scale / 2, name="half")


def mib(path: Path, scale: float = 1.0, connections: int = 4) -> CaptureInfo:
    """1 MiB messages with checksums, in loopback-sized segments (the per-byte cost)."""
    per_conn = max(1, round(MIB_MESSAGES * scale / connections))
    info = CaptureInfo(
        "mib",
        str(path),
        f"{connections} producer connections each sending {per_conn:,} SEND frames of 1 MiB "
        f"messages with CRC32C, in {LOOPBACK_MSS:,}-byte segments (a loopback capture)",
        connections,
    )
    return _bulk(path, info, per_conn, MIB_PAYLOAD, LOOPBACK_MSS)
