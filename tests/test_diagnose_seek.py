"""consumer.redelivered_after_ack around a SEEK: the redelivery a seek asks for is no fault,
even when an ACK races the seek; an ack after the seek's answer still counts.

Input: crafted captures (tests/support/scenes.py) in the wire order Apache Pulsar 4.0 and
the Java client 4.0 were seen to use (tests/test_apache_dispatch.py, its seek scenario):
the client's SEEK, an ACK the client had grouped going out right after it, the broker's
CLOSE_CONSUMER (request_id -1), SUCCESS answering the SEEK, the client's SUBSCRIBE again,
then the entries from the seek point delivered again. Output: the findings.
Rule: the broker answers a SEEK by disconnecting the subscription's consumers and
resetting its cursor (the mark-delete position goes back, individual acks are cleared),
then answers; an ack reaching it meanwhile is overridden (applied then reset, or dropped for
a consumer already closed, until its SUBSCRIBE again is answered). An ack sent once the
consumer is subscribed again holds like any other (an ERROR answer: no reset, the acks sent
meanwhile hold too).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, Conn, Msg, msg
from tests.support.scenes import Scene, ack, codes, findings, flow, message, subscribe

SEEK_RID = 3
NOTIFICATION = (1 << 64) - 1  # request_id of a broker's CLOSE_CONSUMER


def _seek() -> Msg:
    return msg(C2B, "SEEK", consumer_id=2, request_id=SEEK_RID, message_publish_time=1)


def _consumed(scene: Scene, conn: Conn | None = None) -> Msg:
    """Subscribed at 0 s, entries 0-4 delivered at 1 s; 0-2 acked at 1.1 s (that ACK)."""
    for m in subscribe():
        scene.at(0, m, conn)
    scene.at(0.1, flow(100), conn)
    for entry in range(5):
        scene.at(1, message(entry), conn)
    acked = ack(0, 1, 2)
    scene.at(1.1, acked, conn)
    return acked


def _redispatched(scene: Scene, t: float, rid: int, ack_at: float | None = None) -> None:
    """The client subscribes again at `t` (and sends the grouped ACK of entries 3 and 4 at
    `ack_at`, before its FLOW, when given) and the broker sends entries 0-4 from the seek
    point."""
    for m in subscribe(rid=rid):
        scene.at(t, m)
    if ack_at is not None:
        scene.at(ack_at, ack(3, 4))
    scene.at(t + 0.01, flow(100))
    for entry in range(5):
        scene.at(t + 0.02, message(entry))


def _seek_scene(ack_at: float) -> Scene:
    """SEEK at 2 s, CLOSE_CONSUMER at 2.003 s, SUCCESS at 2.01 s, SUBSCRIBE again at 2.1 s;
    the grouped ACK of entries 3 and 4 at `ack_at` (before 2.1 s, or between the SUBSCRIBE
    again and its FLOW)."""
    s = Scene()
    s.open()
    _consumed(s)
    s.at(2, _seek())
    s.at(2.003, msg(B2C, "CLOSE_CONSUMER", consumer_id=2, request_id=NOTIFICATION))
    s.at(2.01, msg(B2C, "SUCCESS", request_id=SEEK_RID))
    if ack_at < 2.1:
        s.at(ack_at, ack(3, 4))
        _redispatched(s, 2.1, rid=4)
    else:
        _redispatched(s, 2.1, rid=4, ack_at=ack_at)
    s.close(3)
    return s


def test_an_ack_racing_the_seek_is_overridden(tmp_path: Path) -> None:
    """The ACK goes out 1 ms after the SEEK, before the broker closed the consumer: the
    reset overrides it, and entries 0-4 again are what the seek asked for."""
    assert findings(_seek_scene(ack_at=2.001).write(tmp_path / "c.pcap")) == []


@pytest.mark.parametrize("ack_at", [2.005, 2.0099])
def test_an_ack_after_the_close_and_before_the_answer_is_overridden(
    tmp_path: Path, ack_at: float
) -> None:
    """After CLOSE_CONSUMER the broker knows no such consumer (the ack is dropped), and the
    cursor is reset before SUCCESS: still no finding."""
    assert findings(_seek_scene(ack_at).write(tmp_path / "c.pcap")) == []


def test_an_ack_after_the_answer_and_before_the_subscribe_is_dropped(tmp_path: Path) -> None:
    """The ACK 10 ms after SUCCESS, before the client subscribes again: the broker closed
    the consumer (CLOSE_CONSUMER) and has none of that id, so it drops the ACK (Apache's
    broker was seen to, tests/test_apache_errors.py): entries 3 and 4 again are no fault."""
    assert findings(_seek_scene(ack_at=2.02).write(tmp_path / "c.pcap")) == []


def test_an_ack_after_the_subscribe_again_is_still_found(tmp_path: Path) -> None:
    """The near miss: the same ACK once the SUBSCRIBE again is answered, the cursor already
    reset: entries 3 and 4 delivered again afterwards were acknowledged (2 messages)."""
    s = _seek_scene(ack_at=2.105)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERED_AFTER_ACK and row["count"] == 2


def test_a_failed_seek_leaves_the_acks_sent_meanwhile(tmp_path: Path) -> None:
    """ERROR answers the SEEK: no reset, the ACK sent while it was pending holds, and entry 3
    delivered again is a redelivery after ack; before the SEEK, what was acked holds too."""
    s = Scene()
    s.open()
    _consumed(s)
    s.at(2, _seek()).at(2.001, ack(3))
    s.at(2.01, msg(B2C, "ERROR", request_id=SEEK_RID, error=0, message="reset failed"))
    s.at(3, message(3)).at(3, message(1))
    s.close(4)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERED_AFTER_ACK and row["count"] == 2


def test_a_redelivery_found_before_a_seek_is_kept(tmp_path: Path) -> None:
    """Entry 1, acked, came again before the SEEK: that finding stands (its evidence the
    MESSAGE and the ACK it came after); what the seek sends again after its SUCCESS is no
    fault."""
    s = Scene()
    s.open()
    acked = _consumed(s)
    again = message(1)
    s.at(1.5, again)
    s.at(2, _seek()).at(2.01, msg(B2C, "SUCCESS", request_id=SEEK_RID))
    s.at(2.1, message(0)).at(2.1, message(1)).at(2.2, ack(0, 1))
    s.close(3)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERED_AFTER_ACK and row["count"] == 1
    assert row["evidence"] == [s.packet(acked), s.packet(again)]


def test_a_seek_left_unanswered_by_a_dropped_connection(tmp_path: Path) -> None:
    """The connection drops after SEEK and an ACK: whether the broker reset the cursor is
    unknown; the client subscribes again on a new connection and entries 0-4 come again:
    no redelivery the capture can prove; the SEEK itself is a request left unanswered."""
    s = Scene()
    one, two = Conn(client_port=40001), Conn(client_port=40002)
    s.open(one)
    _consumed(s, one)
    s.at(2, _seek(), one).at(2.001, ack(3, 4), one)
    s.close(2.002, one)
    s.open(two, 2.5)
    for m in subscribe(rid=1):
        s.at(2.5, m, two)
    s.at(2.51, flow(100), two)
    for entry in range(5):
        s.at(2.52, message(entry), two)
    s.close(3, two)
    assert codes(s.write(tmp_path / "c.pcap")) == [F.REQUEST_UNANSWERED]
