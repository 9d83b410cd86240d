"""consumer.redelivered_after_ack per connection, and ACKs that cross a delivery on the wire.

Input: crafted captures (tests/support/scenes.py) of one subscription's consumer on one or
two connections of the same client: deliveries, ACKs, FLOWs, a SUBSCRIBE again.
Output: the findings.
Rules the scenes check: each connection where acknowledged messages came again is a row of
its own, its evidence its MESSAGEs and the ACKs they came after (wherever those were), its
summary naming where those ACKs were; a MESSAGE that may have been on its way before the
broker could see the ACK (within the connection's round trip, or read by a dispatch under
way when the ACK left: after the FLOW, before that dispatch's first MESSAGE) proves nothing,
and its twin sent after that time does. Expected values come from the scenes.
"""

from __future__ import annotations

from pathlib import Path

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, Conn, msg
from tests.support.scenes import SUB, TOPIC, Scene, ack, codes, findings, flow, message, subscribe

ONE, TWO = Conn(client_port=40001), Conn(client_port=40002)
NOTIFICATION = (1 << 64) - 1  # request_id of a broker's CLOSE_CONSUMER


def test_each_connection_has_its_own_row(tmp_path: Path) -> None:
    """Entry 3 acked on conn 1 at 1.1 s, delivered again on conn 1 at 2 s and, after a
    reconnect, on conn 2 at 5 s: two rows, each with its own MESSAGE and the ACK on conn 1."""
    s = Scene()
    s.open(ONE)
    for m in subscribe():
        s.at(0, m, ONE)
    first, acked, again_here = message(3), ack(3), message(3, redelivery_count=1)
    s.at(0.1, flow(100), ONE).at(1, first, ONE).at(1.1, acked, ONE).at(2, again_here, ONE)
    s.close(3, ONE)
    s.open(TWO, 4)
    for m in subscribe(rid=3):
        s.at(4, m, TWO)
    again_there = message(3)
    s.at(4.1, flow(100), TWO).at(5, again_there, TWO).at(5.1, ack(3), TWO).close(6, TWO)
    rows = findings(s.write(tmp_path / "c.pcap"))
    got = sorted((r["code"], r["conn_id"], r["count"], r["evidence"]) for r in rows)
    assert got == [
        (F.CONSUMER_REDELIVERED_AFTER_ACK, 1, 1, [s.packet(acked), s.packet(again_here)]),
        (F.CONSUMER_REDELIVERED_AFTER_ACK, 2, 1, [s.packet(acked), s.packet(again_there)]),
    ]
    here, there = sorted(rows, key=lambda r: r["conn_id"])
    assert here["summary"].endswith("after it had acknowledged them on this connection")
    assert there["summary"].endswith("after it had acknowledged them on conn 1")
    assert {r["topic"] for r in rows} == {TOPIC}
    assert {r["entity"] for r in rows} == {f"subscription {SUB}"}


def _subscribed_again(ack_at: float, *, acked_before: bool = False) -> Scene:
    """The unload shape (Apache's broker and Java client, tests/test_apache_errors.py):
    entry 0 delivered at 1 s, not acked yet (acked_before: acked at 1.1 s); the broker closes
    the consumer at 2 s; the client subscribes again (SUCCESS at 2.02 s), sends FLOW at
    2.021 s and its grouped ACK of entry 0 at `ack_at`; the broker's dispatch for the FLOW
    sends entry 0 again at 2.042 s."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(0.1, flow(100)).at(1, message(0))
    if acked_before:
        s.at(1.1, ack(0))
    s.at(2, msg(B2C, "CLOSE_CONSUMER", consumer_id=2, request_id=NOTIFICATION))
    request, answer = subscribe(rid=5)
    s.at(2.001, request).at(2.02, answer)
    if ack_at < 2.021:
        s.at(ack_at, ack(0))
    s.at(2.021, flow(100))
    if ack_at >= 2.021:
        s.at(ack_at, ack(0))
    s.at(2.042, message(0, redelivery_count=1)).at(2.05, ack(0))
    s.close(3)
    return s


def test_an_ack_crossing_the_dispatch_after_subscribing_again_proves_nothing(
    tmp_path: Path,
) -> None:
    """The ACK at 2.031 s, after the FLOW and before the dispatch's first MESSAGE (21 ms):
    the broker's read may have begun before the ACK reached it."""
    assert codes(_subscribed_again(ack_at=2.031).write(tmp_path / "c.pcap")) == []


def test_an_ack_before_the_flow_is_proof(tmp_path: Path) -> None:
    """The twin: the same ACK at 2.0205 s, before the FLOW on the same connection (the
    broker reads them in order): the dispatch began after the ACK reached the broker."""
    (row,) = findings(_subscribed_again(ack_at=2.0205).write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERED_AFTER_ACK and row["count"] == 1


def _round_trip_scene(again_at: float) -> Scene:
    """Every request answered in 20 ms or more (CONNECT in 20 ms: the connection's round
    trip; SUBSCRIBE in 30 ms); entry 3 delivered at 1 s and acked at 2 s; entry 3 again at
    `again_at`."""
    s = Scene()
    conn = s.open(connect=False)
    s._timed(s.sessions[conn].handshake(), 0)
    s.at(0, msg(C2B, "CONNECT", client_version="diag-client", protocol_version=21))
    s.at(0.02, msg(B2C, "CONNECTED", server_version="diag-broker", protocol_version=21))
    request, answer = subscribe()
    s.at(0.1, request).at(0.13, answer)
    s.at(0.2, flow(100)).at(1, message(3)).at(2, ack(3)).at(again_at, message(3))
    s.close(3)
    return s


def test_a_message_within_the_round_trip_of_the_ack_proves_nothing(tmp_path: Path) -> None:
    """Entry 3 again 15 ms after the ACK: it left the broker before the ACK could reach it."""
    assert codes(_round_trip_scene(2.015).write(tmp_path / "c.pcap")) == []


def test_a_message_past_the_round_trip_of_the_ack_is_proof(tmp_path: Path) -> None:
    (row,) = findings(_round_trip_scene(2.025).write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERED_AFTER_ACK and row["count"] == 1


def test_an_earlier_ack_of_the_same_id_is_the_proof(tmp_path: Path) -> None:
    """Entry 0 acked at 1.1 s, then again as the dispatch after the SUBSCRIBE again is under
    way: the first ACK, long before, proves the redelivery."""
    s = _subscribed_again(ack_at=2.031, acked_before=True)
    assert codes(s.write(tmp_path / "c.pcap")) == [F.CONSUMER_REDELIVERED_AFTER_ACK]
