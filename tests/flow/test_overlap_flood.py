"""Floods of overlapping TCP data (fuzzing finding F12, issue 31): linear, same anomalies.

- A flood of segments each overlapping the previous one and adding one byte kept one window
  entry per byte (up to 262,144) and compared every segment with all of them. The window
  now keeps at most one piece per MIN_PIECE_BYTES bytes, and the work per segment (blocks
  compared, counted by `RecentBytes.compared`) does not grow with the flood: doubling it
  doubles the work.
- What is reported does not change: the first piece, in stream order, whose bytes the
  retransmission contradicts (first copy wins), clipped to the retransmission. Expected
  anomalies are computed here from the payloads put in.
- The same flood carried in overlapping IP fragments ("teardrop" pairs) reaches TCP after
  reassembly; placing a fragment looks only at the byte ranges it overlaps.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from dissector.events import Anomaly, RawPacket, StreamData
from dissector.flow import recent
from dissector.flow.reassembly import RETRANSMIT_WINDOW
from dissector.flow.recent import RecentBytes
from dissector.flow.tcp import C2B, Reassembler
from dissector.net.fragments import Fragment, FragmentReassembler
from dissector.pipeline import Pipeline
from tests.support import floods


def feed(segments: list[Any]) -> tuple[Reassembler, list[Any]]:
    tcp = Reassembler(broker_ports={6650})
    events: list[Any] = []
    for s in segments:
        events.extend(tcp.feed(s))
    return tcp, events


def mismatches(events: list[Any]) -> list[tuple[int, int | None, str]]:
    return [
        (e.packet, e.stream_offset, e.detail)
        for e in events
        if isinstance(e, Anomaly) and e.code == "tcp.retransmission_mismatch"
    ]


def compared(tcp: Reassembler) -> int:
    (conn,) = tcp._conns.values()
    return int(conn.halves[C2B].recent.compared)


def test_the_window_keeps_a_bounded_number_of_pieces() -> None:
    """20,000 one-byte pieces: 256 KiB of window would hold all of them; it keeps 8,192
    (one per 32 bytes of the window), the newest."""
    tcp, _ = feed(floods.segments(20_000))
    (conn,) = tcp._conns.values()
    half = conn.halves[C2B]
    assert len(half.recent) <= RETRANSMIT_WINDOW // 32 == 8192
    assert len(half.recent) == RETRANSMIT_WINDOW // recent.MIN_PIECE_BYTES


def test_the_work_per_segment_does_not_grow_with_the_flood() -> None:
    """Blocks compared for N and 2N segments: twice as many, a handful per segment, whether
    every overlap matches (1400-byte segments: nothing stops the comparison early) or
    differs (52 random bytes: reported at once)."""
    for size, same in ((1400, True), (52, False)):
        n = 4_000
        small, _ = feed(floods.segments(n, size, same=same))
        large, events = feed(floods.segments(2 * n, size, same=same))
        assert (len(mismatches(events)) == 0) == same
        a, b = compared(small), compared(large)
        assert b <= 2 * a + 10, (size, a, b)
        assert b <= 3 * 2 * n, (size, b)


def expected_flood_mismatches(payloads: list[bytes]) -> list[tuple[int, int | None, str]]:
    """By hand: segment k (packet k+1) covers offsets k..k+size; the stream keeps the first
    copy of each byte (segment 0's `size` bytes, then one new byte per segment). Segment k
    is reported at the first delivered piece holding a byte it contradicts: segment 0's
    piece [0, size) clipped to [k, size), or the one-byte piece [p, p+1)."""
    size = len(payloads[0])
    first = bytearray(payloads[0])
    out: list[tuple[int, int | None, str]] = []
    for k, data in enumerate(payloads[1:], start=1):
        old = bytes(first[k:])  # the overlap: offsets k .. k+size-1
        diff = next((i for i in range(len(old)) if old[i] != data[i]), None)
        if diff is not None:
            p = k + diff
            lo, hi = (k, size) if p < size else (p, p + 1)
            out.append((k + 1, lo, f"bytes {lo}..{hi} differ from the first copy"))
        first += data[-1:]
    return out


def test_flood_anomalies_are_the_first_copy_wins_truth() -> None:
    payloads = floods.payloads(3_000)
    _, events = feed(floods.segments(3_000))
    assert mismatches(events) == expected_flood_mismatches(payloads)
    stream = b"".join(e.data for e in events if isinstance(e, StreamData))
    assert stream == payloads[0] + bytes(p[-1] for p in payloads[1:])


def _model_differs(pieces: list[tuple[int, bytes]], offset: int, data: bytes) -> Any:
    """The plain scan the window answers as: every piece kept, in order."""
    end = offset + len(data)
    for start, old in pieces:
        lo, hi = max(start, offset), min(start + len(old), end)
        if lo < hi and old[lo - start : hi - start] != data[lo - offset : hi - offset]:
            return lo, hi
    return None


@pytest.mark.parametrize(
    ("keep", "sizes"),
    [(16 << 10, (1, 2, 7, 100, 900, 1448, 3000)), (4 << 10, (1, 2, 3, 7, 40))],
    ids=["mixed", "tiny"],
)
def test_the_window_answers_as_a_scan_of_every_piece_kept(keep: int, sizes: tuple[int]) -> None:
    """Random pieces (some after a gap) and random overlapping copies, against the plain
    scan of the pieces kept under the documented rule: whole pieces, the oldest dropped
    while the others still hold `keep` bytes (checked when the newest one has come in
    whole on top of `keep`), or while there are more than keep // 32 ("tiny": mostly
    that bound)."""
    rng = random.Random(31)
    window = RecentBytes()
    pieces: list[tuple[int, bytes]] = []
    stream: dict[int, int] = {}
    offset = 0
    most = keep // 32
    for _ in range(3_000):
        if rng.random() < 0.1:
            offset += rng.randint(1, 300)  # a gap: bytes never captured
        size = rng.choice(sizes)
        data = rng.randbytes(size)
        window.add(offset, data, keep)
        pieces.append((offset, data))
        for i, b in enumerate(data):
            stream[offset + i] = b
        kept = sum(len(d) for _, d in pieces)
        if kept >= keep + size or len(pieces) > most:
            while len(pieces) > 1 and (kept - len(pieces[0][1]) >= keep or len(pieces) > most):
                kept -= len(pieces.pop(0)[1])
        offset += size
        assert window.kept == kept and len(window) == len(pieces)
        at = rng.randint(max(0, offset - keep - 2000), offset - 1)
        n = rng.randint(1, min(2000, offset - at))
        copy = bytearray(stream.get(at + i, 0) for i in range(n))
        if rng.random() < 0.5:
            copy[rng.randrange(n)] ^= 0xFF
        assert window.differs(at, bytes(copy)) == _model_differs(pieces, at, bytes(copy))


def test_placing_a_fragment_looks_only_at_the_ranges_it_overlaps() -> None:
    """200 fragments of 8 bytes, in order, of one datagram: each is placed after at most
    two ranges looked at (a scan from the first would look at 19,900)."""
    frags = FragmentReassembler()
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    for i in range(200):
        frags.feed(Fragment(i + 1, i, src, dst, 7, 6, 8 * i, True, bytes(8), 0, 0))
    assert len(frags) == 1
    assert frags.scanned <= 2 * 200


def test_a_teardrop_flood_reaches_tcp_and_stays_linear() -> None:
    """The flood in overlapping fragment pairs: every datagram completes, TCP reports what
    the plain flood gives, and doubling it doubles the blocks compared."""
    n = 3_000
    counts = []
    for count in (n, 2 * n):
        pipe = Pipeline(broker_ports={6650})
        events = []
        for i, frame in enumerate(floods.teardrop_frames(count)):
            events.extend(pipe.feed(RawPacket(i + 1, i, 1, frame, len(frame))))
        counts.append(compared(pipe.tcp))
        if count == n:
            got = [(off, det) for _, off, det in mismatches(events)]
            want = [(off, det) for _, off, det in expected_flood_mismatches(floods.payloads(n))]
            assert got == want
    assert counts[1] <= 2 * counts[0] + 10, counts
