"""Each diagnosis rule on a crafted capture, and a near miss that must not fire.

Every scene says what it did (a SEND left without receipt for 40 s, 21 Redirects in a row,
a PING never answered); the finding expected follows from that and the rule's threshold
(the clients' defaults, dissector.findings.Thresholds), not from the dissector's output.
Near misses: one fewer (redirects, redeliveries), the answer in time, the order kept, and
captures that start in the middle of a connection (what they cannot know is not reported).
"""

from __future__ import annotations

from pathlib import Path

from dissector.findings import FindingCode as F
from dissector.findings import Thresholds
from dissector.pulsar.wire import MessageMetadata
from tests.support.crafted import B2C, C2B, T0_US, TLS_CLIENT_HELLO, Conn, Msg, msg
from tests.support.scenes import (
    SUB,
    TOPIC,
    Scene,
    ack,
    codes,
    findings,
    flow,
    message,
    ping,
    pong,
    producer,
    receipt,
    send,
    subscribe,
)


def _keepalive(scene: Scene, t: float, conn: Conn | None = None) -> None:
    """A PING answered at once: time passes on the connection, nothing else happens."""
    scene.at(t, ping(), conn).at(t, pong(), conn)


def _scene(*steps: tuple[float, object]) -> Scene:
    scene = Scene()
    scene.open()
    for t, m in steps:
        scene.at(t, m)  # type: ignore[arg-type]
    return scene


# ------------------------------------------------------------------------------ flow


