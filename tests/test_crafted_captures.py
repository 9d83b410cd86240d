"""Behaviour on crafted captures: one test per edge case of links, TCP, preambles and ports.

Every capture is built by tests/support/crafted.py from encoded frames; every expected value
comes from what was put in (frames, cut sizes, packet positions), never from the dissector.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from crc32c import crc32c
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
from scapy.packet import Raw

from dissector.pulsar.wire import MessageMetadata
from dissector.read import Capture, ReaderOptions, read_capture, read_tables
from tests.support.crafted import (
    B2C,
    C2B,
    FRAME_COLUMNS,
    T0_US,
    TLS_CLIENT_HELLO,
    Conn,
    Item,
    Msg,
    Placed,
    Seg,
    Session,
    baseline_msgs,
    baseline_session,
    chunks,
    expected_rows,
    msg,
    proxy_v1,
    proxy_v2,
    stream_of,
    ts_of,
    wire_counts,
    write_pcap,
    write_pcapng,
)

# --------------------------------------------------------------------------- helpers


def rows(table: pa.Table, columns: tuple[str, ...] = FRAME_COLUMNS) -> list[dict[str, Any]]:
    """The table's rows restricted to `columns`, as plain Python values (None for null)."""
    out: list[dict[str, Any]] = table.select(list(columns)).to_pylist()
    return out


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def us(value: dt.datetime) -> int:
    """A table timestamp as integer microseconds since the epoch (no float rounding)."""
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def frames_of(cap: Capture, columns: tuple[str, ...] = FRAME_COLUMNS) -> list[dict[str, Any]]:
    return rows(cap.arrow["frames"], columns)


def anomalies_of(cap: Capture) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cap.arrow["anomalies"].to_pylist()
    return out


def codes(cap: Capture) -> list[str]:
    return [a["code"] for a in anomalies_of(cap)]


def conversations_of(cap: Capture) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = cap.arrow["conversations"].to_pylist()
    return out


def only_conversation(cap: Capture) -> dict[str, Any]:
    convs = conversations_of(cap)
    assert len(convs) == 1, convs
    return convs[0]


def assert_accounted(conv: dict[str, Any]) -> None:
    """frame + skipped + gap (+ preamble, client side) bytes add up to each stream."""
    for d, preamble in (("c2b", conv["preamble_bytes"]), ("b2c", 0)):
        total = (
            conv[f"frame_bytes_{d}"]
            + conv[f"skipped_bytes_{d}"]
            + conv[f"gap_bytes_{d}"]
            + preamble
        )
        assert total == conv[f"stream_bytes_{d}"], (d, conv)


def placed_in(placed: list[Placed], direction: Any) -> list[Placed]:
    return [p for p in placed if p.msg.direction is direction]


def sizes(msgs: list[Msg]) -> int:
    return sum(len(m.data) for m in msgs)


def seg_index(items: Sequence[Item], seg: Seg) -> int:
    """1-based packet number of `seg` in `items` (by identity)."""
    return next(i for i, item in enumerate(items, start=1) if item is seg)


def closing_packet(items: Sequence[Item], conn: Conn) -> int:
    """Number of the packet whose FIN completes the close (the second FIN)."""
    fins = [
        i
        for i, it in enumerate(items, start=1)
        if isinstance(it, Seg) and it.conn == conn and "F" in it.flags
    ]
    return fins[1]


# --------------------------------------------------------------------------- baseline


def test_baseline_frames_and_conversation(tmp_path: Path) -> None:
    s = baseline_session()
    path = write_pcap(tmp_path / "base.pcap", s.segs).path
    cap = read_capture(path)

    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    frames = cap.arrow["frames"].to_pylist()
    for f in frames:
        assert f["conn_id"] == 1
        assert (f["client_ip"], f["client_port"]) == ("10.0.0.1", 40000)
        assert (f["broker_ip"], f["broker_port"]) == ("10.0.0.2", 6650)
        assert us(f["ts"]) == ts_of(f["last_packet"])
    ack = next(f for f in frames if f["command"] == "ACK")
    assert ack["num_messages"] == 1
    assert anomalies_of(cap) == []

    conv = only_conversation(cap)
    c2b, b2c = ([m for m in baseline_msgs() if m.direction is d] for d in (C2B, B2C))
    end = closing_packet(s.segs, s.conn)
    # The row is written when the second FIN closes the connection: the packets up to it.
    counts = wire_counts(s.segs[:end], s.conn)
    expected = {
        "conn_id": 1,
        "client_ip": "10.0.0.1",
        "client_port": 40000,
        "broker_ip": "10.0.0.2",
        "broker_port": 6650,
        "ended": "fin",
        "syn_seen": True,
        "encrypted": False,
        "proxied_client_ip": None,
        "proxied_client_port": None,
        "first_packet": 1,
        "last_packet": end,
        "frames_c2b": len(c2b),
        "frames_b2c": len(b2c),
        "frame_bytes_c2b": sizes(c2b),
        "frame_bytes_b2c": sizes(b2c),
        "stream_bytes_c2b": sizes(c2b),
        "stream_bytes_b2c": sizes(b2c),
        "skipped_bytes_c2b": 0,
        "skipped_bytes_b2c": 0,
        "gap_bytes_c2b": 0,
        "gap_bytes_b2c": 0,
        "preamble_bytes": 0,
        "duration_us": ts_of(end) - T0_US,
        "capture": str(path),
        **counts,
    }
    assert {k: conv[k] for k in expected} == expected
    assert counts["bytes_c2b"] == sizes(c2b) and counts["bytes_b2c"] == sizes(b2c)
    assert_accounted(conv)

    df = cap.conversations  # the DataFrame view agrees
    assert list(df["conn_id"]) == [1] and list(df["ended"]) == ["fin"]


