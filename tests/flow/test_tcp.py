"""TCP reassembly: order, loss, retransmission, overlap, wrap-around, ends, reuse."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissector.events import (
    Anomaly,
    CloseReason,
    ConnClosed,
    ConnOpened,
    Direction,
    Segment,
    StreamData,
    StreamGap,
)
from dissector.flow import reassembly
from dissector.flow.tcp import ACK, FIN, RST, SYN, Reassembler, seq_diff

CLIENT = ("10.0.0.1", 40000)
BROKER = ("10.0.0.2", 6650)
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_counter = iter(range(1, 1 << 30))


def seg(
    seq: int,
    payload: bytes = b"",
    flags: int = ACK,
    *,
    ack: int = 0,
    frm: tuple[str, int] = CLIENT,
    to: tuple[str, int] = BROKER,
    missing: int = 0,
) -> Segment:
    n = next(_counter)
    return Segment(n, n * 10, frm[0], to[0], frm[1], to[1], seq & 0xFFFFFFFF, ack, flags, 65535,
                   payload, missing)  # fmt: skip


def run(segments: list[Segment], ports: set[int] | None = None) -> list[object]:
    r = Reassembler(broker_ports=ports if ports is not None else {6650})
    events: list[object] = []
    for s in segments:
        events.extend(r.feed(s))
    events.extend(r.close())
    return events


def stream(events: list[object], direction: Direction = C2B) -> tuple[bytes, list[tuple[int, int]]]:
    """Delivered bytes (gaps as None-free concatenation) and the gaps (offset, length)."""
    data = b""
    gaps = []
    offset = 0
    for e in events:
        if isinstance(e, StreamData) and e.direction is direction:
            assert e.offset == offset
            data += e.data
            offset += len(e.data)
        elif isinstance(e, StreamGap) and e.direction is direction:
            assert e.offset == offset
            gaps.append((e.offset, e.length))
            offset += e.length
    return data, gaps


def codes(events: list[object]) -> list[str]:
    return [e.code for e in events if isinstance(e, Anomaly)]


def handshake(isn: int = 1000, server_isn: int = 5000) -> list[Segment]:
    return [
        seg(isn, flags=SYN),
        seg(server_isn, flags=SYN | ACK, ack=isn + 1, frm=BROKER, to=CLIENT),
        seg(isn + 1, ack=server_isn + 1),
    ]


def test_seq_diff_wraps() -> None:
    assert seq_diff(5, 2**32 - 5) == 10
    assert seq_diff(2**32 - 5, 5) == -10
    assert seq_diff(7, 7) == 0


def test_in_order_both_directions_and_roles() -> None:
    events = run(
        handshake()
        + [
            seg(1001, b"hello "),
            seg(1007, b"world"),
            seg(5001, b"reply", frm=BROKER, to=CLIENT, ack=1012),
        ]
    )
    opened = [e for e in events if isinstance(e, ConnOpened)]
    assert len(opened) == 1
    assert opened[0].key == (*CLIENT, *BROKER) and opened[0].syn_seen and not opened[0].guessed
    assert stream(events) == (b"hello world", [])
    assert stream(events, B2C) == (b"reply", [])
    assert codes(events) == []
    (closed,) = [e for e in events if isinstance(e, ConnClosed)]
    assert closed.reason == "capture_end"
    assert (closed.packets_c2b, closed.packets_b2c) == (4, 2)
    assert (closed.bytes_c2b, closed.bytes_b2c) == (11, 5)


def test_broker_port_decides_roles_even_without_syn() -> None:
    events = run([seg(77, b"data", frm=BROKER, to=CLIENT)])
    (opened,) = [e for e in events if isinstance(e, ConnOpened)]
    assert opened.key.broker_port == 6650 and not opened.guessed
    assert stream(events, B2C) == (b"data", [])
    assert codes(events) == ["tcp.midstream_start"]


def test_syn_receiver_is_broker_on_other_ports() -> None:
    events = run(handshake(), ports=set())
    (opened,) = [e for e in events if isinstance(e, ConnOpened)]
    assert opened.key == (*CLIENT, *BROKER) and not opened.guessed
    events = run([seg(1, b"x", frm=("1.1.1.1", 5555), to=("2.2.2.2", 7777))], ports=set())
    (opened,) = [e for e in events if isinstance(e, ConnOpened)]
    assert opened.guessed


def test_reordering_is_repaired() -> None:
    events = run(handshake() + [seg(1007, b"world"), seg(1001, b"hello ")])
    assert stream(events) == (b"hello world", [])
    assert codes(events) == []


def test_retransmission_same_bytes_is_silent() -> None:
    events = run(handshake() + [seg(1001, b"hello"), seg(1001, b"hello"), seg(1006, b"!")])
    assert stream(events) == (b"hello!", [])
    assert codes(events) == []


def test_retransmission_with_different_bytes_is_reported() -> None:
    events = run(handshake() + [seg(1001, b"hello"), seg(1001, b"jello"), seg(1006, b"!")])
    assert stream(events) == (b"hello!", [])
    assert codes(events) == ["tcp.retransmission_mismatch"]


def test_overlap_delivers_each_byte_once() -> None:
    events = run(handshake() + [seg(1001, b"0123456789"), seg(1006, b"56789abcde")])
    assert stream(events) == (b"0123456789abcde", [])
    assert codes(events) == []


def test_overlapping_out_of_order_segments() -> None:
    events = run(handshake() + [seg(1011, b"abcdef"), seg(1009, b"89ab"), seg(1001, b"01234567")])
    assert stream(events) == (b"0123456789abcdef", [])


def test_sequence_wrap_around() -> None:
    isn = 2**32 - 8
    data = bytes(range(40))
    segs = handshake(isn) + [seg(isn + 1 + i, data[i : i + 10]) for i in range(0, 40, 10)]
    events = run(segs)
    assert stream(events) == (data, [])
    assert codes(events) == []


def test_loss_becomes_a_gap_when_acknowledged() -> None:
    segs = handshake() + [
        seg(1001, b"aaaa"),
        # 1005..1012 (8 bytes) never captured
        seg(1013, b"cccc"),
        seg(5001, flags=ACK, ack=1017, frm=BROKER, to=CLIENT),
        seg(1017, b"dd"),
    ]
    events = run(segs)
    assert stream(events) == (b"aaaaccccdd", [(4, 8)])
    gap_anomalies = [e for e in events if isinstance(e, Anomaly) and e.code == "tcp.gap"]
    assert [(a.stream_offset, a.length) for a in gap_anomalies] == [(4, 8)]


def test_loss_at_the_end_is_a_gap_up_to_the_fin() -> None:
    segs = handshake() + [seg(1001, b"aaaa"), seg(1009, b"", flags=FIN | ACK)]
    events = run(segs)
    assert stream(events) == (b"aaaa", [(4, 4)])


def test_snaplen_cut_payload_is_a_gap() -> None:
    events = run(handshake() + [seg(1001, b"0123456789", missing=90), seg(1101, b"next")])
    assert stream(events) == (b"0123456789next", [(10, 90)])


def test_keepalive_probe_is_ignored() -> None:
    events = run(handshake() + [seg(1001, b"abc"), seg(1003, b"\x00"), seg(1004, b"d")])
    assert stream(events) == (b"abcd", [])
    assert codes(events) == []


def test_fin_both_ways_closes() -> None:
    segs = handshake() + [
        seg(1001, b"bye", flags=FIN | ACK),
        seg(5001, b"", flags=FIN | ACK, ack=1005, frm=BROKER, to=CLIENT),
        seg(1005, ack=5002),
    ]
    events = run(segs)
    assert [e.reason for e in events if isinstance(e, ConnClosed)] == ["fin"]


def test_the_side_whose_fin_or_rst_came_first_ended_it() -> None:
    broker_first = handshake() + [
        seg(5001, b"", flags=FIN | ACK, ack=1001, frm=BROKER, to=CLIENT),
        seg(1001, b"", flags=FIN | ACK, ack=5002),
        seg(5002, ack=1002, frm=BROKER, to=CLIENT),
    ]
    (closed,) = [e for e in run(broker_first) if isinstance(e, ConnClosed)]
    fin = broker_first[3]  # the broker's FIN
    assert (closed.closed_by, closed.close_packet, closed.close_ts) == (B2C, fin.number, fin.ts)
    client_rst = handshake() + [seg(1001, b"a"), seg(1002, flags=RST)]
    (closed,) = [e for e in run(client_rst) if isinstance(e, ConnClosed)]
    assert (closed.closed_by, closed.close_packet) == (C2B, client_rst[-1].number)
    (open_at_end,) = [e for e in run(handshake()) if isinstance(e, ConnClosed)]
    assert open_at_end.reason == "capture_end" and open_at_end.closed_by is None


def test_rst_closes_and_data_after_close_is_reported() -> None:
    segs = handshake() + [seg(1001, b"a"), seg(1002, flags=RST), seg(1002, b"late")]
    events = run(segs)
    assert [e.reason for e in events if isinstance(e, ConnClosed)] == ["rst"]
    assert codes(events) == ["tcp.data_after_close"]


def test_port_reuse_starts_a_new_conversation() -> None:
    first = handshake(1000) + [seg(1001, b"one", flags=FIN | ACK)]
    first += [seg(5001, flags=FIN | ACK, ack=1005, frm=BROKER, to=CLIENT)]
    second = handshake(90000, 70000) + [seg(90001, b"two")]
    events = run(first + second)
    opened = [e.conn_id for e in events if isinstance(e, ConnOpened)]
    closed = [(e.conn_id, e.reason) for e in events if isinstance(e, ConnClosed)]
    assert len(opened) == 2 and opened[0] != opened[1]
    assert closed == [(opened[0], "fin"), (opened[1], "capture_end")]
    by_conn = {c: b"".join(e.data for e in events if isinstance(e, StreamData) and e.conn_id == c)
               for c in opened}  # fmt: skip
    assert by_conn == {opened[0]: b"one", opened[1]: b"two"}


def test_syn_with_new_isn_on_open_connection_is_reuse() -> None:
    events = run(handshake(1000) + [seg(1001, b"x")] + handshake(50000, 60000))
    assert [e.reason for e in events if isinstance(e, ConnClosed)] == ["port_reuse", "capture_end"]


def test_out_of_order_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reassembly, "MAX_OUT_OF_ORDER_BYTES", 10)
    segs = handshake() + [seg(1011, b"x" * 6), seg(1021, b"y" * 6)]
    events = run(segs)
    assert "tcp.out_of_order_overflow" in codes(events)
    data, gaps = stream(events)
    assert data == b"x" * 6 + b"y" * 6
    assert gaps == [(0, 10), (16, 4)]


def test_ignored_connection_delivers_nothing() -> None:
    r = Reassembler()
    out = []
    for s in handshake():
        out += r.feed(s)
    conn_id = next(e.conn_id for e in out if isinstance(e, ConnOpened))
    r.ignore(conn_id)
    assert not [e for e in r.feed(seg(1001, b"secret")) if isinstance(e, StreamData)]


def test_roles_are_taken_once_at_the_first_packet() -> None:
    """No broker port, no SYN: the first packet's destination is taken for the broker, a
    guess; TCP keeps it (the caller swaps what TCP says when a CONNECT tells otherwise)."""
    r = Reassembler(broker_ports=set())
    out = r.feed(seg(1, b"a", frm=("1.1.1.1", 5555), to=("2.2.2.2", 7777)))
    (opened,) = [e for e in out if isinstance(e, ConnOpened)]
    assert opened.key == ("1.1.1.1", 5555, "2.2.2.2", 7777) and opened.guessed
    (data,) = [e for e in r.feed(seg(2, b"b", frm=("2.2.2.2", 7777), to=("1.1.1.1", 5555)))
               if isinstance(e, StreamData)]  # fmt: skip
    assert data.direction is B2C


@given(
    st.binary(min_size=1, max_size=3000),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**31),
    st.floats(0, 1),
)
def test_any_order_and_duplication_reassembles_exactly(
    data: bytes, isn: int, seed: int, dup: float
) -> None:
    rnd = random.Random(seed)
    pieces = []
    i = 0
    while i < len(data):
        n = rnd.randint(1, 200)
        pieces.append(seg(isn + 1 + i, data[i : i + n]))
        i += n
    pieces += [p for p in pieces if rnd.random() < dup]
    rnd.shuffle(pieces)
    events = run(handshake(isn) + pieces)
    assert stream(events) == (data, [])
    assert codes(events) == []


def test_past_the_bound_the_least_recently_active_connection_is_evicted(monkeypatch) -> None:
    """Fuzzing finding 4: the table is bounded, an eviction costs constant time, takes the
    connection whose latest packet is the oldest in capture order (timestamps of merged
    captures may run backwards), and is reported, then closed as `evicted`."""
    from dissector.flow import tcp

    monkeypatch.setattr(tcp, "MAX_OPEN_FLOWS", 3)
    clients = [("10.0.0.1", 40001 + i) for i in range(5)]
    segs = [seg(1000, b"x", frm=c) for c in clients[:3]]  # connections 1, 2, 3 open
    late = seg(1001, b"y", frm=clients[0])  # 1 is active again, stamped before the others
    segs.append(late._replace(ts=1))
    segs += [seg(1000, b"x", frm=c) for c in clients[3:]]  # 4 evicts 2, 5 evicts 3
    r = Reassembler(broker_ports={6650})
    events: list[object] = []
    for s in segs:
        events.extend(r.feed(s))
    evicted = [e.conn_id for e in events if isinstance(e, Anomaly) and e.code == "tcp.flow_evicted"]
    closed = [(e.conn_id, e.reason) for e in events if isinstance(e, ConnClosed)]
    assert evicted == [2, 3]
    assert closed == [(2, CloseReason.EVICTED), (3, CloseReason.EVICTED)]
    assert sorted(r._conns) == [1, 4, 5]


def test_the_retransmission_window_shrinks_as_connections_open(monkeypatch) -> None:
    """With a 64 KiB budget for all directions, one open connection (two directions) keeps
    its last 32 KiB per direction for comparing retransmissions; once 16 are open (32
    directions, 2 KiB each) each keeps the minimum, 4 KiB. A
    differing retransmission is reported only within what is kept (offsets by hand)."""
    monkeypatch.setattr(reassembly, "RETRANSMIT_BUDGET", 64 << 10)
    r = Reassembler(broker_ports={6650})
    events: list[object] = []
    for s in handshake():
        events.extend(r.feed(s))
    for k in range(200):  # 200,000 bytes at offsets 0..199,999
        events.extend(r.feed(seg(1001 + k * 1000, bytes([k % 251]) * 1000)))
    (conn,) = r._conns.values()
    half = conn.halves[C2B]
    assert 32 << 10 <= half.recent_bytes <= (32 << 10) + 1000
    # a changed copy of bytes 180,000.. (within the last 32 KiB) is reported
    events.extend(r.feed(seg(1001 + 180_000, b"\xff" * 1000)))
    assert codes(events).count("tcp.retransmission_mismatch") == 1
    for i in range(15):  # 15 more connections: 32 directions share 64 KiB -> 4 KiB each
        events.extend(r.feed(seg(7000, flags=SYN, frm=("10.0.0.9", 41000 + i))))
    events.extend(r.feed(seg(1001 + 200_000, b"z" * 1000)))  # the next delivery trims
    assert half.recent_bytes <= (4 << 10) + 1000
    events.extend(r.feed(seg(1001 + 180_000, b"\xff" * 1000)))  # no longer kept: dropped
    assert codes(events).count("tcp.retransmission_mismatch") == 1
    events.extend(r.feed(seg(1001 + 200_500, b"\x00" * 500)))  # kept: reported
    assert codes(events).count("tcp.retransmission_mismatch") == 2
