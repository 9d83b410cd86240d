"""Timed crafted captures for the diagnosis rules: frames at chosen seconds, on several
connections, and the findings a read of them gives.

Input: a `Scene` (one or more `Conn`s), frames encoded with `msg` placed at a time in
seconds after T0 (`at`), connections opened (with or without their handshake and CONNECT,
to start mid-connection) and closed.
Output: a pcap file whose packets carry those times, in time order; `findings(path)` ->
the findings table's rows read back through the real reader, `journeys(path)` the journeys
table's; `Scene.packet(m)` and `us(t)`: the packet number and time of the frame a scene sent,
from the scene's own order and times (what a test expects of a row).
Rule: the expected findings of a test come from what its scene did (a SEND with no receipt
for 40 s, 21 Redirects), never from the dissector's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from dissector.events import Direction
from dissector.findings import Thresholds
from dissector.read import read_capture
from tests.support.crafted import B2C, C2B, T0_US, Conn, Msg, Seg, Session, msg, write_pcap

TOPIC = "persistent://public/default/diag"
SUB = "diag-sub"


class Scene:
    """Connections whose frames go out at chosen times; see the module docstring."""

    def __init__(self) -> None:
        self.segs: list[Seg] = []
        self.sessions: dict[Conn, Session] = {}
        self.carriers: list[tuple[Msg, Seg]] = []  # each frame sent with `at`, its segment

    def open(self, conn: Conn | None = None, t: float = 0.0, *, connect: bool = True) -> Conn:
        """Open a connection at `t`: its handshake, then CONNECT/CONNECTED (connect=False:
        the capture starts in the middle of it, neither SYN nor CONNECT seen)."""
        conn = conn or Conn()
        session = self.sessions[conn] = Session(conn)
        if connect:
            self._timed(session.handshake(), t)
            hello = msg(C2B, "CONNECT", client_version="diag-client", protocol_version=21)
            self.at(t, hello, conn)
            self.at(
                t, msg(B2C, "CONNECTED", server_version="diag-broker", protocol_version=21), conn
            )
        return conn

    def at(self, t: float, m: Msg, conn: Conn | None = None) -> Scene:
        """Frame `m` sent at `t` seconds on `conn` (default: the first connection)."""
        conn = conn or next(iter(self.sessions))
        (seg,) = self._timed(self.sessions[conn].frames([m]), t)
        self.carriers.append((m, seg))
        return self

    def packet(self, m: Msg) -> int:
        """The packet number that carries frame `m` in the written file (sent once, by `at`)."""
        (seg,) = [seg for sent, seg in self.carriers if sent is m]
        return next(n for n, s in enumerate(self._ordered(), 1) if s is seg)

    def raw(self, t: float, data: bytes, conn: Conn, direction: Any = C2B) -> Scene:
        """Bytes that are not a frame (HTTP, TLS) sent at `t`."""
        self._timed([self.sessions[conn].send(direction, data)], t)
        return self

    def close(self, t: float, conn: Conn | None = None, first: Direction = C2B) -> Scene:
        """FIN both ways at `t`, `first`'s first (the client's by default)."""
        conn = conn or next(iter(self.sessions))
        self._timed(self.sessions[conn].close(first), t)
        return self

    def _timed(self, segs: list[Seg], t: float) -> list[Seg]:
        timed = [s.replace(ts_us=us(t)) for s in segs]
        self.segs.extend(timed)
        return timed

    def _ordered(self) -> list[Seg]:
        return sorted(self.segs, key=lambda s: s.ts_us or 0)  # stable: sent order kept

    def write(self, path: Path) -> Path:
        write_pcap(path, self._ordered())
        return path

    def write_apart(self, paths: dict[Conn, Path]) -> list[Path]:
        """Each connection's packets in the file `paths` names for it (captures of one run
        taken on several hosts); the files written."""
        for path in set(paths.values()):
            write_pcap(path, [seg for seg in self._ordered() if paths[seg.conn] == path])
        return sorted(set(paths.values()))


def two_hosts(name: str = "diag-producer") -> tuple[Scene, Conn, Conn]:
    """A scene of a producer's connection (its PRODUCER at 0 s) and a consumer's (opened and
    subscribed at 0.01 s), to be captured apart (`write_apart`) or together."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p, 0.0)
    s.open(c, 0.01)
    for m in producer(name=name):
        s.at(0, m, p)
    for m in subscribe():
        s.at(0.01, m, c)
    return s, p, c