# --------------------------------------------------------------------------- segmentation


@pytest.mark.parametrize(
    ("client_cut", "broker_cut"),
    [
        ({"each": 1}, {"each": 7}),
        ({"sizes": [3, 1, 50, 2, 9, 100, 1, 1, 4]}, {"sizes": [8, 8, 1, 30]}),
    ],
    ids=["one-byte", "irregular"],
)
def test_frames_split_across_segments(
    tmp_path: Path, client_cut: dict[str, Any], broker_cut: dict[str, Any]
) -> None:
    msgs = baseline_msgs()
    s = Session()
    s.handshake()
    s.frames([m for m in msgs if m.direction is C2B], **client_cut)
    s.frames([m for m in msgs if m.direction is B2C], **broker_cut)
    s.close()
    cap = read_capture(write_pcap(tmp_path / "split.pcap", s.segs).path)
    assert sorted(frames_of(cap), key=_order) == sorted(expected_rows(s.placed, s.segs), key=_order)
    assert anomalies_of(cap) == []
    assert_accounted(only_conversation(cap))


def _order(row: dict[str, Any]) -> tuple[str, int]:
    return row["direction"], row["stream_offset"]


def test_many_frames_in_one_segment(tmp_path: Path) -> None:
    msgs = baseline_msgs()
    s = Session()
    s.handshake()
    client = [m for m in msgs if m.direction is C2B]
    broker = [m for m in msgs if m.direction is B2C]
    one = s.frames(client, sizes=[sizes(client)])
    s.frames(broker, sizes=[sizes(broker)])
    s.close()
    assert len(one) == 1
    cap = read_capture(write_pcap(tmp_path / "batch.pcap", s.segs).path)
    got = frames_of(cap)
    assert sorted(got, key=_order) == sorted(expected_rows(s.placed, s.segs), key=_order)
    n = seg_index(s.segs, one[0])
    assert {(r["first_packet"], r["last_packet"]) for r in got if r["direction"] == C2B.value} == {
        (n, n)
    }


# --------------------------------------------------------------------------- TCP oddities


def _client_stream_session(each: int) -> tuple[Session, list[Seg]]:
    """Handshake, the client's frames in `each`-byte segments (returned), nothing else."""
    s = Session()
    s.handshake()
    segs = s.frames([m for m in baseline_msgs() if m.direction is C2B], each=each)
    return s, segs


def test_reordered_segments(tmp_path: Path) -> None:
    s, segs = _client_stream_session(each=20)
    items: list[Item] = list(s.segs[:3])
    for i in range(0, len(segs) - 1, 2):  # every pair swapped
        items += [segs[i + 1], segs[i]]
    if len(segs) % 2:
        items.append(segs[-1])
    s.ack(B2C)
    items += s.segs[-1:]
    cap = read_capture(write_pcap(tmp_path / "reorder.pcap", items).path)
    assert frames_of(cap) == expected_rows(s.placed, items)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert conv["gap_bytes_c2b"] == 0 and conv["ended"] == "capture_end"
    assert_accounted(conv)


def test_reordered_frame_ts_is_when_it_completed(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    send = msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=b"x" * 100)
    first, middle, last = s.frames([send], sizes=[40, 40])
    items: list[Item] = [*s.segs[:3], first, last, middle]  # the last piece comes early
    cap = read_capture(write_pcap(tmp_path / "late.pcap", items).path)
    (row,) = cap.arrow["frames"].to_pylist()
    completed = seg_index(items, middle)  # the frame is whole only once `middle` arrives
    assert us(row["ts"]) == ts_of(completed)


def test_identical_retransmissions_are_silent(tmp_path: Path) -> None:
    s, segs = _client_stream_session(each=25)
    items: list[Item] = list(s.segs[:3])
    for seg in segs:  # every segment sent twice
        items += [seg, seg]
    cap = read_capture(write_pcap(tmp_path / "dup.pcap", items).path)
    assert frames_of(cap) == expected_rows(s.placed, items)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert conv["bytes_c2b"] == 2 * sizes([p.msg for p in s.placed])  # both copies on the wire
    assert conv["stream_bytes_c2b"] == sizes([p.msg for p in s.placed])
    assert_accounted(conv)


