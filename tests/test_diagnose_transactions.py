"""The transaction rules on crafted captures, each with a near miss that must not fire.

txn.coordinator_not_found: NEW_TXN answered TransactionCoordinatorNotFound, with and without
TC_CLIENT_CONNECT_REQUEST before it; txn.invalid_status: END_TXN answered InvalidTxnStatus
or TransactionNotFound, naming the txn; txn.timeout: a transaction ended after its
txn_ttl_millis, or still open when the capture went on past it (near misses: END_TXN in
time, a capture ending before the timeout). Expected values come from the scenes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dissector.findings import FindingCode as F
from dissector.findings import Thresholds
from tests.support.crafted import B2C, C2B, Msg, msg
from tests.support.scenes import Scene, findings, ping, pong

NOT_FOUND, INVALID, NO_TXN = 20, 21, 24  # ServerError
TXN = (3, 42)  # most, least bits


def tc_connect(rid: int) -> list[Msg]:
    return [
        msg(C2B, "TC_CLIENT_CONNECT_REQUEST", request_id=rid, tc_id=3),
        msg(B2C, "TC_CLIENT_CONNECT_RESPONSE", request_id=rid),
    ]


def new_txn(rid: int, ttl_ms: int | None = 10_000, **answer: Any) -> list[Msg]:
    ttl: dict[str, Any] = {} if ttl_ms is None else {"txn_ttl_millis": ttl_ms}
    bits: dict[str, Any] = {} if answer else {"txnid_most_bits": TXN[0], "txnid_least_bits": TXN[1]}
    return [
        msg(C2B, "NEW_TXN", request_id=rid, tc_id=3, **ttl),
        msg(B2C, "NEW_TXN_RESPONSE", request_id=rid, **bits, **answer),
    ]


def end_txn(rid: int, error: int | None = None) -> list[Msg]:
    bits: dict[str, Any] = {"txnid_most_bits": TXN[0], "txnid_least_bits": TXN[1]}
    err: dict[str, Any] = {} if error is None else {"error": error}
    return [
        msg(C2B, "END_TXN", request_id=rid, txn_action=0, **bits),
        msg(B2C, "END_TXN_RESPONSE", request_id=rid, **bits, **err),
    ]


def _scene(steps: list[tuple[float, list[Msg]]], end: float) -> Scene:
    s = Scene()
    s.open()
    for t, msgs in steps:
        for i, m in enumerate(msgs):
            s.at(t + i * 0.01, m)
    s.at(end, ping()).at(end, pong())  # the capture's last moment
    return s


# ------------------------------------------------------------------ coordinator not found


def test_new_txn_refused_with_no_tc_client_connect_before(tmp_path: Path) -> None:
    refused = new_txn(1, error=NOT_FOUND)
    s = _scene([(1.0, refused)], end=2.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.TXN_COORDINATOR_NOT_FOUND and row["count"] == 1
    assert list(row["evidence"]) == [s.packet(refused[0]), s.packet(refused[1])]
    assert "NEW_TXN x1" in row["summary"]
    assert "1 of them with no TC_CLIENT_CONNECT_REQUEST before" in row["summary"]
    assert "protocol 21" in row["summary"]


def test_new_txn_refused_after_tc_client_connect_says_so(tmp_path: Path) -> None:
    s = _scene([(0.5, tc_connect(1)), (1.0, new_txn(2, error=NOT_FOUND))], end=2.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.TXN_COORDINATOR_NOT_FOUND
    assert "had sent TC_CLIENT_CONNECT_REQUEST before" in row["summary"]


def test_new_txn_refused_after_a_refused_tc_client_connect(tmp_path: Path) -> None:
    """What Apache's broker answers while its coordinator is not loaded yet."""
    refused = [
        msg(C2B, "TC_CLIENT_CONNECT_REQUEST", request_id=1, tc_id=0),
        msg(B2C, "TC_CLIENT_CONNECT_RESPONSE", request_id=1, error=6),  # ServiceNotReady
    ]
    s = _scene([(0.5, refused), (1.0, new_txn(2, error=NOT_FOUND))], end=2.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.TXN_COORDINATOR_NOT_FOUND and row["count"] == 1
    assert "TC_CLIENT_CONNECT_REQUEST before, which was refused (ServiceNotReady)" in row["summary"]


def test_new_txn_answered_is_no_finding(tmp_path: Path) -> None:
    s = _scene([(0.5, tc_connect(1)), (1.0, new_txn(2)), (2.0, end_txn(3))], end=3.0)
    assert findings(s.write(tmp_path / "c.pcap")) == []


# ------------------------------------------------------------------------ invalid status


def test_end_txn_refused_names_the_transaction(tmp_path: Path) -> None:
    first, second = end_txn(1, error=INVALID), end_txn(2, error=NO_TXN)
    s = _scene([(1.0, first), (2.0, second)], end=3.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.TXN_INVALID_STATUS and row["count"] == 2
    assert list(row["evidence"]) == [s.packet(m) for m in (*first, *second)]
    assert "END_TXN txn (3, 42) (InvalidTxnStatus)" in row["summary"]
    assert "END_TXN txn (3, 42) (TransactionNotFound)" in row["summary"]


# ------------------------------------------------------------------------------- timeout


def test_end_txn_after_the_ttl_is_a_timeout(tmp_path: Path) -> None:
    opened, late = new_txn(2), end_txn(3, error=INVALID)
    s = _scene([(0.5, tc_connect(1)), (1.0, opened), (15.0, late)], end=16.0)
    rows = {r["code"]: r for r in findings(s.write(tmp_path / "c.pcap"))}
    assert set(rows) == {F.TXN_TIMEOUT, F.TXN_INVALID_STATUS}
    row = rows[F.TXN_TIMEOUT]
    assert row["count"] == 1 and row["unit"] == "s"
    assert abs(row["value"] - (15.0 - 1.01)) < 1e-6  # NEW_TXN_RESPONSE at 1.01 s
    assert list(row["evidence"]) == [s.packet(m) for m in (*opened, *late)]
    assert "txn (3, 42) (timeout 10 s)" in row["summary"]
    assert "answered InvalidTxnStatus" in row["summary"]


def test_end_txn_before_the_ttl_is_no_finding(tmp_path: Path) -> None:
    s = _scene([(0.5, tc_connect(1)), (1.0, new_txn(2)), (10.9, end_txn(3))], end=30.0)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_a_transaction_open_past_its_ttl_at_the_capture_end(tmp_path: Path) -> None:
    opened = new_txn(2)
    s = _scene([(0.5, tc_connect(1)), (1.0, opened)], end=20.0)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.TXN_TIMEOUT and row["count"] == 1
    assert abs(row["value"] - (20.0 - 1.01)) < 1e-6
    assert list(row["evidence"]) == [s.packet(m) for m in opened]
    assert "still open at the capture's end" in row["summary"]


def test_a_capture_ending_before_the_ttl_cannot_tell(tmp_path: Path) -> None:
    s = _scene([(0.5, tc_connect(1)), (1.0, new_txn(2))], end=10.5)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_without_a_ttl_the_client_default_applies(tmp_path: Path) -> None:
    s = _scene([(0.5, tc_connect(1)), (1.0, new_txn(2, ttl_ms=None))], end=30.0)
    path = s.write(tmp_path / "c.pcap")
    assert findings(path) == []  # 29 s open: within the default 60 s
    (row,) = findings(path, Thresholds(txn_timeout=20.0))
    assert row["code"] == F.TXN_TIMEOUT and "(timeout 20 s)" in row["summary"]