def test_no_flow_after_subscribe(tmp_path: Path) -> None:
    s = _scene(*[(0.5, m) for m in subscribe()])
    _keepalive(s, 20.0)
    s.close(21.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.FLOW_NO_FLOW_AFTER_SUBSCRIBE
    assert row["entity"] == f"consumer 2 (sub {SUB})" and row["topic"] == TOPIC
    assert abs(row["value"] - 20.5) < 0.01  # SUCCESS at 0.5 s, closed at 21 s


def test_first_flow_late(tmp_path: Path) -> None:
    s = _scene(*[(0.5, m) for m in subscribe()], (12.5, flow(10)))
    s.close(13.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.FLOW_NO_FLOW_AFTER_SUBSCRIBE and abs(row["value"] - 12.0) < 0.01


def test_flow_in_time_is_no_finding(tmp_path: Path) -> None:
    s = _scene(*[(0.5, m) for m in subscribe()], (1.0, flow(10)))
    _keepalive(s, 20.0)
    s.close(21.0)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_mid_connection_consumer_gets_no_flow_finding(tmp_path: Path) -> None:
    """No SUBSCRIBE, no CONNECT in the capture: its permits are unknown, not zero."""
    s = Scene()
    s.open(connect=False)
    s.at(0.1, message(1)).at(0.2, message(2))
    _keepalive(s, 30.0)
    s.close(31.0)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_starved_consumer(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in subscribe()], (0.1, flow(2)), (0.2, message(1)), (0.3, message(2)))
    s.at(20.3, flow(2))  # 20 s with 0 permits and no FLOW
    s.close(21.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.FLOW_STARVED
    assert abs(row["value"] - 20.0) < 0.01


def test_permits_renewed_in_time_is_not_starved(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in subscribe()], (0.1, flow(2)), (0.2, message(1)), (0.3, message(2)))
    s.at(5.0, flow(2))
    _keepalive(s, 30.0)
    s.close(31.0)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_overshoot_beyond_one_batch(tmp_path: Path) -> None:
    deliveries = [(0.2 + i / 10, message(i)) for i in range(5)]  # 5 messages for 2 permits
    s = _scene(*[(0, m) for m in subscribe()], (0.1, flow(2)), *deliveries, (1.0, flow(100)))
    s.close(2.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.FLOW_OVERSHOOT
    assert row["count"] == 2 and row["value"] == 3  # the 4th and 5th; permits fell to -3


def test_one_message_over_is_the_brokers_right(tmp_path: Path) -> None:
    deliveries = [(0.2 + i / 10, message(i)) for i in range(3)]  # one over: one batch of 1
    s = _scene(*[(0, m) for m in subscribe()], (0.1, flow(2)), *deliveries, (1.0, flow(100)))
    s.close(2.0)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def _batches(count: int, size: int) -> list[tuple[float, object]]:
    """`count` MESSAGEs, each a batch of `size` messages (num_messages_in_batch)."""
    out: list[tuple[float, object]] = []
    for i in range(count):
        meta = MessageMetadata(
            producer_name="p", sequence_id=i, publish_time=1, num_messages_in_batch=size
        )
        out.append((0.2 + i / 10, message(i, metadata=meta)))
    return out


def test_as_many_batches_as_permits_is_a_brokers_estimate_not_an_overshoot(
    tmp_path: Path,
) -> None:
    """FLOW 10, then 4 batches of 5: 20 messages, 10 beyond the permits (more than one
    batch), but 4 MESSAGE commands for 10 permits: a broker sizing its reads by an average
    batch size (Apache's default dispatch) does this on a healthy run."""
    s = _scene(*[(0, m) for m in subscribe()], (0.1, flow(10)), *_batches(4, 5), (1.0, flow(100)))
    s.close(2.0)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_more_batches_than_permits_is_an_overshoot(tmp_path: Path) -> None:
    """FLOW 2, then 4 batches of 5: the 3rd MESSAGE is one command beyond the permits (the
    broker's right), the 4th two: permits at 2 - 20 = -18 after it."""
    s = _scene(*[(0, m) for m in subscribe()], (0.1, flow(2)), *_batches(4, 5), (1.0, flow(100)))
    s.close(2.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.FLOW_OVERSHOOT
    assert row["count"] == 1 and row["value"] == 18


# ------------------------------------------------------------------------------ producers


def test_send_timeout(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1.0, send(0)), (1.5, send(1)))
    _keepalive(s, 40.0)  # the broker answers PINGs, not SENDs
    s.close(41.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.PRODUCER_SEND_TIMEOUT
    assert row["count"] == 2 and abs(row["value"] - 40.0) < 0.01  # closed 40 s after SEND 0
    assert row["entity"] == "producer 1 (diag-producer)"


def test_receipt_in_time_is_no_timeout(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1.0, send(0)), (2.0, receipt(0)))
    _keepalive(s, 40.0)
    s.close(41.0)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_pending_at_capture_end_counts_only_past_the_timeout(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1.0, send(0)))
    _keepalive(s, 20.0)  # the capture ends 19 s after the SEND: it may still be answered
    assert codes(s.write(tmp_path / "c.pcap")) == []
    loose = Thresholds(send_timeout=10.0)
    assert codes(tmp_path / "c.pcap", loose) == [F.PRODUCER_SEND_TIMEOUT]


def test_receipt_out_of_order(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1, send(0)), (1, send(1)))
    s.at(2, receipt(1)).at(2, receipt(0))
    s.close(3)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.PRODUCER_RECEIPT_OUT_OF_ORDER and row["count"] == 1


def test_receipts_in_order(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1, send(0)), (1, send(1)))
    s.at(2, receipt(0)).at(2, receipt(1))
    s.close(3)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_sequence_regression_on_one_connection(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1, send(5)), (1, send(3)))
    s.at(2, receipt(5)).at(2, receipt(3)).close(3)
    got = codes(s.write(tmp_path / "c.pcap"))
    assert F.PRODUCER_SEQUENCE_REGRESSION in got


def test_sequence_regression_across_a_reconnect(tmp_path: Path) -> None:
    first, second = Conn(client_port=40001), Conn(client_port=40002)
    s = Scene()
    s.open(first)
    for m in producer():
        s.at(0, m, first)
    for seq in range(3):
        s.at(1, send(seq), first).at(1.1, receipt(seq, entry=seq), first)
    s.close(2, first)
    s.open(second, 3)
    for m in producer():
        s.at(3, m, second)
    s.at(4, send(0), second).at(4.1, receipt(0, entry=9), second)  # the counter restarted
    s.close(5, second)
    rows = findings(s.write(tmp_path / "c.pcap"))
    assert [r["code"] for r in rows] == [F.PRODUCER_SEQUENCE_REGRESSION]
    assert "receipted on conn 1" in rows[0]["summary"] and rows[0]["conn_id"] == 2


