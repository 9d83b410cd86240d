"""The producer rules read the SEND facts: the facts say which SEND a receipt answered, whether
it was its producer's oldest waiting, and which one waits next; the rules keep no SEND map.

Scenes are hand-built frames fed through one connection's state machine
(dissector.facts.ConversationState) and the engine, as the pipeline does (each Frame, then the
facts it completes; at the end the facts never answered, then the Conversation); expected
values are worked out by hand from the scene.
"""

from __future__ import annotations

from typing import Any

from dissector.diagnose import Diagnoser
from dissector.events import (
    CloseReason,
    ConversationOpened,
    Direction,
    Finding,
    FlowKey,
    Frame,
    Pair,
)
from dissector.facts import ConversationState
from dissector.findings import Thresholds
from dissector.pulsar.encoder import command
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES
from dissector.read.options import ReaderOptions
from dissector.read.plan import plan_read
from tests.support.ended import ended

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
KEY = FlowKey("10.0.0.1", 40000, "10.0.0.2", 6650)
S = 1_000_000  # µs


class Scene:
    """One connection: frames through its state machine, then the engine."""

    def __init__(self) -> None:
        plan = plan_read(ReaderOptions(), ["findings"])  # the facts a findings read makes
        self.state = ConversationState(1, lifecycles=plan.lifecycles)
        self.engine = Diagnoser(Thresholds(send_timeout=10.0))
        self.packet = 0
        self.offset = {C2B: 0, B2C: 0}
        self.found: list[Finding] = []
        self.facts: list[Any] = []
        self.found += self.engine.feed(ConversationOpened(1, KEY, 0, 1))

    def send(self, direction: Direction, name: str, ts: int, **fields: Any) -> int:
        """Feed one frame at `ts` µs; its packet number."""
        cmd = command(name, **fields)
        ctype = COMMAND_TYPES[name]
        self.packet += 1
        frame = Frame(
            1, direction, self.offset[direction], 10, 5, ctype, name, cmd,
            getattr(cmd, BODY_FIELDS[ctype]), None,
            first_packet=self.packet, last_packet=self.packet, first_ts=ts, last_ts=ts,
        )  # fmt: skip
        self.offset[direction] += 14
        topic, facts = self.state.observe(frame)
        self.facts += facts
        self.found += self.engine.feed(frame._replace(topic=topic))
        for fact in facts:
            self.found += self.engine.feed(fact)
        return self.packet

    def end(self, ts: int, reason: CloseReason = CloseReason.FIN) -> list[Finding]:
        for fact in self.state.close():
            self.facts.append(fact)
            self.found += self.engine.feed(fact)
        self.found += self.engine.feed(
            ended(1, KEY, end_ts=ts, last_packet=self.packet, reason=reason)
        )
        self.found += self.engine.finish()
        return self.found


def _mid(entry: int) -> dict[str, int]:
    return {"ledgerId": 7, "entryId": entry}


def _producer(scene: Scene) -> None:
    scene.send(C2B, "CONNECT", 0, client_version="c")
    scene.send(B2C, "CONNECTED", 1, server_version="s")
    scene.send(C2B, "PRODUCER", 2, topic="t", producer_id=1, request_id=1)
    scene.send(B2C, "PRODUCER_SUCCESS", 3, request_id=1, producer_name="p")


def test_a_receipt_says_whether_it_answered_the_oldest_send_and_which_waits_next() -> None:
    """SENDs 0, 1, 2; receipts 1, 0, 2: receipt 1 answers a SEND that was not the oldest
    (SEND 0 waits next), receipt 0 the oldest (SEND 2 next), receipt 2 the last."""
    scene = Scene()
    _producer(scene)
    sent = [scene.send(C2B, "SEND", 10 + i, producer_id=1, sequence_id=i) for i in range(3)]
    for i in (1, 0, 2):
        scene.send(B2C, "SEND_RECEIPT", 20 + i, producer_id=1, sequence_id=i, message_id=_mid(i))
    receipts = [
        f
        for f in scene.facts
        if type(f) is Pair and f.request is not None and f.request.command_name == "SEND"
    ]
    assert [p.sequence_id for p in receipts] == [1, 0, 2]
    assert [p.in_order for p in receipts] == [False, True, True]
    waiting = [None if p.next_waiting is None else p.next_waiting.last_packet for p in receipts]
    assert waiting == [sent[0], sent[2], None]
    found = [f for f in scene.end(30) if f.code == "producer.receipt_out_of_order"]
    assert len(found) == 1 and found[0].count == 1
    assert found[0].evidence == (sent[2] + 1,)  # the receipt of sequence id 1


