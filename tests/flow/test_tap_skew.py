"""ACKs merged ahead of the data they acknowledge (issue 31, finding F3): a full-duplex TAP
writes one file per direction and the second file's clock is ahead, so in timestamp order
the client's ACKs of broker bytes come before the broker's segments carrying them.

Expected values come from what was put in: the frames the crafted sessions carry, the
segment left out of a file and the ACK that first covers it (its position in the merged
order, computed here from the timestamps given), and the reproducer's known truth (56 frames:
the client's 28 and the broker's 28).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dissector.events import Anomaly, Segment, StreamData, StreamGap
from dissector.flow import reassembly
from dissector.flow.reassembly import ACK_GRACE_US, MAX_PENDING_ACKS, HalfStream
from dissector.flow.tcp import ACK, SYN, Reassembler
from dissector.read import Capture, read_capture
from tests.flow.test_idle_timeout import read
from tests.support.crafted import (
    B2C,
    C2B,
    FRAME_COLUMNS,
    STEP_US,
    T0_US,
    Conn,
    Msg,
    Seg,
    Session,
    baseline_msgs,
    baseline_session,
    chunks,
    expected_rows,
    msg,
    write_pcap,
)
from tests.support.memory_tls import run_tls

DATA = Path(__file__).parent / "data"
#: The broker file's clock is this far ahead (the reproducer's skew).
SKEW_US = 20_000
#: The topic is left out: with the broker 20 ms late, a receipt can follow the CLOSE_PRODUCER
#: that forgot its producer (what the clock says, not a reassembly matter).
COLUMNS = tuple(c for c in FRAME_COLUMNS if not c.endswith("_packet") and c != "topic")

# --------------------------------------------------------------------------- flow table

CLIENT = ("10.0.0.1", 40000)
BROKER = ("10.0.0.2", 6650)


class Feed:
    """A flow table fed segments with explicit times; keeps what each feed returned."""

    def __init__(self) -> None:
        self.r = Reassembler(broker_ports={6650})
        self.number = 0
        self.events: list[object] = []

    def __call__(
        self,
        ts: int,
        seq: int,
        payload: bytes = b"",
        *,
        ack: int = 0,
        broker: bool = False,
        flags: int = ACK,
    ) -> list[object]:
        self.number += 1
        frm, to = (BROKER, CLIENT) if broker else (CLIENT, BROKER)
        s = Segment(self.number, ts, frm[0], to[0], frm[1], to[1], seq, ack, flags, 65535,
                    payload, 0)  # fmt: skip
        got: list[object] = list(self.r.feed(s))
        self.events += got
        return got

    def close(self) -> None:
        self.events += self.r.close()

    def opened(self) -> None:
        """Handshake at 0..2 µs: client ISN 1000, broker ISN 5000."""
        self(0, 1000, flags=SYN)
        self(1, 5000, ack=1001, broker=True, flags=SYN | ACK)
        self(2, 1001, ack=5001)


def b2c(events: list[object]) -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """Broker bytes delivered, and its gaps as (offset, length, packet, ts)."""
    data = b"".join(e.data for e in events if isinstance(e, StreamData) and e.direction is B2C)
    gaps = [(e.offset, e.length, e.packet, e.ts) for e in events
            if isinstance(e, StreamGap) and e.direction is B2C]  # fmt: skip
    return data, gaps


def test_data_after_its_ack_fills_the_hole() -> None:
    feed = Feed()
    feed.opened()
    t = 1_000_000
    feed(t, 1001, ack=5011)  # the client acknowledges 10 broker bytes not seen yet
    feed(t + SKEW_US, 5001, b"0123456789", ack=1001, broker=True)
    feed(t + SKEW_US + 1, 1001, ack=5011)
    feed.close()
    assert b2c(feed.events) == (b"0123456789", [])
    assert not [e for e in feed.events if isinstance(e, Anomaly)]


def test_ack_of_lost_bytes_is_a_gap_once_its_grace_has_passed() -> None:
    feed = Feed()
    feed.opened()
    t = 1_000_000
    ack_events = feed(t, 1001, ack=5011)  # packet 4: 10 broker bytes, never captured
    assert b2c(ack_events) == (b"", [])
    assert b2c(feed(t + ACK_GRACE_US, 1001, ack=5011)) == (b"", [])  # still within
    late = feed(t + ACK_GRACE_US + 1, 1001, ack=5011)
    assert b2c(late) == (b"", [(0, 10, 4, t)])  # at the ACK, as when declared at once
    gap = next(e for e in late if isinstance(e, Anomaly))
    assert (gap.code, gap.stream_offset, gap.length, gap.packet) == ("tcp.gap", 0, 10, 4)
    # the bytes coming now are too late: old, dropped
    feed(t + ACK_GRACE_US + 2, 5001, b"0123456789", ack=1001, broker=True)
    feed.close()
    assert b2c(feed.events) == (b"", [(0, 10, 4, t)])


def test_ack_of_lost_bytes_is_a_gap_when_the_connection_ends() -> None:
    feed = Feed()
    feed.opened()
    assert b2c(feed(1_000, 1001, ack=5011)) == (b"", [])  # waits: still within the grace
    # the last 5 acknowledged bytes come, not the first 5: buffered, they may still come
    assert b2c(feed(2_000, 5006, b"later", ack=1001, broker=True)) == (b"", [])
    feed.close()
    assert b2c(feed.events) == (b"later", [(0, 5, 4, 1_000)])


def test_bytes_sent_after_the_acknowledged_ones_prove_the_loss() -> None:
    """A direction's segments keep their order in the capture (also in a file of their
    own): bytes sent after acknowledged bytes arriving first mean those were not captured."""
    feed = Feed()
    feed.opened()
    assert b2c(feed(1_000, 1001, ack=5011)) == (b"", [])
    after = feed(2_000, 5011, b"after", ack=1001, broker=True)
    assert b2c(after) == (b"after", [(0, 10, 4, 1_000)])


def test_acks_waiting_for_their_bytes_are_bounded() -> None:
    half = HalfStream(1, B2C)
    half.next_seq = 5001
    out: list[Any] = []
    for i in range(1, 10 * MAX_PENDING_ACKS):
        ack = Segment(i, i, *CLIENT[:1], *BROKER[:1], CLIENT[1], BROKER[1], 1001, 5001 + 10 * i,
                      ACK, 65535, b"", 0)  # fmt: skip
        half.acked(ack.ack, ack, out)
        assert len(half.acks) <= MAX_PENDING_ACKS
    assert out == []
    # the bytes come (within the grace of every ACK): nothing is lost
    for i in range(10 * MAX_PENDING_ACKS - 1):
        data = Segment(0, 0, *BROKER[:1], *CLIENT[:1], BROKER[1], CLIENT[1], 5001 + 10 * i,
                       1001, ACK, 65535, b"x" * 10, 0)  # fmt: skip
        half.segment(data.seq, data.payload, 0, data, out)
    half.overdue(ACK_GRACE_US + 10 * MAX_PENDING_ACKS + 1, out)
    half.finish(0, 0, out)
    assert [type(e) for e in out] == [StreamData] * (10 * MAX_PENDING_ACKS - 1)
    assert half.acks == []


def test_the_out_of_order_bound_still_ends_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reassembly, "MAX_OUT_OF_ORDER_BYTES", 10)
    feed = Feed()
    feed.opened()
    feed(1_000, 1001, ack=5031)  # 30 bytes acknowledged; the first 10 never come
    feed(1_001, 5011, b"a" * 6, ack=1001, broker=True)
    overflow = feed(1_002, 5021, b"b" * 6, ack=1001, broker=True)
    assert "tcp.out_of_order_overflow" in [e.code for e in overflow if isinstance(e, Anomaly)]
    assert b2c(overflow)[0] == b"a" * 6  # the hole before them was declared at once
    feed.close()
    data, gaps = b2c(feed.events)
    assert data == b"a" * 6 + b"b" * 6
    assert [(o, n) for o, n, _, _ in gaps] == [(0, 10), (16, 4), (26, 4)]


# --------------------------------------------------------------------------- captures


def tap(
    tmp: Path,
    segs: Sequence[Seg],
    *,
    lost: Sequence[Seg] = (),
    pause_after: int | None = None,
) -> tuple[list[Path], list[Seg]]:
    """One file per direction, as a TAP writes them: segment i at T0 + i ms (plus 2 s after
    segment `pause_after`), the broker's file SKEW_US ahead; `lost` segments in neither.
    Returns the files and the merged order (by time, ties: b2c.pcap first, as sorted)."""
    timed = []
    for i, seg in enumerate(segs):
        ts = T0_US + i * STEP_US + (SKEW_US if seg.direction is B2C else 0)
        if pause_after is not None and i > pause_after:
            ts += 2 * ACK_GRACE_US
        if not any(seg is x for x in lost):
            timed.append(seg.replace(ts_us=ts))
    files = []
    for name, direction in (("c2b.pcap", C2B), ("b2c.pcap", B2C)):
        mine = [s for s in timed if s.direction is direction]
        files.append(write_pcap(tmp / name, mine).path)
    merged = sorted(timed, key=lambda s: (s.ts_us, s.direction is C2B))
    return files, merged


def sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [{k: v for k, v in r.items() if k != "topic"} for r in rows]
    return sorted(kept, key=lambda r: (r["direction"], r["stream_offset"]))


def frames(cap: Capture) -> list[dict[str, Any]]:
    return sorted_rows(cap.arrow["frames"].select(list(COLUMNS)).to_pylist())


def gaps(cap: Capture) -> list[tuple[str, int, int, int]]:
    return [(a["direction"], a["stream_offset"], a["length"], a["packet"])
            for a in cap.arrow["anomalies"].to_pylist() if a["code"] == "tcp.gap"]  # fmt: skip


def pings(pairs: int = 20) -> list[Msg]:
    """PING / PONG pairs: with a segment each, they make the session outlast the skew (the
    files' time spans must overlap to merge)."""
    return [msg(d, name) for _ in range(pairs) for d, name in ((C2B, "PING"), (B2C, "PONG"))]


def long_session(close: bool = True) -> Session:
    s = baseline_session(close=False)
    s.exchange(pings())
    if close:
        s.close()
    return s


def test_two_file_tap_with_a_skewed_clock_loses_nothing(tmp_path: Path) -> None:
    s = long_session()
    files, _ = tap(tmp_path, s.segs)
    cap = read_capture(files)
    assert len(cap.arrow["frames"]) == len(s.placed)
    assert frames(cap) == sorted_rows(expected_rows(s.placed))
    assert [a["code"] for a in cap.arrow["anomalies"].to_pylist()] == []
    (conv,) = cap.arrow["conversations"].to_pylist()
    assert (conv["gap_bytes_c2b"], conv["gap_bytes_b2c"]) == (0, 0)


def test_two_file_tap_of_a_tls_session_loses_nothing(tmp_path: Path) -> None:
    msgs = baseline_msgs() + pings()
    run = run_tls(tmp_path, [(m.direction, m.data) for m in msgs])
    s = Session(Conn(broker_port=6651))
    s.handshake()
    for direction, data in run.wire:
        s.send_pieces(direction, chunks(data, 1400))
    s.close()
    files, _ = tap(tmp_path, s.segs)
    cap = read_capture(files, tls_keylog=run.keylog)
    at = {C2B: 0, B2C: 0}
    want = []
    for m in msgs:
        want.append(
            {"direction": m.direction.value, "command": m.name, "stream_offset": at[m.direction]}
        )
        at[m.direction] += len(m.data)
    got = cap.arrow["frames"].select(["direction", "command", "stream_offset"]).to_pylist()
    assert sorted_rows(got) == sorted_rows(want)
    assert "tcp.gap" not in [a["code"] for a in cap.arrow["anomalies"].to_pylist()]


#: How the lost broker bytes are found lost: by the broker's next bytes, by the grace of the
#: client's ACK (2 s pass, then the client speaks first), by the end of the connection.
LOSS_FOUND = ["next_bytes", "after_the_grace", "at_the_end"]


@pytest.mark.parametrize("found", LOSS_FOUND)
def test_real_loss_in_a_two_file_tap_is_the_same_gap(tmp_path: Path, found: str) -> None:
    s = long_session(close=False)
    s.exchange([msg(C2B, "PING")])
    (lost,) = s.exchange([msg(B2C, "PONG")])  # a whole frame in a segment no file holds
    s.exchange([msg(C2B, "PING")])  # acknowledges it
    pause_after = None
    if found == "after_the_grace":
        pause_after = len(s.segs) - 1
    if found != "at_the_end":
        s.exchange([msg(C2B, "PING"), msg(B2C, "PONG")])
    s.close()
    files, merged = tap(tmp_path, s.segs, lost=[lost], pause_after=pause_after)
    cap = read_capture(files)
    # the first client packet acknowledging the lost bytes (the broker's SYN-ACK is long
    # merged by then: its sequence numbers are known)
    end = (lost.seq + len(lost.payload)) & 0xFFFFFFFF
    first_ack = next(i for i, x in enumerate(merged, 1)
                     if x.direction is C2B and (x.ack - end) & 0xFFFFFFFF < 1 << 31)  # fmt: skip
    synack = next(i for i, x in enumerate(merged, 1) if x.flags == "SA")
    assert synack < first_ack
    assert gaps(cap) == [(B2C.value, lost.offset, len(lost.payload), first_ack)]
    (gap,) = [a for a in cap.arrow["anomalies"].to_pylist() if a["code"] == "tcp.gap"]
    assert gap["detail"] == f"{len(lost.payload)} bytes not captured"
    kept = [p for p in s.placed if not (p.msg.direction is B2C and p.offset == lost.offset)]
    assert len(kept) == len(s.placed) - 1
    assert frames(cap) == sorted_rows(expected_rows(kept))


def test_reproducer_pair_gives_every_frame_with_one_or_two_workers() -> None:
    files = [DATA / "tap_c2b.pcap", DATA / "tap_b2c_skew20ms.pcap"]
    keylog = DATA / "tls13_keylog.txt"
    cap = read_capture(files, tls_keylog=keylog)
    rows = cap.arrow["frames"].select(["direction"]).to_pylist()
    assert len(rows) == 56
    assert sorted(r["direction"] for r in rows) == [B2C.value] * 28 + [C2B.value] * 28
    assert [a["code"] for a in cap.arrow["anomalies"].to_pylist()] == []
    one = read(files, 1, tls_keylog=(str(keylog),))
    assert len(one["frames"]) == 56
    assert read(files, 2, tls_keylog=(str(keylog),)) == one
