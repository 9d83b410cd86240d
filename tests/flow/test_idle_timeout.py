"""Idle timeout of the flow table (Reassembler(idle_timeout=...), as Zeek's inactivity timeout).

- A connection without a packet for longer than the timeout is closed with `timeout` at its
  own last packet (time and number) when a later packet of the capture, or `expire(now)`,
  shows the time has passed; active connections are untouched.
- Its next packet starts a new connection (a new conn_id, mid-stream), not late data.
- Without a timeout nothing expires, whatever the gap.
- The clock is the latest time seen (fuzzing finding F13, issue 31): a timestamp behind it
  does not move it back, and a connection is idle from the clock at its latest packet, so a
  step back neither ends a connection nor keeps one, whatever order the table holds them in.
- Every packet of the capture is the clock, whichever worker dissects its connection: `-j 2`
  gives the tables of `-j 1`. The reproducers (tests/flow/data: one file whose time steps
  back by a minute and by 11 days, and two files read with --no-merge) and generated
  variants, whose expected conversations are worked out by hand from their schedules.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from dissector.events import CloseReason, ConnClosed, ConnOpened, Conversation, RawPacket, Segment
from dissector.flow.tcp import Reassembler
from dissector.pipeline import Pipeline
from dissector.read import ReaderOptions
from dissector.read.parallel import stream_tables_parallel
from dissector.tables.schema import TABLES
from tests.support import timed

S = 1_000_000  # µs
BROKER = ("10.0.0.100", 6650)


def seg(n: int, ts: int, client: int, seq: int, payload: bytes = b"x", to_broker: bool = True):
    cli = (f"10.0.0.{client}", 40000 + client)
    src, dst = (cli, BROKER) if to_broker else (BROKER, cli)
    return Segment(n, ts, src[0], dst[0], src[1], dst[1], seq, 0, 0x18, 65535, payload)


def kinds(events: list[Any]) -> list[Any]:
    return [
        (type(e).__name__, e.conn_id, getattr(e, "reason", None), getattr(e, "packet", None))
        for e in events
        if isinstance(e, ConnOpened | ConnClosed)
    ]


def test_an_idle_connection_times_out_at_its_last_packet_and_comes_back_new() -> None:
    tcp = Reassembler(idle_timeout=30 * S)
    events = []
    events += tcp.feed(seg(1, 0, client=1, seq=100))  # conn 1
    events += tcp.feed(seg(2, 1 * S, client=2, seq=500))  # conn 2
    events += tcp.feed(seg(3, 20 * S, client=2, seq=501))  # conn 2 active at 20 s
    assert kinds(events) == [("ConnOpened", 1, None, 1), ("ConnOpened", 2, None, 2)]
    late = tcp.feed(seg(4, 31 * S, client=2, seq=502))  # 31 s: conn 1 idle since 0 s
    closed = [e for e in late if isinstance(e, ConnClosed)]
    assert [(e.conn_id, e.reason, e.ts, e.packet) for e in closed] == [
        (1, CloseReason.TIMEOUT, 0, 1)
    ]
    back = tcp.feed(seg(5, 32 * S, client=1, seq=101))  # conn 1's endpoints again
    assert kinds(back)[0] == ("ConnOpened", 3, None, 5)
    assert any(getattr(e, "code", "") == "tcp.midstream_start" for e in back)
    # the clock alone (no packet) ends the others
    ended = tcp.expire(100 * S)
    assert sorted((e.conn_id, e.reason) for e in ended if isinstance(e, ConnClosed)) == [
        (2, CloseReason.TIMEOUT),
        (3, CloseReason.TIMEOUT),
    ]
    assert tcp.expire(200 * S) == []


def test_without_a_timeout_nothing_expires() -> None:
    tcp = Reassembler()
    tcp.feed(seg(1, 0, client=1, seq=100))
    later = tcp.feed(seg(2, 10_000 * S, client=1, seq=101))
    assert kinds(later) == []
    assert tcp.expire(10**12) == []


# --------------------------------------------------------------------------- the clock (F13)

DATA = Path(__file__).parent / "data"
T0 = 1_700_000_000_000_000
MS = 1_000


def test_a_clock_step_back_neither_ends_nor_keeps_a_connection() -> None:
    """1 s timeout. Conn 1 at 10 s, then at 9 s (a step back): the clock stays at 10 s and
    conn 1 was active then, so conn 2 opening at 10.0005 s ends nothing (the packet's own
    time would make conn 1 idle since 9 s). Conn 2 at 10.9 s; conn 3 opening at 11.05 s
    ends conn 1 (idle since the clock read 10 s), not conn 2 (10.9 s)."""
    tcp = Reassembler(idle_timeout=1 * S)
    events = []
    events += tcp.feed(seg(1, 10 * S, client=1, seq=100))
    events += tcp.feed(seg(2, 9 * S, client=1, seq=101))
    events += tcp.feed(seg(3, 10 * S + 500, client=2, seq=500))
    events += tcp.feed(seg(4, 10 * S + 900 * MS, client=2, seq=501))
    assert [e for e in events if isinstance(e, ConnClosed)] == []
    assert tcp.clock == 10 * S + 900 * MS
    ended = tcp.feed(seg(5, 11 * S + 50 * MS, client=3, seq=900))
    closed = [(e.conn_id, e.reason, e.ts, e.packet) for e in ended if isinstance(e, ConnClosed)]
    assert closed == [(1, CloseReason.TIMEOUT, 9 * S, 2)]  # at its own last packet
    assert tcp.expire(5 * S) == []  # behind the clock: nothing moves


def model(schedule: list[tuple[int, int]], timeout: int) -> list[tuple[int, int, int, str]]:
    """The documented rule, by hand: (client, first packet, last packet, how it ended) of
    each connection, for packets (client, time) numbered from 1."""
    clock = -(1 << 62)
    live: dict[int, list[int]] = {}  # client -> [first packet, last packet, clock then]
    out = []
    for number, (client, ts) in enumerate(schedule, start=1):
        clock = max(clock, ts)
        for c, (first, last, active) in list(live.items()):
            if clock - active > timeout:
                out.append((c, first, last, "timeout"))
                del live[c]
        first = live[client][0] if client in live else number
        live[client] = [first, number, clock]
    out += [(c, first, last, "capture_end") for c, (first, last, _) in live.items()]
    return sorted(out)


def test_expiry_follows_the_clock_whatever_the_order_of_the_table() -> None:
    """Random times (steps back of up to 5 ms, jumps ahead of 2 ms) for 6 clients, against
    the rule worked out by `model`."""
    rng = random.Random(13)
    for _ in range(40):
        schedule, ts = [], T0
        for _ in range(200):
            ts += rng.choice([0, 50, 100, 300, -5 * MS, 2 * MS])
            schedule.append((rng.randint(1, 6), ts))
        tcp = Reassembler(idle_timeout=1 * MS)
        events: list[Any] = []
        seqs: dict[int, int] = defaultdict(lambda: 100)
        for number, (client, ts) in enumerate(schedule, start=1):
            events += tcp.feed(seg(number, ts, client=client, seq=seqs[client]))
            seqs[client] += 1
        events += tcp.close()
        opened = {e.conn_id: e for e in events if isinstance(e, ConnOpened)}
        got = sorted(
            (opened[e.conn_id].key.client_port - 40000, opened[e.conn_id].packet, e.packet,
             e.reason.value)
            for e in events
            if isinstance(e, ConnClosed)
        )  # fmt: skip
        assert got == model(schedule, 1 * MS)


def packets(records: list[timed.Record]) -> list[RawPacket]:
    return [RawPacket(n, ts, 1, frame, len(frame)) for n, (ts, frame) in enumerate(records, 1)]


def conversations(pipe: Pipeline, pkts: list[RawPacket]) -> list[tuple[int, int, int, str]]:
    events = [e for p in pkts for e in pipe.feed(p)] + pipe.close()
    return sorted(
        (e.key.client_port, e.first_packet, e.last_packet, e.ended.value)
        for e in events
        if isinstance(e, Conversation)
    )


def steps_back() -> list[timed.Record]:
    """Four connections, one of them (client 3) stamped 100 s in the past; 1 s timeout.
    By hand (clock in s after T0): client 2 (active at 0.1) ends when client 4 opens at
    1.2; client 3 (active at 0.5, when the clock read client 1's PING) ends at client 4's
    PING at 1.7, and its PING after that is a new connection; client 1 closes with FIN at
    2.0; clients 4 and 3 (again) are active at 1.7 when the capture ends at 2.0."""
    records: list[timed.Record] = []
    back = 100 * S
    c1 = timed.Conn(records, 1).open(T0)
    c2 = timed.Conn(records, 2).open(T0 + 100 * MS)
    c3 = timed.Conn(records, 3).open(T0 + 200 * MS - back)
    c1.ping(T0 + 500 * MS)
    c3.ping(T0 + 600 * MS - back)
    c4 = timed.Conn(records, 4).open(T0 + 1200 * MS)
    c1.ping(T0 + 1450 * MS)
    c4.ping(T0 + 1700 * MS)
    c3.ping(T0 + 1800 * MS - back)
    c1.close(T0 + 2000 * MS)
    assert c2.port == 40002
    return records


STEPS_BACK_ENDED = [
    (40001, "fin"),
    (40002, "timeout"),
    (40003, "capture_end"),
    (40003, "timeout"),
    (40004, "capture_end"),
]


def test_each_shard_ends_connections_as_one_pipeline_does() -> None:
    pkts = packets(steps_back())
    one = conversations(Pipeline(idle_timeout=1 * S), pkts)
    assert sorted((port, how) for port, _, _, how in one) == STEPS_BACK_ENDED
    shards = [conversations(Pipeline(idle_timeout=1 * S, shard=(k, 2)), pkts) for k in (0, 1)]
    assert all(shards)  # both have connections
    assert sorted(shards[0] + shards[1]) == one


NAMES = list(TABLES)


def read(paths: list[Path], jobs: int, **options: Any) -> dict[str, list[str]]:
    """Every table of a read with `jobs` processes, rows as JSON sorted by conn_id."""
    got: dict[str, list[pa.RecordBatch]] = defaultdict(list)
    opts = ReaderOptions(**options)
    stream_tables_parallel(
        [str(p) for p in paths], opts, NAMES, lambda n, b: got[n].append(b), jobs
    )
    out = {}
    for name in NAMES:
        rows = pa.Table.from_batches(got[name], schema=TABLES[name].schema).to_pylist()
        out[name] = sorted(
            (json.dumps(r, sort_keys=True, default=str) for r in rows),
            key=lambda r: (json.loads(r)["conn_id"], r),
        )
    return out


def ended(tables: dict[str, list[str]]) -> list[tuple[int, str]]:
    rows = [json.loads(r) for r in tables["conversations"]]
    return sorted((r["client_port"], r["ended"]) for r in rows)


def test_two_workers_give_the_tables_of_one_on_the_reproducers() -> None:
    """One file whose time steps back by 60 s and by 11 days after packet 11: the clock
    stays at packet 11's time, 676 µs after the lone packet of port 46935, so with a 1 ms
    timeout nothing ends: port 47001 ends with its FIN, port 46935 at the capture's end."""
    backwards = [DATA / "j2_idle_timeout_backwards.pcap"]
    one = read(backwards, 1, idle_timeout=0.001)
    assert ended(one) == [(46935, "capture_end"), (47001, "fin")]
    assert read(backwards, 2, idle_timeout=0.001) == one
    # two files one after the other: 127.0.0.254's lone packet (packet 21 of the first)
    # is followed by 300 ms of others: it ends by the timeout
    ends = [DATA / "j2_idle_end_a.pcap", DATA / "j2_idle_end_b.pcap"]
    one = read(ends, 1, idle_timeout=0.001, merge=False)
    rows = [json.loads(r) for r in one["conversations"]]
    assert [r["ended"] for r in rows if r["client_ip"] == "127.0.0.254"] == ["timeout"]
    assert read(ends, 2, idle_timeout=0.001, merge=False) == one


def test_two_workers_give_the_tables_of_one_on_generated_captures(tmp_path: Path) -> None:
    path = timed.write(tmp_path / "back.pcap", steps_back())
    one = read([path], 1, idle_timeout=1.0)
    assert ended(one) == STEPS_BACK_ENDED
    assert read([path], 2, idle_timeout=1.0) == one
    # two files with --no-merge, each its own clock. First: client 1 (active at 0.5 s)
    # ends when client 2 opens at 2 s; client 2 at that file's end. Second: 5 and 6 open.
    first: list[timed.Record] = []
    timed.Conn(first, 1).open(T0).ping(T0 + 500 * MS)
    timed.Conn(first, 2).open(T0 + 2 * S).ping(T0 + 2100 * MS)
    second: list[timed.Record] = []
    c5 = timed.Conn(second, 5).open(T0 + 10 * S)
    timed.Conn(second, 6).open(T0 + 10100 * MS)
    c5.ping(T0 + 10500 * MS)
    paths = [timed.write(tmp_path / "a.pcap", first), timed.write(tmp_path / "b.pcap", second)]
    one = read(paths, 1, idle_timeout=1.0, merge=False)
    assert ended(one) == [
        (40001, "timeout"),
        (40002, "capture_end"),
        (40005, "capture_end"),
        (40006, "capture_end"),
    ]
    assert read(paths, 2, idle_timeout=1.0, merge=False) == one