def test_sends_waiting_when_the_client_closes_the_producer_are_timeouts_once() -> None:
    """SENDs 0 and 1 wait when the client closes the producer at 5 s; the broker's receipt of
    SEND 0 comes later, SEND 1 never: both are timeout evidence, counted once, their wait
    measured to the close (5 s and 4 s), though the send timeout is 10 s."""
    scene = Scene()
    _producer(scene)
    first = scene.send(C2B, "SEND", 0 * S + 10, producer_id=1, sequence_id=0)
    second = scene.send(C2B, "SEND", 1 * S + 10, producer_id=1, sequence_id=1)
    scene.send(C2B, "CLOSE_PRODUCER", 5 * S + 10, producer_id=1, request_id=2)
    scene.send(B2C, "SEND_RECEIPT", 6 * S, producer_id=1, sequence_id=0, message_id=_mid(0))
    scene.send(B2C, "SUCCESS", 6 * S + 1, request_id=2)
    found = [f for f in scene.end(7 * S) if f.code == "producer.send_timeout"]
    assert len(found) == 1
    assert found[0].count == 2 and found[0].evidence == (first, second)
    assert found[0].value == 5.0  # the longest wait, to the close


def test_at_the_capture_end_only_sends_older_than_the_timeout_count() -> None:
    """The capture ends at 30 s with SEND 0 (sent at 1 s) and SEND 1 (sent at 25 s) never
    answered: only SEND 0 has waited past the 10 s send timeout."""
    scene = Scene()
    _producer(scene)
    old = scene.send(C2B, "SEND", 1 * S, producer_id=1, sequence_id=0)
    scene.send(C2B, "SEND", 25 * S, producer_id=1, sequence_id=1)
    found = [
        f for f in scene.end(30 * S, CloseReason.CAPTURE_END) if f.code == "producer.send_timeout"
    ]
    assert len(found) == 1
    assert found[0].count == 1 and found[0].evidence == (old,) and found[0].value == 29.0


def test_the_sweep_times_the_oldest_send_the_facts_say_waits() -> None:
    """SENDs 0 (at 1 s) and 1 (at 3 s); SEND 0's receipt at 2 s: the oldest waiting is then
    SEND 1, whose timeout passes at 13 s; a listener hears of it at the sweep after that,
    naming SEND 1 and one SEND waiting."""
    heard: list[Finding] = []
    scene = Scene()
    scene.engine.ctx.listener = heard.append
    _producer(scene)
    scene.send(C2B, "SEND", 1 * S, producer_id=1, sequence_id=0)
    scene.send(B2C, "SEND_RECEIPT", 2 * S, producer_id=1, sequence_id=0, message_id=_mid(0))
    later = scene.send(C2B, "SEND", 3 * S, producer_id=1, sequence_id=1)
    scene.engine.tick(12 * S)
    assert heard == []
    scene.engine.tick(14 * S)
    assert [f.code for f in heard] == ["producer.send_timeout"]
    assert heard[0].evidence == (later,) and heard[0].count == 1


def test_a_findings_read_has_the_facts_whatever_the_pairs_option_says() -> None:
    """The producer and request rules keep no matching of their own: a read making findings
    has the state machine make its completion facts even with pairs turned off."""
    off = ReaderOptions(messages=False, pairs=False)
    assert plan_read(off, ["findings"]).pairs
    assert not plan_read(off, ["timeline"]).pairs  # the option still turns the timeline's off


def test_a_ping_is_answered_by_the_pong_the_facts_pair_with_it() -> None:
    """A client's PING at 0 s; a PONG the same way at 1 s answers nothing (a PING is answered
    the other way: the facts' FIFO pairs); the broker's PONG at 40 s answers it, 10 s past
    the 30 s keep-alive interval: one late PING, waited 40 s."""
    scene = Scene()
    scene.send(C2B, "CONNECT", 0, client_version="c")
    scene.send(B2C, "CONNECTED", 1, server_version="s")
    ping = scene.send(C2B, "PING", 2)
    scene.send(C2B, "PONG", 1 * S)
    scene.send(B2C, "PONG", 40 * S + 2)
    found = [f for f in scene.end(41 * S) if f.code == "keepalive.unanswered"]
    assert len(found) == 1
    assert found[0].count == 1 and found[0].evidence == (ping,) and found[0].value == 40.0