def test_sequence_continued_across_a_reconnect(tmp_path: Path) -> None:
    first, second = Conn(client_port=40001), Conn(client_port=40002)
    s = Scene()
    s.open(first)
    for m in producer():
        s.at(0, m, first)
    for seq in range(3):
        s.at(1, send(seq), first).at(1.1, receipt(seq, entry=seq), first)
    s.close(2, first)
    s.open(second, 3)
    for m in producer():
        s.at(3, m, second)
    s.at(4, send(3), second).at(4.1, receipt(3, entry=9), second)
    s.close(5, second)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_new_producer_after_a_close_starts_anew(tmp_path: Path) -> None:
    """The client closed its producer: the next one of that name is no reconnect."""
    first, second = Conn(client_port=40001), Conn(client_port=40002)
    s = Scene()
    s.open(first)
    for m in producer():
        s.at(0, m, first)
    s.at(1, send(0), first).at(1.1, receipt(0, entry=0), first)
    s.at(1.5, msg(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=9), first)
    s.at(1.6, msg(B2C, "SUCCESS", request_id=9), first).close(2, first)
    s.open(second, 3)
    for m in producer():
        s.at(3, m, second)
    s.at(4, send(0), second).at(4.1, receipt(0, entry=9), second).close(5, second)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_producer_busy(tmp_path: Path) -> None:
    busy = msg(B2C, "ERROR", request_id=1, error=16, message="producer already connected")
    s = _scene((0, producer()[0]), (0.1, busy))
    s.close(1)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.PRODUCER_BUSY and "ProducerBusy" in row["summary"]


def test_producer_resent_without_close(tmp_path: Path) -> None:
    again = msg(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=3)
    s = _scene(*[(0, m) for m in producer()], (5, again))
    s.close(6)
    assert F.PRODUCER_BUSY in codes(s.write(tmp_path / "c.pcap"))


def test_producer_reopened_after_close(tmp_path: Path) -> None:
    close = msg(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=5)
    s = _scene(*[(0, m) for m in producer()], (1, close), (1.1, msg(B2C, "SUCCESS", request_id=5)))
    for m in producer(rid=6):
        s.at(2, m)
    s.close(3)
    assert codes(s.write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------------ consumers


def _consumer_scene(*steps: tuple[float, object]) -> Scene:
    return _scene(*[(0, m) for m in subscribe()], (0.1, flow(100)), *steps)


def test_redelivered_after_ack(tmp_path: Path) -> None:
    s = _consumer_scene((1, message(3)), (1.1, ack(3)), (5, message(3)))
    s.close(6)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERED_AFTER_ACK
    assert row["entity"] == f"subscription {SUB}" and row["count"] == 1


def test_the_rest_of_a_batch_acked_in_part_cumulatively_is_no_redelivery_after_ack(
    tmp_path: Path,
) -> None:
    """A cumulative ACK naming a batch with an ack_set whose bits are still set (batch index
    ack: slot 2 of 3 unacknowledged, bitset 0b100) acknowledges what comes before the batch
    and part of it, not the batch: the broker delivering the batch again (with its ack_set)
    delivers no acknowledged message."""
    meta = MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3
    )
    part = [{"ledgerId": 9, "entryId": 3, "batch_index": 1, "ack_set": [4]}]
    s = _consumer_scene(
        (1, message(3, metadata=meta)),
        (1.1, msg(C2B, "ACK", consumer_id=2, ack_type=1, message_id=part)),
        (5, message(3, metadata=meta, ack_set=[4], redelivery_count=1)),
    )
    s.at(5.1, ack(3)).close(6)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_next_message_after_ack_is_no_redelivery(tmp_path: Path) -> None:
    s = _consumer_scene((1, message(3)), (1.1, ack(3)), (5, message(4)), (5.1, ack(4)))
    s.close(6)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_an_ack_before_the_delivery_proves_nothing(tmp_path: Path) -> None:
    """An id acked before the capture shows its delivery: the later delivery is no
    redelivery the capture can prove (the acked delivery is not in it)."""
    s = _consumer_scene((1, ack(3)), (1.1, message(3)), (1.2, ack(3)))
    s.close(6)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_redelivered_after_a_cumulative_ack(tmp_path: Path) -> None:
    steps = [(1, message(1)), (1, message(2)), (1.1, ack(2, cumulative=True)), (5, message(1))]
    s = _consumer_scene(*steps)
    s.close(6)
    assert codes(s.write(tmp_path / "c.pcap")) == [F.CONSUMER_REDELIVERED_AFTER_ACK]


