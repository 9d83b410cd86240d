"""The diagnosis' work, counted: what a cumulative ack and the once-a-second sweep touch.

Work is counted, never timed: comparisons of message ids (tests/support/counted.py) and the
consumers, producers and connections a sweep visits. Expected values come from the scene's
construction (n deliveries, n consumers) and the issue's bound: work in proportion to what
changes, not to everything open.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from random import Random
from typing import Any

import pytest

from dissector.diagnose import Diagnoser, consumers, requests
from dissector.diagnose.engine import _SWEPT, _TIMED
from dissector.events import Acked, Direction, Frame
from dissector.facts import acks
from dissector.facts.store import Fact, Store
from dissector.findings import Thresholds
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.read import iter_events
from tests.support import counted as K
from tests.support.crafted import Conn, msg
from tests.support.scenes import (
    Scene,
    flow,
    message,
    ping,
    pong,
    producer,
    receipt,
    send,
    subscribe,
)

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
T0 = 1_700_000_000_000_000
_MESSAGE, _ACK = COMMAND_TYPES["MESSAGE"], COMMAND_TYPES["ACK"]


def _acks_over_pending(n: int) -> tuple[int, Store]:
    """n deliveries, then n cumulative acks below them all: the comparisons the acks made
    (the facts match deliveries with acks for the consumer rules: events.Acked)."""
    state = Store(1, True)
    for i in range(n):
        msg = K.body(consumer_id=1, message_id=K.mid(5, 10 + i), ack_set=[], redelivery_count=0)
        acks.on_message(state, K.frame("MESSAGE", msg, T0 + i, i, B2C), _MESSAGE, msg, [])
    K.Counted.calls = 0
    for i in range(n):
        ack = K.body(consumer_id=1, ack_type=1, message_id=[K.mid(5, i % 10)])
        acks.on_ack(state, K.frame("ACK", ack, T0 + n + i, n + i, C2B), _ACK, ack, [])
    work = K.Counted.calls
    ack = K.body(consumer_id=1, ack_type=1, message_id=[K.mid(5, 10 + n)])
    facts: list[Fact] = []
    acks.on_ack(state, K.frame("ACK", ack, T0 + 2 * n, 2 * n, C2B), _ACK, ack, facts)
    acked = facts[-1]
    assert isinstance(acked, Acked) and len(acked.done) == n and acked.left is None
    return work, state


def test_a_cumulative_ack_visits_what_it_covers() -> None:
    """Issue 42 item 1 (diagnose consumers): n acks over n pending deliveries compared each
    id with every pending one (n²); now a few comparisons each, and the last ack, covering
    everything, leaves nothing unacknowledged."""
    n = 400
    work, state = _acks_over_pending(n)
    assert work <= 10 * n  # a scan: about 3 n² (480,000)
    assert len(state._delivered[1].live) == 0


# ------------------------------------------------------------------ the sweep


class _Everyone(Diagnoser):
    """The sweep as the rule states it (and as it was before issue 42): every second, every
    open connection, then its producers and consumers, each checked in turn."""

    visited = 0

    def _sweep(self, now: int) -> None:
        ctx = self.ctx
        for conn in self.conns.values():
            for kind in sorted(_SWEPT):
                module = _SWEPT[kind]
                timed = [conn] if kind == requests.KIND else list(_TIMED[kind](conn).values())
                for t in timed:
                    _Everyone.visited += 1
                    due = module.due(ctx, conn, t)
                    if due is not None and due < now:
                        module.tell(ctx, conn, t, now)


def _random_scene(rng: Random, conns: int = 3) -> Scene:
    """Connections with consumers (some never FLOW, some drained), producers (some SENDs
    never receipted), PINGs (some unanswered), closes; times on a coarse grid so that many
    timers fall due in the same sweep."""
    scene = Scene()
    for k in range(conns):
        conn = scene.open(Conn(client_port=41000 + k), t=rng.randrange(3) * 0.5)
        t = 1.0
        for step in range(40):
            t += rng.choice((0.0, 0.25, 0.5, 1.0, 1.5))
            cid, pid = rng.randrange(1, 5), rng.randrange(1, 4)
            pick = rng.randrange(10)
            if pick == 0:
                for m in subscribe(cid, rid=100 + step):
                    scene.at(t, m, conn)
                if rng.random() < 0.7:  # permits at once: it may starve later
                    scene.at(t, flow(rng.choice((1, 2)), cid), conn)
            elif pick == 1:
                scene.at(t, flow(rng.choice((1, 2, 5)), cid), conn)
            elif pick == 2:
                scene.at(t, message(step, cid), conn)
            elif pick == 3:
                for m in producer(pid, rid=200 + step, name=f"p{k}-{pid}"):
                    scene.at(t, m, conn)
            elif pick == 4:
                scene.at(t, send(step, pid), conn)
            elif pick == 5:
                scene.at(t, receipt(max(0, step - rng.randrange(3)), pid), conn)
            elif pick in (6, 7):
                scene.at(t, ping(rng.choice((C2B, B2C))), conn)
            elif pick == 8:
                scene.at(t, pong(rng.choice((C2B, B2C))), conn)
            else:
                scene.at(
                    t, msg(C2B, "CLOSE_CONSUMER", consumer_id=cid, request_id=300 + step), conn
                )
        if rng.random() < 0.5:
            scene.close(t + rng.randrange(4), conn)
    return scene


def _told(engine: Diagnoser, path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    told: list[tuple[Any, ...]] = []
    engine.ctx.listener = lambda f: told.append((f.code, f.ts, f.conn_id, f.entity, f.summary))
    rows = []
    for _, ev in iter_events(path):
        rows += engine.feed(ev)
    rows += engine.finish()
    return told, [(f.code, f.ts, f.conn_id, f.entity, f.summary, f.count) for f in rows]


def test_the_sweep_tells_what_visiting_everyone_tells(tmp_path: Path) -> None:
    """Issue 42 item 2: the sweep takes what is due from a heap; the listener is told the
    same findings, at the same times, in the same order, as by checking every connection,
    producer and consumer every second; and the rows are the same."""
    th = Thresholds(flow_wait=0.5, keepalive=2, send_timeout=1.5)
    told = 0
    for seed in range(12):
        path = _random_scene(Random(seed)).write(tmp_path / f"s{seed}.pcap")
        want = _told(_Everyone(th), path)
        got = _told(Diagnoser(th), path)
        assert got == want, seed
        told += len(want[0])
    assert told >= 30  # the scenes do tell: starved, no FLOW, PINGs, SENDs


def _rule_lines(engine: Diagnoser, path: Path, after: int) -> int:
    """Lines of the rules (dissector/diagnose) run while the engine is fed the frames of
    `path` from the `after`-th PING on: the work of those frames and their sweeps."""
    rules = str(Path(consumers.__file__).parent)
    lines = 0
    pings = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return local

    def calls(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(rules) else None

    for _, ev in iter_events(path):
        if isinstance(ev, Frame) and ev.command_name == "PING":
            pings += 1
        if pings >= after and isinstance(ev, Frame):
            sys.settrace(calls)
        engine.feed(ev)
        sys.settrace(None)
    engine.finish()
    return lines


def _idle_consumers(n: int, seconds: int, path: Path) -> Path:
    """n consumers subscribed with permits on one connection, then a PING answered every
    second for `seconds` seconds (f11_consumers_then_pings: nothing is due, ever)."""
    scene = Scene()
    conn = scene.open(Conn())
    for cid in range(1, n + 1):
        for m in subscribe(cid, rid=cid):
            scene.at(0.5, m, conn)
        scene.at(0.5, flow(10, cid), conn)
    for s in range(1, seconds + 1):
        scene.at(s, ping(), conn).at(s, pong(), conn)
    return scene.write(path)


def _idle_conns(n: int, seconds: int, path: Path) -> Path:
    """n connections opened (CONNECT answered), then a PING answered every second on the
    first for `seconds` seconds (f11_conns_then_pings: nothing is due, ever)."""
    scene = Scene()
    conns = [scene.open(Conn(client_port=20000 + k), t=0.5) for k in range(n)]
    for s in range(1, seconds + 1):
        scene.at(s, ping(), conns[0]).at(s, pong(), conns[0])
    return scene.write(path)


@pytest.mark.parametrize("idle", [_idle_consumers, _idle_conns])
def test_a_sweep_visits_what_is_due_not_everything_open(
    idle: Callable[[int, int, Path], Path], tmp_path: Path
) -> None:
    """Issue 42 item 2: with n consumers (or connections) open, each second's sweep visited
    all n: n x seconds (20,000 consumers then PINGs: 44 s). The work of the PINGs from 12 s
    on (29 sweeps; the SUBSCRIBEs' timers, due at 10.5 s, are gone) is now the same with 20
    open or 400 (visiting each: 380 x 29 sweeps x 3 lines more)."""
    few = _rule_lines(Diagnoser(), idle(20, 40, tmp_path / "few.pcap"), 12)
    many = _rule_lines(Diagnoser(), idle(400, 40, tmp_path / "many.pcap"), 12)
    assert many == few