def test_retransmission_with_different_bytes_first_copy_wins(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    connect, send = (
        msg(C2B, "CONNECT", client_version="c"),
        msg(C2B, "SEND", producer_id=1, sequence_id=5, payload=b"original payload"),
    )
    s.frames([connect])
    (send_seg,) = s.frames([send])
    forged = bytes(send.data[:-7]) + b"FORGED!"
    resent = s.send(C2B, forged, at=send_seg.offset)
    s.frames([msg(C2B, "PING")])
    cap = read_capture(write_pcap(tmp_path / "mismatch.pcap", s.segs).path)

    assert frames_of(cap) == expected_rows(s.placed, s.segs)  # SEND checksum still valid
    (bad,) = anomalies_of(cap)
    assert bad["code"] == "tcp.retransmission_mismatch"
    assert (bad["conn_id"], bad["direction"]) == (1, C2B.value)
    assert bad["stream_offset"] == send_seg.offset
    assert bad["packet"] == seg_index(s.segs, resent)


@pytest.mark.parametrize("late_first", [False, True], ids=["in-order", "overlap-ahead"])
def test_overlapping_segments(tmp_path: Path, late_first: bool) -> None:
    s = Session()
    s.handshake()
    client = [m for m in baseline_msgs() if m.direction is C2B]
    data = stream_of(client)
    at = s.sent[C2B]
    for m in client:
        s.placed.append(Placed(m, at))
        at += len(m.data)
    a = s.send(C2B, data[0:60], at=0)
    b = s.send(C2B, data[40:130], at=40)
    c = s.send(C2B, data[100:], at=100)
    items: list[Item] = [*s.segs[:3], *([b, a, c] if late_first else [a, b, c])]
    cap = read_capture(write_pcap(tmp_path / "overlap.pcap", items).path)
    columns = tuple(c for c in FRAME_COLUMNS if not c.endswith("_packet"))
    assert frames_of(cap, columns) == [{k: r[k] for k in columns} for r in expected_rows(s.placed)]
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert conv["stream_bytes_c2b"] == len(data) and conv["bytes_c2b"] == 60 + 90 + len(data) - 100
    assert_accounted(conv)


def test_sequence_wraparound(tmp_path: Path) -> None:
    conn = Conn(client_isn=2**32 - 100, broker_isn=2**32 - 40)
    s = baseline_session(conn)
    crossing = [seg for seg in s.segs if seg.payload and seg.seq + len(seg.payload) > 2**32]
    assert crossing or any(seg.seq < 1000 for seg in s.segs[3:])  # the streams do wrap
    cap = read_capture(write_pcap(tmp_path / "wrap.pcap", s.segs).path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert conv["ended"] == "fin" and conv["gap_bytes_c2b"] == conv["gap_bytes_b2c"] == 0
    assert_accounted(conv)


def _fin(s: Session, direction: Any, *, data: bytes = b"", flags: str = "FA") -> Seg:
    """A FIN going `direction` (carrying `data` if given), built by hand."""
    seg = Seg(
        s.conn,
        direction,
        s.seq_at(direction, s.sent[direction]),
        s.ack_for(direction),
        flags,
        data,
        s.sent[direction],
    )
    s.sent[direction] += len(data)
    s.fin[direction] = 1
    return seg


@pytest.mark.parametrize("ending", ["rst", "fin-with-data", "fin-before-last-data"])
def test_connection_endings(tmp_path: Path, ending: str) -> None:
    s = Session()
    s.handshake()
    msgs = baseline_msgs()
    s.exchange(msgs[:-1])
    pong = msgs[-1]
    if ending == "rst":
        s.exchange([pong])
        items: list[Item] = [*s.segs, _fin(s, B2C, flags="RA")]
    elif ending == "fin-with-data":
        s.placed.append(Placed(pong, s.sent[C2B]))
        items = [*s.segs, _fin(s, C2B, data=pong.data, flags="FPA"), _fin(s, B2C)]
    else:  # the FIN overtakes the last data segment in the capture
        (last,) = s.frames([pong])
        fin = _fin(s, C2B)
        items = [*s.segs[:-1], fin, last, _fin(s, B2C)]
    cap = read_capture(write_pcap(tmp_path / f"{ending}.pcap", items).path)
    assert frames_of(cap) == expected_rows(s.placed, items)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert conv["ended"] == ("rst" if ending == "rst" else "fin")
    assert conv["last_packet"] == len(items)
    assert us(conv["end_ts"]) == ts_of(len(items))
    assert_accounted(conv)


def test_keepalive_probe_with_a_garbage_byte_is_ignored(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    msgs = baseline_msgs()
    s.exchange(msgs[:4])
    at = s.sent[C2B] - 1  # one byte below the next sequence number, as Linux probes
    probe = Seg(s.conn, C2B, s.seq_at(C2B, at), s.ack_for(C2B), "A", b"\x00", at)
    s.segs.append(probe)
    s.exchange(msgs[4:])
    s.close()
    cap = read_capture(write_pcap(tmp_path / "keepalive.pcap", s.segs).path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert conv["bytes_c2b"] == conv["stream_bytes_c2b"] + 1  # the probe byte is on the wire
    assert_accounted(conv)


def test_unacknowledged_hole_becomes_a_gap_at_capture_end(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    s.exchange(baseline_msgs()[:1])
    send = msg(C2B, "SEND", producer_id=1, sequence_id=1, payload=b"y" * 300)
    _, lost, _ = s.frames([send], sizes=[100, 100])
    s.frames([msg(C2B, "PONG")])  # buffered behind the hole; nobody acknowledges it
    items: list[Item] = [seg for seg in s.segs if seg is not lost]
    cap = read_capture(write_pcap(tmp_path / "hole.pcap", items).path)
    gaps = [a for a in anomalies_of(cap) if a["code"] == "tcp.gap"]
    assert [(g["stream_offset"], g["length"]) for g in gaps] == [(lost.offset, 100)]
    columns = ("command", "stream_offset", "complete", "checksum")
    assert frames_of(cap, columns) == [
        {
            "command": p.msg.name,
            "stream_offset": p.offset,
            "complete": p.msg is not send,
            "checksum": "unknown" if p.msg is send else None,
        }
        for p in s.placed
    ]
    conv = only_conversation(cap)
    assert conv["ended"] == "capture_end" and conv["gap_bytes_c2b"] == 100
    assert_accounted(conv)


def _two_connections(ending: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Item], int]:
    """Connection 1 (no FIN) then connection 2; how the first one ends depends on `ending`.

    Returns the packets and the number of connection 1's last packet."""
    one = Session()
    one.handshake()
    one.exchange(baseline_msgs()[:4])
    if ending == "capture_end":
        return list(one.segs), len(one.segs)
    if ending == "port_reuse":
        two = baseline_session(Conn(client_isn=3_000_000_000, broker_isn=77))
    else:  # evicted: room for one open connection only
        from dissector.flow import tcp

        monkeypatch.setattr(tcp, "MAX_OPEN_FLOWS", 1)
        two = baseline_session(Conn(client_port=40001))
    return [*one.segs, *two.segs], len(one.segs)


@pytest.mark.parametrize("ending", ["capture_end", "port_reuse", "evicted"])
def test_connection_closed_without_fin(
    tmp_path: Path, ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, _ = _two_connections(ending, monkeypatch)
    cap = read_capture(write_pcap(tmp_path / f"{ending}.pcap", items).path)
    first = conversations_of(cap)[0]
    assert (first["conn_id"], first["ended"]) == (1, ending)
    assert first["frames_c2b"] == first["frames_b2c"] == 2
    evicted = [a for a in anomalies_of(cap) if a["code"] == "tcp.flow_evicted"]
    assert [a["conn_id"] for a in evicted] == ([1] if ending == "evicted" else [])


@pytest.mark.parametrize("ending", ["capture_end", "port_reuse", "evicted"])
def test_conversation_last_packet_is_its_own(
    tmp_path: Path, ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    items, last = _two_connections(ending, monkeypatch)
    cap = read_capture(write_pcap(tmp_path / f"{ending}.pcap", items).path)
    first = conversations_of(cap)[0]
    assert (first["last_packet"], us(first["end_ts"])) == (last, ts_of(last))


# --------------------------------------------------------------------------- loss


def test_lost_segment_inside_a_frame(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    meta = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    send = msg(
        C2B, "SEND", producer_id=1, sequence_id=1, payload=bytes(range(256)) * 12, metadata=meta
    )
    s.frames([msg(C2B, "CONNECT", client_version="c")])
    _, lost, _ = s.frames([send], sizes=[1000, 1000])
    s.ack(B2C)  # the broker acknowledges past the lost bytes: they were sent
    after = [msg(C2B, "PING"), msg(C2B, "FLOW", consumer_id=3, messagePermits=10)]
    s.exchange(after)
    items: list[Item] = [seg for seg in s.segs if seg is not lost]
    cap = read_capture(write_pcap(tmp_path / "loss.pcap", items).path)

    expected = expected_rows(s.placed)
    got = frames_of(cap, tuple(c for c in FRAME_COLUMNS if not c.endswith("_packet")))
    cut_row = {**expected[1], "complete": False, "checksum": "unknown", "payload_size": None}
    assert got == [expected[0], cut_row, expected[2], expected[3]]

    gaps = [a for a in anomalies_of(cap) if a["code"] == "tcp.gap"]
    assert [(g["direction"], g["stream_offset"], g["length"]) for g in gaps] == [
        (C2B.value, lost.offset, len(lost.payload))
    ]
    assert "pulsar.truncated_frame" in codes(cap)
    assert set(codes(cap)) == {"tcp.gap", "pulsar.truncated_frame"}
    conv = only_conversation(cap)
    assert conv["gap_bytes_c2b"] == len(lost.payload) == 1000
    assert conv["skipped_bytes_c2b"] == 0
    assert conv["frames_c2b"] == 4
    assert_accounted(conv)


def test_lost_segment_across_a_frame_boundary_resyncs(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    a = msg(C2B, "SEND", producer_id=1, sequence_id=1, payload=b"\xab" * 600)
    b = msg(C2B, "SEND", producer_id=1, sequence_id=2, payload=b"\xcd" * 600)
    c, d = msg(C2B, "PONG"), msg(C2B, "FLOW", consumer_id=1, messagePermits=5)
    b_head = 300
    _, lost, rest = s.frames([a, b, c, d], sizes=[400, len(a.data) - 400 + b_head])
    s.ack(B2C)
    items: list[Item] = [seg for seg in s.segs if seg is not lost]
    cap = read_capture(write_pcap(tmp_path / "boundary.pcap", items).path)

    columns = tuple(c for c in FRAME_COLUMNS if not c.endswith("_packet"))
    pa_, _pb, pc, pd_ = expected_rows(s.placed)
    cut_a = {**pa_, "complete": False, "checksum": "unknown", "payload_size": None}
    assert frames_of(cap, columns) == [{k: r[k] for k in columns} for r in (cut_a, pc, pd_)]

    anomalies = anomalies_of(cap)
    gap = next(x for x in anomalies if x["code"] == "tcp.gap")
    assert (gap["stream_offset"], gap["length"]) == (400, len(lost.payload))
    skipped = [x for x in anomalies if x["code"] == "pulsar.skipped_bytes"]
    b_tail = len(b.data) - b_head
    assert [(x["stream_offset"], x["length"]) for x in skipped] == [(rest.offset, b_tail)]
    conv = only_conversation(cap)
    assert conv["gap_bytes_c2b"] == len(lost.payload)
    assert conv["skipped_bytes_c2b"] == b_tail
    assert_accounted(conv)


def test_midstream_start(tmp_path: Path) -> None:
    s = Session()  # no handshake: the capture starts inside a SEND
    earlier = msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=b"p" * 100)
    tail = earlier.data[-50:]
    s.send(C2B, tail)
    client = [
        msg(C2B, "SEND", producer_id=1, sequence_id=1, payload=b"q" * 30),
        msg(C2B, "PRODUCER", topic="persistent://t/n/x", producer_id=2, request_id=9),
        msg(C2B, "PONG"),
    ]
    s.frames(client[:1])
    s.frames([msg(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=1)])
    s.frames(client[1:])
    s.frames([msg(B2C, "PRODUCER_SUCCESS", request_id=9, producer_name="x")])
    s.close()
    cap = read_capture(write_pcap(tmp_path / "mid.pcap", s.segs).path)

    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    anomalies = anomalies_of(cap)
    mid = sorted(
        (x["direction"], x["stream_offset"])
        for x in anomalies
        if x["code"] == "tcp.midstream_start"
    )
    assert mid == [(B2C.value, 0), (C2B.value, 0)]
    skipped = [x for x in anomalies if x["code"] == "pulsar.skipped_bytes"]
    assert [(x["direction"], x["stream_offset"], x["length"]) for x in skipped] == [
        (C2B.value, 0, len(tail))
    ]
    assert set(codes(cap)) == {"tcp.midstream_start", "pulsar.skipped_bytes"}
    conv = only_conversation(cap)
    assert conv["syn_seen"] is False and conv["skipped_bytes_c2b"] == len(tail)
    assert conv["ended"] == "fin"
    assert_accounted(conv)


def test_snaplen_truncation_is_an_exact_gap(tmp_path: Path) -> None:
    snaplen = 200
    headers = 14 + 20 + 20  # Ethernet, IPv4, TCP without options
    s = Session()
    s.handshake()
    s.exchange(baseline_msgs()[:4])
    big = msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=b"z" * 1000)
    (big_seg,) = s.frames([big])
    later = [msg(C2B, "PONG"), msg(C2B, "FLOW", consumer_id=1, messagePermits=2)]
    s.exchange(later)
    s.close()
    assert all(len(seg.payload) + headers <= snaplen for seg in s.segs if seg is not big_seg)
    cap = read_capture(write_pcap(tmp_path / "snap.pcap", s.segs, snaplen=snaplen).path)

    captured = snaplen - headers
    missing = len(big.data) - captured
    gaps = [a for a in anomalies_of(cap) if a["code"] == "tcp.gap"]
    assert [(g["direction"], g["stream_offset"], g["length"], g["packet"]) for g in gaps] == [
        (C2B.value, big_seg.offset + captured, missing, seg_index(s.segs, big_seg))
    ]
    expected = expected_rows(s.placed, s.segs)
    cut_big = next(r for r in expected if r["command"] == "SEND")
    cut_big.update(complete=False, checksum="unknown", payload_size=None)
    got = {(r["direction"], r["stream_offset"]): r for r in frames_of(cap)}
    assert got == {(r["direction"], r["stream_offset"]): r for r in expected}
    conv = only_conversation(cap)
    assert conv["gap_bytes_c2b"] == missing and conv["gap_bytes_b2c"] == 0
    assert conv["bytes_c2b"] == sum(len(x.payload) for x in s.segs if x.direction is C2B)
    assert_accounted(conv)


# --------------------------------------------------------------------------- connections


@pytest.mark.parametrize("first_closed", [True, False], ids=["after-fin", "without-fin"])
def test_port_reuse_gives_two_conversations(tmp_path: Path, first_closed: bool) -> None:
    one = baseline_session(Conn(), close=first_closed)
    two = baseline_session(Conn(client_isn=3_000_000_000, broker_isn=77))
    items: list[Item] = [*one.segs, *two.segs]
    cap = read_capture(write_pcap(tmp_path / "reuse.pcap", items).path)

    convs = conversations_of(cap)
    assert [c["conn_id"] for c in convs] == [1, 2]
    assert [c["ended"] for c in convs] == ["fin" if first_closed else "port_reuse", "fin"]
    assert [c["first_packet"] for c in convs] == [1, len(one.segs) + 1]
    frames = cap.arrow["frames"].to_pylist()
    for conn_id, session in ((1, one), (2, two)):
        mine = [{k: f[k] for k in FRAME_COLUMNS} for f in frames if f["conn_id"] == conn_id]
        assert mine == expected_rows(session.placed, items, session.conn)
    for conv in convs:
        assert conv["frames_c2b"] == 7 and conv["frames_b2c"] == 6
        assert_accounted(conv)
    assert anomalies_of(cap) == []


V4 = Conn()
V6 = Conn(client_ip="2001:db8::1", broker_ip="2001:db8::2")


@pytest.mark.parametrize(
    ("link", "conn"),
    [(link, V4) for link in ("ether", "vlan", "qinq", "sll", "sll2", "null", "raw")]
    + [(link, V6) for link in ("ether", "vlan", "sll", "sll2", "null", "raw")],
    ids=lambda v: v if isinstance(v, str) else ("v6" if v.ipv6 else "v4"),
)
def test_link_types_give_the_baseline_frames(tmp_path: Path, link: str, conn: Conn) -> None:
    s = baseline_session(conn)
    cap = read_capture(write_pcap(tmp_path / f"{link}.pcap", s.segs, link=link).path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert (conv["client_ip"], conv["broker_ip"]) == (conn.client_ip, conn.broker_ip)
    assert conv["ended"] == "fin"
    f = cap.arrow["frames"].to_pylist()[0]
    assert (f["client_ip"], f["broker_ip"]) == (conn.client_ip, conn.broker_ip)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_pcapng_with_several_interfaces(tmp_path: Path, gz: bool) -> None:
    s = baseline_session()
    path = write_pcapng(tmp_path / "multi.pcapng", s.segs, links=("ether", "sll2", "raw"), gz=gz)
    cap = read_capture(path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert anomalies_of(cap) == []
    assert only_conversation(cap)["ended"] == "fin"


@pytest.mark.parametrize(
    ("nano", "endianness"), [(True, "<"), (False, ">"), (True, ">")], ids=["ns", "be", "ns-be"]
)
def test_pcap_resolutions_and_byte_orders(tmp_path: Path, nano: bool, endianness: str) -> None:
    s = baseline_session()
    path = write_pcap(tmp_path / "v.pcap", s.segs, nano=nano, endianness=endianness).path
    cap = read_capture(path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert [us(f["ts"]) for f in cap.arrow["frames"].to_pylist()] == [
        ts_of(r["last_packet"]) for r in expected_rows(s.placed, s.segs)
    ]


def test_gzip_pcap(tmp_path: Path) -> None:
    s = baseline_session()
    path = write_pcap(tmp_path / "base.pcap.gz", s.segs, gz=True).path
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    cap = read_capture(path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert only_conversation(cap)["ended"] == "fin"


def test_truncated_file_keeps_what_came_before(tmp_path: Path) -> None:
    s = baseline_session()
    written = write_pcap(tmp_path / "cut.pcap", s.segs)
    pong = next(p for p in s.placed if p.msg.name == "PONG")
    damaged = next(
        i
        for i, seg in enumerate(s.segs, start=1)
        if seg.payload and seg.offset == pong.offset and seg.direction is C2B
    )
    data = written.path.read_bytes()
    written.path.write_bytes(data[: written.record_offsets[damaged - 1] + 16 + 10])
    cap = read_capture(written.path)

    kept = s.segs[: damaged - 1]
    assert frames_of(cap) == expected_rows([p for p in s.placed if p is not pong], kept)
    truncated = [a for a in anomalies_of(cap) if a["code"] == "capture.truncated"]
    assert len(truncated) == 1
    assert truncated[0]["conn_id"] == 0 and truncated[0]["packet"] == damaged - 1
    assert truncated[0]["severity"] == "error"
    assert only_conversation(cap)["ended"] == "capture_end"


# --------------------------------------------------------------------------- preambles


@pytest.mark.parametrize(
    ("header", "source", "how"),
    [
        (proxy_v1(("192.0.2.7", 51234), ("10.0.0.2", 6650)), ("192.0.2.7", 51234), "own"),
        (proxy_v1(("2001:db8::7", 443), ("2001:db8::2", 6650)), ("2001:db8::7", 443), "joined"),
        (proxy_v2(("198.51.100.9", 1234), ("10.0.0.2", 6650)), ("198.51.100.9", 1234), "joined"),
        (proxy_v2(("2001:db8::9", 65000), ("2001:db8::2", 6650)), ("2001:db8::9", 65000), "own"),
        (proxy_v1(("192.0.2.8", 2), ("10.0.0.2", 6650)), ("192.0.2.8", 2), "bytes"),
        (proxy_v2(("198.51.100.1", 3), ("10.0.0.2", 6650)), ("198.51.100.1", 3), "bytes"),
    ],
    ids=["v1-own", "v1-tcp6-joined", "v2-joined", "v2-ipv6-own", "v1-bytes", "v2-bytes"],
)
def test_proxy_protocol_header(
    tmp_path: Path, header: bytes, source: tuple[str, int], how: str
) -> None:
    """The header in its own segment, joined to CONNECT, or both in 1-byte segments."""
    s = Session()
    s.handshake()
    msgs = baseline_msgs()
    if how == "own":
        s.send(C2B, header)
        s.frames(msgs[:1])
    else:
        s.frames(msgs[:1], prefix=header, each=1 if how == "bytes" else None)
    s.exchange(msgs[1:])
    s.close()
    cap = read_capture(write_pcap(tmp_path / "proxy.pcap", s.segs).path)

    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    assert frames_of(cap)[0]["stream_offset"] == len(header)
    assert anomalies_of(cap) == []
    conv = only_conversation(cap)
    assert (conv["proxied_client_ip"], conv["proxied_client_port"]) == source
    assert conv["preamble_bytes"] == len(header)
    assert (conv["client_ip"], conv["client_port"]) == ("10.0.0.1", 40000)
    assert_accounted(conv)


@pytest.mark.parametrize(
    ("port", "each"),
    [(6651, None), (6650, None), (6650, 1)],
    ids=["tls-port", "client-hello-on-6650", "client-hello-in-1-byte-segments"],
)
def test_tls_is_reported_not_decoded(tmp_path: Path, port: int, each: int | None) -> None:
    s = Session(Conn(broker_port=port))
    s.handshake()
    s.send_pieces(C2B, chunks(TLS_CLIENT_HELLO, each or len(TLS_CLIENT_HELLO)))
    # A ServerHello choosing TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (0xC02F), no extensions.
    server_hello = bytes.fromhex("020000260303") + bytes(32) + bytes.fromhex("00c02f00")
    s.send(B2C, bytes.fromhex("160303002a") + server_hello)
    s.send(C2B, bytes.fromhex("1703030020") + b"\x5a" * 32)
    s.close()
    cap = read_capture(write_pcap(tmp_path / "tls.pcap", s.segs).path)
    assert cap.arrow["frames"].num_rows == 0
    anomalies = anomalies_of(cap)
    assert [(a["code"], a["conn_id"]) for a in anomalies] == [("pulsar.encrypted", 1)]
    conv = only_conversation(cap)
    assert conv["encrypted"] is True and conv["broker_port"] == port
    assert (conv["tls_version"], conv["tls_cipher"]) == (
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    )
    assert conv["tls_sni"] is None and conv["tls_decrypted"] is False
    assert conv["frames_c2b"] == conv["frames_b2c"] == 0


# --------------------------------------------------------------------------- ports


OTHER = Conn(broker_port=7777)


def test_other_port_recognised_by_connect(tmp_path: Path) -> None:
    s = baseline_session(OTHER)
    cap = read_capture(write_pcap(tmp_path / "7777.pcap", s.segs).path)
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    conv = only_conversation(cap)
    assert (conv["client_port"], conv["broker_port"]) == (40000, 7777)
    assert anomalies_of(cap) == []


def test_other_port_without_connect_is_ignored(tmp_path: Path) -> None:
    s = Session(OTHER)
    s.handshake()
    s.exchange(baseline_msgs()[2:])  # no CONNECT / CONNECTED
    s.close()
    cap = read_capture(write_pcap(tmp_path / "noconnect.pcap", s.segs).path)
    assert cap.arrow["frames"].num_rows == 0
    assert conversations_of(cap) == [] and anomalies_of(cap) == []


def _midstream_other_port() -> Session:
    s = Session(OTHER)
    s.send(C2B, b"\x11" * 23)  # the end of some earlier frame
    s.exchange(baseline_msgs()[2:])
    s.close()
    return s


def test_other_port_midstream_needs_ports_option(tmp_path: Path) -> None:
    s = _midstream_other_port()
    path = write_pcap(tmp_path / "mid7777.pcap", s.segs).path
    default = read_capture(path)
    assert default.arrow["frames"].num_rows == 0
    assert conversations_of(default) == [] and anomalies_of(default) == []

    cap = read_capture(path, ports=[7777])
    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    conv = only_conversation(cap)
    assert (conv["client_port"], conv["broker_port"]) == (40000, 7777)
    assert conv["skipped_bytes_c2b"] == 23
    assert {"tcp.midstream_start", "pulsar.skipped_bytes"} == set(codes(cap))
    # The same through read_tables and ReaderOptions.
    tables = read_tables(path, ReaderOptions.make([7777]))
    assert tables["frames"].num_rows == len(s.placed)


def _assert_connect_sender_is_client(cap: Capture, s: Session, items: Sequence[Item]) -> None:
    columns = tuple(c for c in FRAME_COLUMNS if not c.endswith("_packet"))
    got = frames_of(cap, columns)
    expected = [{k: r[k] for k in columns} for r in expected_rows(s.placed, items)]
    assert sorted(got, key=_order) == sorted(expected, key=_order)
    conv = only_conversation(cap)
    assert (conv["client_ip"], conv["client_port"]) == ("10.0.0.1", 40000)
    assert (conv["broker_ip"], conv["broker_port"]) == ("10.0.0.2", 7777)
    assert conv["frames_c2b"] == len(placed_in(s.placed, C2B))
    assert conv["frames_b2c"] == len(placed_in(s.placed, B2C))
    for f in cap.arrow["frames"].to_pylist():
        assert (f["client_port"], f["broker_port"]) == (40000, 7777)
    assert_accounted(conv)


def test_other_port_broker_speaks_first_without_syn(tmp_path: Path) -> None:
    """No SYN, and the first packet is the broker's (a window update): CONNECT decides."""
    s = Session(OTHER)
    s.ack(B2C)
    s.exchange(baseline_msgs())
    s.close()
    cap = read_capture(write_pcap(tmp_path / "brokerfirst.pcap", s.segs).path)
    _assert_connect_sender_is_client(cap, s, s.segs)


def test_other_port_broker_data_first_without_syn(tmp_path: Path) -> None:
    """No SYN, and the broker's first packet carries bytes (a 1-byte keep-alive probe
    taken as data): the side that sends CONNECT is still the client."""
    s = Session(OTHER)
    probe = s.send(B2C, b"\x00")
    s.exchange(baseline_msgs())
    s.close()
    cap = read_capture(write_pcap(tmp_path / "probe.pcap", s.segs).path)
    _assert_connect_sender_is_client(cap, s, s.segs)
    assert probe.offset == 0


def test_other_port_connected_captured_before_connect(tmp_path: Path) -> None:
    """Two interfaces merged with clock skew: the broker's CONNECTED precedes the CONNECT."""
    s = Session(OTHER)
    msgs = baseline_msgs()
    s.exchange(msgs)
    s.close()
    items: list[Item] = [s.segs[1], s.segs[0], *s.segs[2:]]
    cap = read_capture(write_pcap(tmp_path / "skew.pcap", items).path)
    _assert_connect_sender_is_client(cap, s, items)


# --------------------------------------------------------------------------- other traffic


def test_non_pulsar_traffic_is_ignored(tmp_path: Path) -> None:
    http = Session(Conn(client_port=50000, broker_port=8080))
    http.handshake()
    http.send(C2B, b"GET /admin/v2/clusters HTTP/1.1\r\nHost: broker\r\n\r\n")
    http.send(B2C, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]")
    http.close()
    udp: list[Item] = [
        bytes(IP(src="10.0.0.1", dst="10.0.0.53") / UDP(sport=5353, dport=53) / Raw(b"q" * 30)),
        bytes(
            IP(src="10.0.0.1", dst="10.0.0.2")
            / UDP(sport=6650, dport=6650)
            / Raw(msg(C2B, "PING").data)
        ),
        bytes(IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=1, dport=6650) / Raw(b"x")),
    ]
    items: list[Item] = [*http.segs[:4], *udp, *http.segs[4:]]
    cap = read_capture(write_pcap(tmp_path / "other.pcap", items).path)
    assert cap.arrow["frames"].num_rows == 0
    assert conversations_of(cap) == [] and anomalies_of(cap) == []


def test_ip_fragment_on_broker_port(tmp_path: Path) -> None:
    s = baseline_session()
    connect_seg = next(seg for seg in s.segs if seg.payload)
    first_fragment = connect_seg.l3(flags="MF", frag=0)
    later_fragment = bytes(IP(src="10.0.0.1", dst="10.0.0.2", proto=6, frag=100) / Raw(b"r" * 16))
    items: list[Item] = [*s.segs[:3], first_fragment, later_fragment, *s.segs[3:]]
    cap = read_capture(write_pcap(tmp_path / "frag.pcap", items).path)
    frags = [a for a in anomalies_of(cap) if a["code"] == "net.ip_fragment"]
    assert [(a["packet"], a["conn_id"]) for a in frags] == [(4, 0), (5, 0)]
    assert all("10.0.0.1" in a["detail"] for a in frags)
    assert set(codes(cap)) == {"net.ip_fragment"}
    assert cap.arrow["frames"].num_rows == len(s.placed)  # the whole copy came after


def test_ipv6_fragment_on_broker_port(tmp_path: Path) -> None:
    s = baseline_session(V6)
    connect_seg = next(seg for seg in s.segs if seg.payload)
    tcp_part = connect_seg.l3()[40:]
    fragment = bytes(
        IPv6(src=V6.client_ip, dst=V6.broker_ip)
        / IPv6ExtHdrFragment(nh=6, m=1, offset=0, id=7)
        / Raw(tcp_part[:24])
    )
    items: list[Item] = [*s.segs[:3], fragment, *s.segs[3:]]
    cap = read_capture(write_pcap(tmp_path / "frag6.pcap", items).path)
    assert [(a["code"], a["packet"]) for a in anomalies_of(cap)] == [("net.ip_fragment", 4)]
    assert frames_of(cap) == expected_rows(s.placed, items)


def test_bad_checksum(tmp_path: Path) -> None:
    s = Session()
    s.handshake()
    meta = MessageMetadata(producer_name="p", sequence_id=4, publish_time=T0_US // 1000)
    payload = b"tampered?"
    bad = msg(
        C2B,
        "SEND",
        producer_id=1,
        sequence_id=4,
        payload=payload,
        metadata=meta,
        checksum=0xDEADBEEF,
    )
    s.exchange(baseline_msgs()[:4] + [bad, msg(C2B, "PONG")])
    s.close()
    cap = read_capture(write_pcap(tmp_path / "crc.pcap", s.segs).path)

    assert frames_of(cap) == expected_rows(s.placed, s.segs)
    row = next(f for f in cap.arrow["frames"].to_pylist() if f["command"] == "SEND")
    section = meta.SerializeToString()
    assert row["checksum"] == "invalid"
    assert row["checksum_expected"] == 0xDEADBEEF
    assert row["checksum_computed"] == crc32c(struct.pack(">I", len(section)) + section + payload)
    (anomaly,) = anomalies_of(cap)
    at = next(p.offset for p in s.placed if p.msg is bad)
    assert anomaly["code"] == "pulsar.bad_checksum" and anomaly["severity"] == "error"
    assert (anomaly["conn_id"], anomaly["direction"]) == (1, C2B.value)
    assert at <= anomaly["stream_offset"] < at + len(bad.data)
