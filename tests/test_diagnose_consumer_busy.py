"""consumer.busy on crafted captures: SUBSCRIBEs refused with ConsumerBusy, one row per
(connection, subscription), naming the consumer that holds the subscription when the capture
shows it.

The scenes subscribe an Exclusive consumer (SUCCESS), then refuse another SUBSCRIBE of the
same topic and subscription with ERROR ConsumerBusy (ServerError 5 of
proto/pulsar_api.proto). Expected rows follow from the scenes: which connection's consumer
subscribed and was never closed, how its connection ended, which ERRORs refused whom.
Near misses: a subscription released by CLOSE_CONSUMER then taken (no refusal, no row); a
refusal with another error; a holder closed before the refusal (not named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, Conn, Msg, msg
from tests.support.scenes import SUB, TOPIC, Scene, findings

BUSY, NOT_READY = 5, 6  # ServerError.ConsumerBusy, ServerError.ServiceNotReady
EXCLUSIVE = 0  # SubType.Exclusive
A, B = Conn(client_port=40001), Conn(client_port=40002)


def _subscribe(cid: int, rid: int, name: str) -> Msg:
    return msg(
        C2B, "SUBSCRIBE", topic=TOPIC, subscription=SUB, subType=EXCLUSIVE,
        consumer_id=cid, request_id=rid, consumer_name=name,
    )  # fmt: skip


def _ok(rid: int) -> Msg:
    return msg(B2C, "SUCCESS", request_id=rid)


def _refused(rid: int, error: int = BUSY) -> Msg:
    return msg(
        B2C, "ERROR", request_id=rid, error=error, message="Exclusive consumer is already connected"
    )


def _busy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["code"] == F.CONSUMER_BUSY]


def test_a_zombie_holder_on_an_ended_connection_is_named(tmp_path: Path) -> None:
    """Conn A's consumer subscribes and its connection ends (FIN) with no CLOSE_CONSUMER;
    conn B's SUBSCRIBE is refused three times: one row on B, naming A's consumer."""
    s = Scene()
    s.open(A, 0.0)
    ok = _ok(1)
    s.at(0.1, _subscribe(1, 1, "first"), A).at(0.2, ok, A)
    s.close(5.0, A)
    s.open(B, 6.0)
    errors = []
    for i, t in enumerate((6.0, 7.0, 8.0)):
        error = _refused(10 + i)
        s.at(t, _subscribe(7, 10 + i, "second"), B).at(t + 0.1, error, B)
        errors.append(error)
    s.close(9.0, B)
    rows = _busy(findings(s.write(tmp_path / "zombie.pcap")))
    assert [(r["topic"], r["entity"], r["count"]) for r in rows] == [
        (TOPIC, f"subscription {SUB}", 3)
    ]
    (row,) = rows
    assert row["evidence"] == [s.packet(e) for e in errors]
    assert row["client_port"] == B.client_port  # the refused connection's row
    summary = row["summary"]
    assert "3 times" in summary and "consumer 1 (first)" in summary, summary
    assert f"{A.client_ip}:{A.client_port}" in summary, summary
    assert "ended (fin)" in summary and "without CLOSE_CONSUMER" in summary, summary
    # subscribed at 0.2 s, its connection ended at 5.0 s, the first refusal at 6.1 s
    assert "5.9 s before the first refusal" in summary, summary
    assert "ended (fin) 1.1 s before it" in summary, summary
    assert f"(packet {s.packet(ok)})" in summary, summary


def test_a_holder_still_open_on_the_same_connection_is_named(tmp_path: Path) -> None:
    """The Java client's case: one pooled connection, a second consumer refused once."""
    s = Scene()
    s.open(A, 0.0)
    ok = _ok(1)
    s.at(0.1, _subscribe(1, 1, "busy-a"), A).at(0.2, ok, A)
    refusal = _refused(2)
    s.at(1.0, _subscribe(2, 2, "busy-b"), A).at(1.1, refusal, A)
    s.close(2.0, A)
    (row,) = _busy(findings(s.write(tmp_path / "same.pcap")))
    assert (row["count"], row["evidence"]) == (1, [s.packet(refusal)])
    summary = row["summary"]
    assert "once" in summary and "consumer 1 (busy-a) on this connection" in summary, summary
    assert f"packet {s.packet(ok)}" in summary and "still open" in summary, summary


def test_a_holder_open_on_another_connection_is_named(tmp_path: Path) -> None:
    s = Scene()
    s.open(A, 0.0)
    s.at(0.1, _subscribe(1, 1, "first"), A).at(0.2, _ok(1), A)
    s.open(B, 1.0)
    s.at(1.0, _subscribe(1, 1, "second"), B).at(1.1, _refused(1), B)
    s.close(3.0, B)
    s.close(4.0, A)
    (row,) = _busy(findings(s.write(tmp_path / "open.pcap")))
    assert row["client_port"] == B.client_port
    assert f"{A.client_ip}:{A.client_port}" in row["summary"], row["summary"]
    assert "still open" in row["summary"], row["summary"]


def test_a_subscription_released_then_taken_is_no_finding(tmp_path: Path) -> None:
    """A's consumer closes (CLOSE_CONSUMER, SUCCESS); B subscribes and is accepted."""
    s = Scene()
    s.open(A, 0.0)
    s.at(0.1, _subscribe(1, 1, "first"), A).at(0.2, _ok(1), A)
    s.at(1.0, msg(C2B, "CLOSE_CONSUMER", consumer_id=1, request_id=2), A).at(1.1, _ok(2), A)
    s.open(B, 2.0)
    s.at(2.0, _subscribe(1, 1, "second"), B).at(2.1, _ok(1), B)
    s.close(3.0, B)
    s.close(3.0, A)
    assert findings(s.write(tmp_path / "released.pcap")) == []


def test_another_error_is_not_consumer_busy(tmp_path: Path) -> None:
    s = Scene()
    s.open(A, 0.0)
    s.at(0.1, _subscribe(1, 1, "first"), A).at(0.2, _ok(1), A)
    s.at(1.0, _subscribe(2, 2, "second"), A).at(1.1, _refused(2, NOT_READY), A)
    s.close(2.0, A)
    assert _busy(findings(s.write(tmp_path / "other.pcap"))) == []


def test_a_holder_closed_before_the_refusal_is_not_named(tmp_path: Path) -> None:
    """A's consumer closed: whoever holds the subscription is not in the capture."""
    s = Scene()
    s.open(A, 0.0)
    s.at(0.1, _subscribe(1, 1, "first"), A).at(0.2, _ok(1), A)
    s.at(1.0, msg(C2B, "CLOSE_CONSUMER", consumer_id=1, request_id=2), A).at(1.1, _ok(2), A)
    s.open(B, 2.0)
    s.at(2.0, _subscribe(1, 1, "second"), B).at(2.1, _refused(1), B)
    s.close(3.0, B)
    s.close(3.0, A)
    (row,) = _busy(findings(s.write(tmp_path / "closed.pcap")))
    assert "no consumer holding it is in the capture" in row["summary"], row["summary"]
    assert str(A.client_port) not in row["summary"]
