"""Idle timeout of the flow table (Reassembler(idle_timeout=...), as Zeek's inactivity timeout).

- A connection without a packet for longer than the timeout is closed with `timeout` at its
  own last packet (time and number) when a later packet of the capture, or `expire(now)`,
  shows the time has passed; active connections are untouched.
- Its next packet starts a new connection (a new conn_id, mid-stream), not late data.
- Without a timeout nothing expires, whatever the gap.
"""

from __future__ import annotations

from typing import Any

from dissector.events import CloseReason, ConnClosed, ConnOpened, Segment
from dissector.flow.tcp import Reassembler

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