def no_flow(close: float | None = None) -> Scene:
    """A consumer subscribed at 0 s that never sends FLOW, PINGs answered at 20 and 39 s (the
    capture's clock passes the flow wait, 10 s); its connection closed at `close` seconds
    (None: the capture leaves it open)."""
    scene = Scene()
    conn = scene.open()
    for m in subscribe():
        scene.at(0, m, conn)
    for t in (20.0, 39.0):
        scene.at(t, ping(), conn).at(t, pong(), conn)
    if close is not None:
        scene.close(close, conn)
    return scene


def us(t: float) -> int:
    """The capture time (µs since the epoch) of `t` seconds into a scene."""
    return T0_US + round(t * 1_000_000)


def findings(path: Path, thresholds: Thresholds | None = None) -> list[dict[str, Any]]:
    """The findings table's rows of a capture, read as users read it."""
    table = read_capture(path, tables=["findings"], thresholds=thresholds).arrow["findings"]
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def journeys(path: Path | list[Path]) -> list[dict[str, Any]]:
    """The journeys table's rows of a capture, or of captures read together (times as µs
    since the epoch), read as users read it."""
    table = read_capture(path, tables=["journeys"]).arrow["journeys"]
    rows: list[dict[str, Any]] = table.cast(
        pa.schema(
            [f.with_type(pa.int64()) if pa.types.is_timestamp(f.type) else f for f in table.schema]
        )
    ).to_pylist()
    return rows


def codes(path: Path, thresholds: Thresholds | None = None) -> list[str]:
    return sorted(r["code"] for r in findings(path, thresholds))


# ------------------------------------------------------------------------- common frames


def producer(
    pid: int = 1, rid: int = 1, name: str = "diag-producer", topic: str = TOPIC
) -> list[Msg]:
    return [
        msg(C2B, "PRODUCER", topic=topic, producer_id=pid, request_id=rid, producer_name=name),
        msg(B2C, "PRODUCER_SUCCESS", request_id=rid, producer_name=name),
    ]


def subscribe(cid: int = 2, rid: int = 2, sub_type: int = 1, topic: str = TOPIC) -> list[Msg]:
    return [
        msg(
            C2B, "SUBSCRIBE", topic=topic, subscription=SUB, subType=sub_type,
            consumer_id=cid, request_id=rid,
        ),
        msg(B2C, "SUCCESS", request_id=rid),
    ]  # fmt: skip


def send(seq: int, pid: int = 1, payload: bytes = b"diag", **kw: Any) -> Msg:
    return msg(C2B, "SEND", producer_id=pid, sequence_id=seq, payload=payload, **kw)


def receipt(seq: int, pid: int = 1, entry: int = 0) -> Msg:
    mid = {"ledgerId": 9, "entryId": entry}
    return msg(B2C, "SEND_RECEIPT", producer_id=pid, sequence_id=seq, message_id=mid)


def message(entry: int, cid: int = 2, payload: bytes = b"m", **kw: Any) -> Msg:
    mid = {"ledgerId": 9, "entryId": entry}
    return msg(
        B2C, "MESSAGE", consumer_id=cid, message_id=mid, payload=payload, checksum=False, **kw
    )


def ack(*entries: int, cid: int = 2, cumulative: bool = False) -> Msg:
    ids = [{"ledgerId": 9, "entryId": e} for e in entries]
    return msg(C2B, "ACK", consumer_id=cid, ack_type=int(cumulative), message_id=ids)


def flow(permits: int, cid: int = 2) -> Msg:
    return msg(C2B, "FLOW", consumer_id=cid, messagePermits=permits)


def ping(direction: Any = C2B) -> Msg:
    return msg(direction, "PING")


def pong(direction: Any = B2C) -> Msg:
    return msg(direction, "PONG")


def faults_capture(path: Path) -> Path:
    """Three connections with three faults: conn 1, a producer whose two SENDs are never
    answered (error, 2 SENDs); conn 2, a consumer that never sends FLOW (warning); conn 3,
    the producer of conn 1 back from the same client with its counter reset (warning,
    spanning conns 1 and 3)."""
    s = Scene()
    one, two, three = Conn(client_port=40001), Conn(client_port=40002), Conn(client_port=40003)
    s.open(one)
    s.open(two)
    for m in producer():
        s.at(0, m, one)
    s.at(0.5, send(0), one).at(0.6, receipt(0), one).at(1, send(1), one).at(1, send(2), one)
    for m in subscribe():
        s.at(0, m, two)
    for t in (20.0, 39.0):
        s.at(t, ping(), two).at(t, pong(), two)
    s.close(40, one)
    s.open(three, 41)
    for m in producer(rid=3):
        s.at(41, m, three)
    s.at(42, send(0), three).at(42.1, receipt(0, entry=5), three)
    s.close(43, three)
    s.close(43, two)
    return s.write(path)
