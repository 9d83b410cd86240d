"""dispatch.stalled_with_permits and consumer.stats_mismatch on crafted captures.

Each scene: a producer's connection and a consumer's (tests.support.scenes.two_hosts: a
Shared subscription), the consumer granted permits and delivered a few messages, then no
MESSAGE while the producer's SENDs are receipted every two seconds. Expected values come
from the scene: when it stalled, how many permits it had left (granted minus delivered), the
receipts it placed after, what the stats answer says. Twins that must stay silent: the
publish side not captured, no permits left (flow.starved's), MESSAGEs resuming within
dispatch_wait, another consumer of the subscription taking the messages, an answer that
agrees with the capture.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dissector.diagnose import Diagnoser
from dissector.events import Finding
from dissector.findings import FindingCode as F
from dissector.findings import Thresholds
from dissector.pulsar.wire import MessageMetadata
from dissector.read import iter_events
from tests.support.crafted import B2C, C2B, Conn, msg
from tests.support.scenes import (
    Scene,
    findings,
    flow,
    message,
    producer,
    receipt,
    send,
    subscribe,
    us,
)

GRANTED = 10
DELIVERED = 3  # entries 1..3 at 0.2, 0.3, 0.4 s: the stall starts at the third
STALL_START = 0.4
RECEIPTS = [1.0 + 2 * i for i in range(15)]  # 1, 3, ..., 29 s
END = 30.0


def _scene(
    *,
    granted: int = GRANTED,
    resume: tuple[float, ...] = (),
    end: float = END,
    stats: dict[str, Any] | None = None,
    late: float | None = None,
    sub_type: int = 1,
    active: bool | None = None,
    delayed: bool = False,
) -> tuple[Scene, Conn, Conn]:
    """The scene (`stats`: a CONSUMER_STATS at 3.5 s answered 1 ms later with these
    fields; `late`: one more MESSAGE then; `sub_type` 2: Failover, `active`: the broker's
    ACTIVE_CONSUMER_CHANGE at 0.05 s; `delayed`: every SEND for later delivery), both
    connections closed at `end`."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p, 0.0)
    s.open(c, 0.01)
    for m in producer():
        s.at(0, m, p)
    for m in subscribe(sub_type=sub_type):
        s.at(0.01, m, c)
    if active is not None:
        s.at(0.05, msg(B2C, "ACTIVE_CONSUMER_CHANGE", consumer_id=2, is_active=active), c)
    s.at(0.1, flow(granted), c)
    for i in range(1, DELIVERED + 1):
        s.at(0.1 + i / 10, message(i), c)
    for k, t in enumerate(resume):
        s.at(t, message(100 + k), c)
    for i, t in enumerate(r for r in RECEIPTS if r < end):
        later: dict[str, Any] = {"metadata": _later(i)} if delayed else {}
        s.at(t - 0.01, send(i, **later), p)
        s.at(t, receipt(i, entry=10 + i), p)
    if stats is not None:
        _stats(s, c, 3.5, rid=9, **stats)
    if late is not None:
        s.at(late, message(50), c)
    s.close(end, p)
    s.close(end, c)
    return s, p, c


def _later(seq: int) -> MessageMetadata:
    """A SEND's metadata asking for delivery an hour later (deliver_at_time)."""
    return MessageMetadata(
        producer_name="diag-producer", sequence_id=seq, publish_time=1,
        deliver_at_time=us(3600) // 1000,
    )  # fmt: skip