def _redeliver(t: float) -> tuple[float, object]:
    ids = [{"ledgerId": 9, "entryId": 1}]
    return t, msg(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=2, message_ids=ids)


def test_redelivery_storm(tmp_path: Path) -> None:
    s = _consumer_scene((1, message(1)), _redeliver(2), _redeliver(4), _redeliver(6))
    s.at(6.5, message(1)).at(7, ack(1)).close(8)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERY_STORM and row["value"] == 3
    assert "every 2.0 s" in row["summary"]


def _nack(t: float, *entries: int) -> tuple[float, list[Msg]]:
    """pulsar-rs nacking a poll: one REDELIVER_UNACKNOWLEDGED_MESSAGES per id."""
    return t, [
        msg(
            C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=2,
            message_ids=[{"ledgerId": 9, "entryId": e}],
        )
        for e in entries
    ]  # fmt: skip


def _nacked(scene: Scene, *nacks: tuple[float, list[Msg]]) -> Scene:
    """Each nack's commands sent 50 µs apart from its time."""
    for t, commands in nacks:
        for i, m in enumerate(commands):
            scene.at(t + i * 0.00005, m)
    return scene


def test_one_nack_of_three_ids_is_no_storm(tmp_path: Path) -> None:
    """Issue 42 item 12 (f10, a real pulsar-rs capture's shape): one nack of a 3-message
    poll, sent as 3 commands of one id each within 0.1 ms, is one redelivery request."""
    s = _consumer_scene(*[(1, message(e)) for e in (1, 2, 3)])
    _nacked(s, _nack(2, 1, 2, 3))
    s.at(3, message(1, redelivery_count=1)).at(3, message(2, redelivery_count=1))
    s.at(3, message(3, redelivery_count=1)).at(4, ack(1, 2, 3)).close(5)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_three_nacks_of_three_ids_are_a_storm_of_three(tmp_path: Path) -> None:
    """The same poll nacked three times, 2 s apart: three requests (nine commands)."""
    s = _consumer_scene(*[(1, message(e)) for e in (1, 2, 3)])
    _nacked(s, _nack(2, 1, 2, 3), _nack(4, 1, 2, 3), _nack(6, 1, 2, 3))
    s.at(7, ack(1, 2, 3)).close(8)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_REDELIVERY_STORM and row["value"] == 3
    assert "3 redelivery requests (9 commands), every 2.0 s" in row["summary"]


def test_two_redeliveries_are_no_storm(tmp_path: Path) -> None:
    s = _consumer_scene((1, message(1)), _redeliver(2), _redeliver(4))
    s.at(6.5, message(1)).at(7, ack(1)).close(8)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_ack_hole(tmp_path: Path) -> None:
    s = _consumer_scene((1, message(1)), (1, message(2)), (2, ack(2)))
    _keepalive(s, 70)
    s.close(71)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_ACK_HOLE and abs(row["value"] - 70) < 0.01


