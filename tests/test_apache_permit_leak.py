"""flow.permit_leak against Apache's broker and the official Java client (4.0.0): a batch
corrupted in flight, discarded by the client, leaks permits; the same run intact does not.

Input:  two runs of tests/support/apache/LeakClient.java (a Shared consumer with a receiver
        queue of QUEUE, acknowledging each message at once; BATCHES batches of BATCH_SIZE
        messages, then SINGLES single ones) through tests/support/apache/corrupt.py's proxy,
        under tcpdump on the proxy's port (the client's side of it): one with no frame
        corrupted, one with the first MESSAGE corrupted (the first batch: the consumer
        subscribed before anything was sent).
Output: assertions against the client's record and the proxy's: the run intact delivered
        every message and raises no finding at all (Apache's Shared dispatch sends more
        messages than a small queue's permits, but no more MESSAGE commands: no
        flow.overshoot); in the other, the
        client never received the corrupted batch's BATCH_SIZE messages (it discarded
        them: ACK validation_error ChecksumMismatch) and its consumer leaked permits: at
        least 1, at most BATCH_SIZE - 1 (the Java client returns 1 permit for the batch,
        ConsumerImpl's discardCorruptedMessage; apache/pulsar#26336), the corrupted
        MESSAGE and its discard in the evidence.
Rule:   expected values come from the records (what the client sent and received, which
        frame the proxy corrupted), never from our tables, which only locate packets.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import dissector
from dissector.findings import FindingCode as F
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.client import run_java
from tests.support.apache.corrupt import CorruptingProxy
from tests.support.capture import Tcpdump, wait_closed

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

SOURCE = Path(__file__).parent / "support" / "apache" / "LeakClient.java"
QUEUE, BATCHES, BATCH_SIZE, SINGLES = 10, 4, 5, 40


class Run:
    def __init__(self, cap: Path, record: dict[str, Any], corrupted: list[tuple[int, int]]):
        self.cap, self.record, self.corrupted = cap, record, corrupted
        self.tables = dissector.read_capture(cap, tables=["findings", "frames"])

    @property
    def findings(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.tables.arrow["findings"].to_pylist()
        return rows


def _run(broker: ApacheBroker, folder: Path, corrupt: int) -> Run:
    cap = folder / f"leak-{corrupt}.pcap"
    topic = f"persistent://public/default/leak-{uuid.uuid4().hex[:8]}"
    proxy = CorruptingProxy(broker.port, frames=corrupt)
    with proxy:
        with Tcpdump(cap, f"tcp port {proxy.port}"):
            args = [proxy.url, topic, "leak-sub", str(BATCHES), str(BATCH_SIZE)]
            record = run_java(SOURCE, [*args, str(SINGLES), str(QUEUE)])
            assert wait_closed(cap, (proxy.port,), timeout=120.0), "a connection did not end"
        return Run(cap, record, list(proxy.corrupted))


@pytest.fixture(scope="module")
def intact(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(apache_broker, tmp_path_factory.mktemp("apache-leak"), 0)


@pytest.fixture(scope="module")
def corrupted(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(apache_broker, tmp_path_factory.mktemp("apache-leak"), 1)


def _ids(entries: list[dict[str, Any]]) -> set[tuple[int, int, int | None]]:
    return {
        (e["message_id"]["ledger_id"], e["message_id"]["entry_id"], e["message_id"]["batch_index"])
        for e in entries
    }


def test_the_intact_run_delivers_everything_and_leaks_nothing(intact: Run) -> None:
    assert intact.corrupted == []
    assert _ids(intact.record["received"]) == _ids(intact.record["sent"])
    assert len(intact.record["sent"]) == BATCHES * BATCH_SIZE + SINGLES
    # no finding: no leak, and the broker's batches beyond a Shared consumer's permits
    # (as many batches as permits) are no flow.overshoot
    assert [r["code"] for r in intact.findings] == []
    # the rule had windows to judge: the client returned permits again and again
    frames = intact.tables.frames
    assert (frames["command"] == "FLOW").sum() >= (BATCHES * BATCH_SIZE + SINGLES) // QUEUE


def test_a_batch_corrupted_in_flight_leaks_permits(corrupted: Run) -> None:
    sent, received = corrupted.record["sent"], corrupted.record["received"]
    ((ledger, entry),) = corrupted.corrupted
    lost = {i for i in _ids(sent) if i[:2] == (ledger, entry)}
    assert len(lost) == BATCH_SIZE  # the proxy corrupted the first batch
    assert _ids(received) == _ids(sent) - lost  # the client discarded it, and only it
    rows = {r["code"]: r for r in corrupted.findings}
    row = rows[F.FLOW_PERMIT_LEAK]
    assert 1 <= row["value"] <= BATCH_SIZE - 1 and row["unit"] == "permits"
    assert f"1 batch of {BATCH_SIZE} messages" in row["summary"]
    assert "ChecksumMismatch 1" in row["summary"]
    frames = corrupted.tables.frames
    corrupt = frames[
        (frames["command"] == "MESSAGE")
        & (frames["ledger_id"] == ledger)
        & (frames["entry_id"] == entry)
    ]
    assert int(corrupt["last_packet"].iloc[0]) in row["evidence"]
    # the discard is a finding of its own, and so is the checksum the client saw fail
    assert set(rows) == {
        F.FLOW_PERMIT_LEAK,
        F.CONSUMER_DISCARDED_CORRUPT,
        F.CHECKSUM_MISMATCH_HOP,
    }