def _micros(ts: datetime) -> int:
    return (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _codes(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(r["code"] for r in rows)


def test_a_stall_while_the_topic_is_receipted_is_found(tmp_path: Path) -> None:
    s, _, _ = _scene()
    rows = findings(s.write(tmp_path / "c.pcap"))
    (row,) = [r for r in rows if r["code"] == F.DISPATCH_STALLED_WITH_PERMITS]
    assert _codes(rows) == [F.DISPATCH_STALLED_WITH_PERMITS]
    assert abs(row["value"] - (END - STALL_START)) < 0.01
    assert row["unit"] == "s" and row["count"] == 1
    assert row["entity"] == "consumer 2 (sub diag-sub, Shared)"
    summary = row["summary"]
    assert f"holding {GRANTED - DELIVERED} permits" in summary
    assert f"got {len(RECEIPTS)} SEND_RECEIPTs" in summary
    assert f"{DELIVERED} messages delivered to it were unacknowledged" in summary
    assert "blocked" not in summary
    assert _micros(row["first_ts"]) == us(STALL_START)


def test_the_same_stall_without_the_publish_side_is_unknown(tmp_path: Path) -> None:
    s, p, c = _scene()
    paths = s.write_apart({p: tmp_path / "p.pcap", c: tmp_path / "c.pcap"})
    assert paths == [tmp_path / "c.pcap", tmp_path / "p.pcap"]
    assert findings(tmp_path / "c.pcap") == []


def test_no_permits_left_is_flow_starved_not_a_stall(tmp_path: Path) -> None:
    s, _, _ = _scene(granted=DELIVERED)
    assert _codes(findings(s.write(tmp_path / "c.pcap"))) == [F.FLOW_STARVED]


def test_messages_resuming_within_dispatch_wait_are_no_stall(tmp_path: Path) -> None:
    # gaps of at most 9 s between deliveries (dispatch_wait 10 s), permits to spare
    s, _, _ = _scene(resume=(9.0, 18.0, 27.0))
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_a_gap_past_dispatch_wait_after_a_receipt_is_a_stall(tmp_path: Path) -> None:
    """The near-miss above, its second gap 12.5 s (9 to 21.5 s): the first receipt after
    9 s (11 s) waited 10.5 s undelivered, receipts went on past 19 s: one stall."""
    s, _, _ = _scene(resume=(9.0, 21.5, 27.0))
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.DISPATCH_STALLED_WITH_PERMITS
    assert abs(row["value"] - 12.5) < 0.01
    assert _micros(row["first_ts"]) == us(9.0)


def test_a_gap_past_dispatch_wait_but_not_after_a_receipt_is_none(tmp_path: Path) -> None:
    """A gap of 11.5 s (9 to 20.5 s) is longer than dispatch_wait, but the first message
    published in it (receipt at 11 s) waited only 9.5 s: no stall."""
    s, _, _ = _scene(resume=(9.0, 20.5, 27.0))
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_another_consumer_of_the_subscription_taking_the_messages_is_no_stall(
    tmp_path: Path,
) -> None:
    s, _, c = _scene()
    for m in subscribe(cid=5, rid=5):
        s.at(0.02, m, c)
    s.at(0.1, flow(100, cid=5), c)
    for i, t in enumerate(RECEIPTS):
        s.at(t + 0.005, message(10 + i, cid=5), c)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_an_inactive_failover_consumer_gets_nothing_by_design(tmp_path: Path) -> None:
    s, _, _ = _scene(sub_type=2, active=False)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_an_active_failover_consumer_stalled_is_found(tmp_path: Path) -> None:
    s, _, _ = _scene(sub_type=2, active=True)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.DISPATCH_STALLED_WITH_PERMITS
    assert row["entity"] == "consumer 2 (sub diag-sub, Failover)"
    assert abs(row["value"] - (END - STALL_START)) < 0.01


def test_receipts_of_messages_for_later_delivery_prove_no_stall(tmp_path: Path) -> None:
    s, _, _ = _scene(delayed=True)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def _stats(
    s: Scene, c: Conn, t: float, *, rid: int, permits: int, unacked: int, blocked: bool
) -> None:
    s.at(t, msg(C2B, "CONSUMER_STATS", request_id=rid, consumer_id=2), c)
    s.at(
        t + 0.001,
        msg(
            B2C, "CONSUMER_STATS_RESPONSE", request_id=rid, availablePermits=permits,
            unackedMessages=unacked, blockedConsumerOnUnackedMsgs=blocked, msgBacklog=42,
        ),
        c,
    )  # fmt: skip


def test_the_brokers_blocked_flag_is_evidence_before_dispatch_wait(tmp_path: Path) -> None:
    """A 4.6 s stall (below dispatch_wait) is one when the broker says it is blocked; its
    numbers agree with the capture (7 permits, 3 unacked): no mismatch."""
    numbers = {"permits": GRANTED - DELIVERED, "unacked": DELIVERED, "blocked": True}
    s, _, _ = _scene(end=5.0, stats=numbers)
    path = s.write(tmp_path / "c.pcap")
    (row,) = findings(path)
    assert row["code"] == F.DISPATCH_STALLED_WITH_PERMITS
    assert abs(row["value"] - (5.0 - STALL_START)) < 0.01
    assert "the broker said blockedConsumerOnUnackedMsgs" in row["summary"]
    response = next(m for m, _ in s.carriers if m.name == "CONSUMER_STATS_RESPONSE")
    assert s.packet(response) in row["evidence"]


def test_without_the_flag_the_short_stall_is_none(tmp_path: Path) -> None:
    numbers = {"permits": GRANTED - DELIVERED, "unacked": DELIVERED, "blocked": False}
    s, _, _ = _scene(end=5.0, stats=numbers)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_a_stats_answer_disagreeing_is_a_mismatch(tmp_path: Path) -> None:
    numbers = {"permits": GRANTED - DELIVERED - 2, "unacked": DELIVERED, "blocked": False}
    s, _, _ = _scene(end=5.0, stats=numbers)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_STATS_MISMATCH
    assert row["value"] == 2 and row["count"] == 1
    summary = row["summary"]
    assert f"availablePermits {GRANTED - DELIVERED - 2}" in summary
    assert f"{GRANTED - DELIVERED} permits ({GRANTED} granted, {DELIVERED} delivered)" in summary
    assert "unackedMessages" not in summary  # that one agreed
    assert "msgBacklog 42: not compared" in summary


def test_unacked_disagreeing_is_a_mismatch(tmp_path: Path) -> None:
    numbers = {"permits": GRANTED - DELIVERED, "unacked": DELIVERED + 4, "blocked": False}
    s, _, _ = _scene(end=5.0, stats=numbers)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_STATS_MISMATCH
    assert row["value"] == 4
    assert f"unackedMessages {DELIVERED + 4}" in row["summary"]
    assert f"{DELIVERED} unacknowledged" in row["summary"]


def test_a_message_in_flight_after_the_answer_is_within_tolerance(tmp_path: Path) -> None:
    """The broker counted a 4th delivery it wrote 2 ms after its answer (within the
    10 ms least window): 6 permits, 4 unacked agree."""
    numbers = {"permits": GRANTED - DELIVERED - 1, "unacked": DELIVERED + 1, "blocked": False}
    s, _, _ = _scene(end=5.0, stats=numbers, late=3.503)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_the_listener_hears_of_the_stall_while_it_lasts(tmp_path: Path) -> None:
    s, _, _ = _scene()
    path = s.write(tmp_path / "c.pcap")
    told: list[Finding] = []
    engine = Diagnoser(Thresholds(), listener=told.append)
    rows = []
    for _, ev in iter_events(path):
        rows += engine.feed(ev)
    rows += engine.finish()
    (heard,) = told
    assert heard.code == F.DISPATCH_STALLED_WITH_PERMITS
    # established once the first receipt after the stall (1 s) has waited dispatch_wait:
    # at the first sweep after 11 s, long before the capture ends (30 s)
    assert us(11.0) < heard.ts <= us(13.0)
    assert [r.code for r in rows] == [F.DISPATCH_STALLED_WITH_PERMITS]


def test_a_broker_counting_more_permits_than_the_capture_is_a_mismatch(tmp_path: Path) -> None:
    """No frame in flight explains a broker holding more permits than the FLOWs gave minus
    the MESSAGEs seen (a FLOW sent after the request is not counted yet by it), even when it
    says the consumer is blocked (a blocked consumer's permits are held apart: fewer)."""
    numbers = {"permits": GRANTED - DELIVERED + 2, "unacked": DELIVERED, "blocked": True}
    s, _, _ = _scene(end=5.0, stats=numbers)
    rows = findings(s.write(tmp_path / "c.pcap"))
    (row,) = [r for r in rows if r["code"] == F.CONSUMER_STATS_MISMATCH]
    assert row["value"] == 2
    assert f"availablePermits {GRANTED - DELIVERED + 2}" in row["summary"]
    assert _codes(rows) == [F.CONSUMER_STATS_MISMATCH, F.DISPATCH_STALLED_WITH_PERMITS]