def test_a_hole_asked_again_and_redelivered_is_as_old_as_its_first_delivery(
    tmp_path: Path,
) -> None:
    """The client asks for message 1 again (REDELIVER_UNACKNOWLEDGED_MESSAGES) and gets it at
    3 s; it acknowledges message 2, never 1: message 1 is unacknowledged from its first
    delivery at 1 s to the end at 71 s (70 s), its first MESSAGE the evidence."""
    s = _consumer_scene((1, message(1)), (1, message(2)), _redeliver(2))
    s.at(3, message(1, redelivery_count=1)).at(4, ack(2))
    _keepalive(s, 70)
    s.close(71)
    path = s.write(tmp_path / "c.pcap")
    (row,) = findings(path)
    assert row["code"] == F.CONSUMER_ACK_HOLE and abs(row["value"] - 70) < 0.01
    assert abs(row["first_ts"].timestamp() - (T0_US / 1e6 + 1)) < 1e-3  # its first delivery


def test_every_delivery_acked_is_no_hole(tmp_path: Path) -> None:
    s = _consumer_scene((1, message(1)), (1, message(2)), (2, ack(2)), (3, ack(1)))
    _keepalive(s, 70)
    s.close(71)
    assert codes(s.write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------------ keep-alive


def test_ping_unanswered(tmp_path: Path) -> None:
    s = _scene((0, ping(B2C)), (0, pong(C2B)), (1, ping(C2B)))
    for t in range(2, 41):  # the broker keeps sending PINGs, the client answers them
        s.at(t, ping(B2C)).at(t, pong(C2B))
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.KEEPALIVE_UNANSWERED and "one-way" in row["summary"]
    assert abs(row["value"] - 39) < 0.01


def test_ping_answered(tmp_path: Path) -> None:
    s = _scene((1, ping(C2B)), (1.5, pong(B2C)))
    _keepalive(s, 40)
    assert codes(s.write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------------ lookups


ELSEWHERE = "pulsar://10.9.9.9:6650"


def _lookups(redirects: int, tail: str = "Connect") -> Scene:
    s = Scene()
    s.open()
    t = 0.0
    for rid in range(1, redirects + 2):
        t += 0.1
        s.at(t, msg(C2B, "LOOKUP", topic=TOPIC, request_id=rid, authoritative=rid > 1))
        if rid <= redirects:
            answer = {"response": 0, "brokerServiceUrl": ELSEWHERE, "authoritative": True}
        else:
            answer = {"response": 1 if tail == "Connect" else 2}
        s.at(t, msg(B2C, "LOOKUP_RESPONSE", request_id=rid, **answer))  # type: ignore[arg-type]
    s.close(t + 1)
    return s


def test_redirect_loop(tmp_path: Path) -> None:
    rows = findings(_lookups(21).write(tmp_path / "c.pcap"))
    assert [r["code"] for r in rows] == [F.LOOKUP_REDIRECT_LOOP]
    assert rows[0]["value"] == 21 and "21 consecutive Redirects" in rows[0]["summary"]


def test_one_fewer_redirect_is_no_loop(tmp_path: Path) -> None:
    assert codes(_lookups(20).write(tmp_path / "c.pcap")) == []


def _one_redirect(url: str, then_authoritative: bool) -> Scene:
    """A LOOKUP redirected (authoritative) to `url`, then the follow-up LOOKUP, answered."""
    redirect = {"response": 0, "brokerServiceUrl": url, "authoritative": True}
    s = _scene(
        (0.1, msg(C2B, "LOOKUP", topic=TOPIC, request_id=1)),
        (0.2, msg(B2C, "LOOKUP_RESPONSE", request_id=1, **redirect)),  # type: ignore[arg-type]
        (0.3, msg(C2B, "LOOKUP", topic=TOPIC, request_id=2, authoritative=then_authoritative)),
        (0.4, msg(B2C, "LOOKUP_RESPONSE", request_id=2, response=1)),
    )
    s.close(1)
    return s


def test_redirect_to_the_broker_asked(tmp_path: Path) -> None:
    scene = _one_redirect("pulsar://10.0.0.2:6650", True)  # the crafted broker's own address
    (row,) = findings(scene.write(tmp_path / "c.pcap"))
    assert "the broker asked" in row["summary"]


def test_redirect_not_followed_authoritatively(tmp_path: Path) -> None:
    (row,) = findings(_one_redirect(ELSEWHERE, False).write(tmp_path / "c.pcap"))
    assert "authoritative=False after a Redirect with True" in row["summary"]


def test_one_redirect_followed_as_told(tmp_path: Path) -> None:
    assert codes(_one_redirect(ELSEWHERE, True).write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------------ requests


def test_request_unanswered_at_close(tmp_path: Path) -> None:
    s = _scene((1, msg(C2B, "LOOKUP", topic=TOPIC, request_id=7)))
    s.close(2)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.REQUEST_UNANSWERED and "1 LOOKUP" in row["summary"]


def _closing_race(meta_at: float) -> Scene:
    """The C++ client closing a partitioned producer: CLOSE_PRODUCER at 1 s answered, a
    PARTITIONED_METADATA at `meta_at` never answered, the connection ended at 1.003 s."""
    return _scene(
        (1.0, msg(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=6)),
        (1.001, msg(B2C, "SUCCESS", request_id=6)),
        (meta_at, msg(C2B, "PARTITIONED_METADATA", topic=TOPIC, request_id=10)),
    )


def test_a_request_given_up_by_the_client_closing_is_no_finding(tmp_path: Path) -> None:
    """Sent while the client closes (after its CLOSE_PRODUCER), then the client's own FIN
    1 ms later: the client gave it up, the broker could not answer."""
    s = _closing_race(1.002)
    s.close(1.003)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_request_left_by_the_brokers_close_is_a_finding(tmp_path: Path) -> None:
    """The same request, the broker ending the connection first: it was never answered."""
    s = _closing_race(1.002)
    s.close(1.003, first=B2C)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.REQUEST_UNANSWERED and "1 PARTITIONED_METADATA" in row["summary"]


def test_a_request_before_the_client_closes_is_a_finding(tmp_path: Path) -> None:
    """Asked before the client began closing, still waiting at its FIN: unanswered."""
    s = _closing_race(0.5)
    s.close(1.003)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.REQUEST_UNANSWERED and "1 PARTITIONED_METADATA" in row["summary"]


def test_request_answered(tmp_path: Path) -> None:
    s = _scene(
        (1, msg(C2B, "LOOKUP", topic=TOPIC, request_id=7)),
        (1.1, msg(B2C, "LOOKUP_RESPONSE", request_id=7, response=1)),
    )
    s.close(2)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_unknown_response(tmp_path: Path) -> None:
    s = _scene((1, msg(B2C, "SUCCESS", request_id=99)))
    s.close(2)
    assert codes(s.write(tmp_path / "c.pcap")) == [F.REQUEST_UNKNOWN_RESPONSE]


def test_unknown_response_mid_connection_is_unknown(tmp_path: Path) -> None:
    """Captured after its request: the response cannot be judged."""
    s = Scene()
    s.open(connect=False)
    s.at(1, msg(B2C, "SUCCESS", request_id=99)).close(2)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_request_id_reused(tmp_path: Path) -> None:
    """Two LOOKUPs with one id and one answer: the id is reused, and one of the two is never
    answered before the close (as the timeline shows it: both read the facts' pairing)."""
    lookup = msg(C2B, "LOOKUP", topic=TOPIC, request_id=5)
    s = _scene((1, lookup), (1.1, lookup), (1.2, msg(B2C, "LOOKUP_RESPONSE", request_id=5)))
    s.close(2)
    path = s.write(tmp_path / "c.pcap")
    assert codes(path) == [F.REQUEST_ID_REUSED, F.REQUEST_UNANSWERED]
    (unanswered,) = [r for r in findings(path) if r["code"] == F.REQUEST_UNANSWERED]
    assert unanswered["count"] == 1


def test_an_id_reused_by_two_counters_answered_apart_is_no_finding(tmp_path: Path) -> None:
    """The C++ client numbers its lookups and its other requests with two counters on one
    connection: PARTITIONED_METADATA 10 waits while CLOSE_CONSUMER 10 goes out. Their
    answers differ by type (PARTITIONED_METADATA_RESPONSE, SUCCESS): nothing is mixed up."""
    meta = msg(C2B, "PARTITIONED_METADATA", topic=TOPIC, request_id=10)
    close = msg(C2B, "CLOSE_CONSUMER", consumer_id=2, request_id=10)
    answer = msg(B2C, "PARTITIONED_METADATA_RESPONSE", request_id=10, partitions=3)
    s = _scene((1, meta), (1.1, close), (1.2, answer), (1.3, msg(B2C, "SUCCESS", request_id=10)))
    s.close(2)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_an_id_reused_by_two_requests_answered_by_success_is_reused(tmp_path: Path) -> None:
    """CLOSE_PRODUCER 10 waits while CLOSE_CONSUMER 10 goes out: both are answered by
    SUCCESS, so the answers cannot be told apart."""
    first = msg(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=10)
    close = msg(C2B, "CLOSE_CONSUMER", consumer_id=2, request_id=10)
    done = msg(B2C, "SUCCESS", request_id=10)
    s = _scene((1, first), (1.1, close), (1.2, done), (1.3, done))
    s.close(2)
    assert codes(s.write(tmp_path / "c.pcap")) == [F.REQUEST_ID_REUSED]


# ------------------------------------------------------------------------------ messages


def _sized(limit: int, size: int) -> Scene:
    s = Scene()
    s.open(connect=False)
    s.at(0, msg(C2B, "CONNECT", client_version="diag-client", protocol_version=21))
    s.at(0, msg(B2C, "CONNECTED", server_version="b", protocol_version=21, max_message_size=limit))
    for m in producer():
        s.at(0.1, m)
    s.at(1, send(0, payload=b"x" * size)).at(1.1, receipt(0)).close(2)
    return s


def test_oversize_message(tmp_path: Path) -> None:
    (row,) = findings(_sized(1000, 1001).write(tmp_path / "c.pcap"))
    assert row["code"] == F.MESSAGE_OVERSIZE and row["value"] == 1001


def test_message_at_the_limit(tmp_path: Path) -> None:
    assert codes(_sized(1000, 1000).write(tmp_path / "c.pcap")) == []


def test_checksum_mismatch_by_hop(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1, send(0, checksum=0x1234)), (1.1, receipt(0)))
    s.close(2)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CHECKSUM_MISMATCH_HOP
    assert row["entity"] == "producer -> broker (SEND)" and "diag-client" in row["summary"]


def test_valid_checksums(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1, send(0)), (1.1, receipt(0)))
    s.close(2)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def _chunk(seq_id: int, chunk: int, of: int) -> object:
    meta = MessageMetadata(
        producer_name="diag-producer",
        sequence_id=seq_id,
        publish_time=T0_US // 1000,
        uuid="diag-uuid",
        chunk_id=chunk,
        num_chunks_from_msg=of,
        total_chunk_msg_size=of * 4,
    )
    return msg(
        C2B, "SEND", producer_id=1, sequence_id=seq_id, is_chunk=True, payload=b"part",
        metadata=meta,
    )  # fmt: skip


def test_chunks_stopped_arriving(tmp_path: Path) -> None:
    s = _scene(*[(0, m) for m in producer()], (1, _chunk(0, 0, 3)), (2, _chunk(0, 1, 3)))
    s.at(2.1, receipt(0)).at(2.2, receipt(0))
    _keepalive(s, 70)
    s.close(71)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CHUNK_INCOMPLETE_EXPIRED and "2 of 3 chunks" in row["summary"]


def test_every_chunk_arrived(tmp_path: Path) -> None:
    steps = [(1 + i, _chunk(0, i, 3)) for i in range(3)]
    s = _scene(*[(0, m) for m in producer()], *steps)
    s.at(4, receipt(0)).at(4, receipt(0)).at(4, receipt(0))
    _keepalive(s, 70)
    s.close(71)
    assert codes(s.write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------------ topics


def test_topic_migrated_not_followed(tmp_path: Path) -> None:
    migrated = msg(
        B2C, "TOPIC_MIGRATED", resource_id=1, resource_type=0,
        brokerServiceUrl="pulsar://10.0.0.3:6650",
    )  # fmt: skip
    s = _scene(*[(0, m) for m in producer()], (1, migrated))
    _keepalive(s, 40)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.TOPIC_MIGRATED_NOT_FOLLOWED
    assert "did not come back for 39.0 s" in row["summary"]


def test_topic_migrated_and_followed(tmp_path: Path) -> None:
    migrated = msg(
        B2C, "TOPIC_MIGRATED", resource_id=1, resource_type=0,
        brokerServiceUrl="pulsar://10.0.0.3:6650",
    )  # fmt: skip
    s = _scene(*[(0, m) for m in producer()], (1, migrated))
    there = s.open(Conn(client_port=40010, broker_ip="10.0.0.3"), 2)
    for m in producer():
        s.at(2, m, there)
    _keepalive(s, 40)
    assert codes(s.write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------------ protocol


def test_http_on_the_broker_port(tmp_path: Path) -> None:
    s = Scene()
    conn = s.open(connect=False)
    s._timed(s.sessions[conn].handshake(), 0)
    s.raw(0.1, b"GET /admin/v2/clusters HTTP/1.1\r\nHost: broker\r\n\r\n", conn).close(1)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONNECTION_WRONG_PROTOCOL and "'GET '" in row["summary"]


def test_plaintext_on_the_tls_port(tmp_path: Path) -> None:
    s = Scene()
    s.open(Conn(broker_port=6651))  # CONNECT in clear to the TLS port
    s.close(1)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONNECTION_WRONG_PROTOCOL and "does not open with TLS" in row["summary"]


def test_tls_captured_mid_connection_is_not_judged(tmp_path: Path) -> None:
    """The capture starts inside a TLS connection: its first captured bytes are the middle
    of a record, not the client's first bytes."""
    s = Scene()
    conn = s.open(Conn(broker_port=6651), connect=False)
    s.raw(0.1, bytes(range(7, 200)), conn).close(1)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_tls_on_the_plain_port_and_not_on_the_tls_port(tmp_path: Path) -> None:
    s = Scene()
    plain, tls = Conn(client_port=40001), Conn(client_port=40002, broker_port=6651)
    for conn in (plain, tls):
        s.open(conn, connect=False)
        s._timed(s.sessions[conn].handshake(), 0)
        s.raw(0.1, TLS_CLIENT_HELLO, conn).close(1, conn)
    rows = findings(s.write(tmp_path / "c.pcap"))
    assert [(r["code"], r["broker_port"]) for r in rows] == [(F.CONNECTION_WRONG_PROTOCOL, 6650)]


def test_an_ack_while_the_consumer_is_subscribing_again_is_no_ack(tmp_path: Path) -> None:
    """Seen on Apache's broker (a topic unloaded): the broker closes the consumer
    (CLOSE_CONSUMER), the client subscribes again and sends its ACK before the SUBSCRIBE's
    SUCCESS; the broker has no consumer of that id yet, drops the ACK and delivers the message
    again: no acknowledged message was delivered again."""
    again = subscribe(rid=5)
    s = _consumer_scene(
        (1, message(3)),
        (1.1, msg(B2C, "CLOSE_CONSUMER", consumer_id=2, request_id=(1 << 64) - 1)),
        (1.2, again[0]),
        (1.3, ack(3)),
        (1.4, again[1]),
        (1.5, flow(100)),
        (2, message(3, redelivery_count=1)),
    )
    s.at(2.1, ack(3)).close(6)
    assert codes(s.write(tmp_path / "c.pcap")) == []
