"""The Go client (apache/pulsar-client-go) against pulsar-lite: it cannot consume from it.

pulsar-lite's MESSAGE frames carry no magic 0x0e01 and no CRC32C (docs/development.md, "The
Go peer"). The spec's frame table calls both required, but the Java client (Commands.
hasChecksum) and the C++ one (the Python client's tests here) consume such frames; the Go
client requires them (pulsar/internal/commands.go, readChecksum): it discards every message, logs
"Discarding corrupted message" with the id, and acknowledges it with validation_error
ChecksumMismatch. Its record (tests/support/gopeer/main.go) says so: what it sent, with the
ids lite gave back, nothing received, and each discarded id with its reason (read from the
client's log, an event: the run ends once every entry sent is received or discarded). So
the plain scenario is not run over both brokers; this test holds what happens instead.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dissector
from dissector.findings import FindingCode
from tests.support.capture import Tcpdump, wait_closed
from tests.support.gopeer.run import run_go
from tests.support.peers import PulsarLite

pytestmark = [pytest.mark.apache, pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]

COUNT = 4

Run = tuple[Path, dict[str, Any], dissector.Capture]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """(capture, the Go client's record, our tables of the capture)."""
    cap = tmp_path_factory.mktemp("go-lite") / "go_lite.pcap"
    topic = f"persistent://public/default/go-lite-{uuid.uuid4().hex[:8]}"
    with PulsarLite() as lite, Tcpdump(cap, f"tcp port {lite.port}"):
        record = run_go(lite.url, topic, "go-sub", scenario="plain", count=COUNT)
        assert wait_closed(cap, (lite.port,), timeout=120.0), "a connection did not end"
        port = lite.port
    return cap, record, dissector.read_capture(cap, ports=[port], fields=True)


def _frames(capture: dissector.Capture, topic: str, command: str) -> list[dict[str, Any]]:
    frames = capture.frames
    rows: list[dict[str, Any]] = (
        frames[(frames.topic == topic) & (frames.command == command)]
        .astype(object)
        .to_dict("records")
    )
    return rows


def _sent_ids(record: dict[str, Any]) -> Counter[tuple[int, int]]:
    return Counter(
        (e["message_id"]["ledger_id"], e["message_id"]["entry_id"]) for e in record["sent"]
    )


def test_the_go_client_discards_every_message_of_pulsar_lite(run: Run) -> None:
    _, record, _ = run
    assert len(record["sent"]) == COUNT and record["received"] == []
    discarded = Counter(
        (d["message_id"]["ledger_id"], d["message_id"]["entry_id"]) for d in record["discarded"]
    )
    assert discarded == _sent_ids(record)
    assert {d["validation_error"] for d in record["discarded"]} == {"ChecksumMismatch"}


def test_sends_and_receipts_are_the_clients(run: Run) -> None:
    _, record, capture = run
    sends = _frames(capture, record["topic"], "SEND")
    assert Counter(r["sequence_id"] for r in sends) == Counter(
        e["sequence_id"] for e in record["sent"]
    )
    assert {r["checksum"] for r in sends} == {"valid"}  # the Go client always sends one
    receipts = _frames(capture, record["topic"], "SEND_RECEIPT")
    assert Counter((r["ledger_id"], r["entry_id"]) for r in receipts) == _sent_ids(record)


def test_each_message_without_checksum_is_acked_as_a_checksum_mismatch(run: Run) -> None:
    """Lite's MESSAGE frames have no checksum; the Go client's ACKs name the same ids with the
    validation error its record gives."""
    _, record, capture = run
    messages = _frames(capture, record["topic"], "MESSAGE")
    assert Counter((r["ledger_id"], r["entry_id"]) for r in messages) == _sent_ids(record)
    assert {r["checksum"] for r in messages} == {"absent"}
    acked: Counter[tuple[int, int]] = Counter()
    for row in _frames(capture, record["topic"], "ACK"):
        fields = json.loads(row["fields"])
        assert fields["validation_error"] == "ChecksumMismatch", fields
        acked.update((m["ledgerId"], m["entryId"]) for m in fields["message_id"])
    assert acked == _sent_ids(record)


def test_the_discards_are_a_finding_of_the_consumer(run: Run) -> None:
    """Every message the Go client's record says it discarded is counted by
    consumer.discarded_corrupt, with the validation error the record gives."""
    _, record, capture = run
    findings = capture.findings
    code = FindingCode.CONSUMER_DISCARDED_CORRUPT
    # the discards and nothing else: every SEND was receipted (the record's ids) and every
    # MESSAGE acknowledged, as discarded (tests/test_diagnose_no_false_alarm.py)
    assert set(findings.code) == {code}, findings.to_dict("records")
    rows = findings[findings.code == code].astype(object).to_dict("records")
    assert {r["topic"] for r in rows} == {record["topic"]}
    assert sum(r["count"] for r in rows) == len(record["discarded"]) == COUNT
    kinds = Counter(d["validation_error"] for d in record["discarded"])
    for r in rows:
        assert r["severity"] == "error" and "(sub go-sub)" in r["entity"]
        assert all(f"{kind} " in r["summary"] for kind in kinds), r["summary"]
    evidence = {p for r in rows for p in r["evidence"]}
    for command in ("MESSAGE", "ACK"):  # the ACKs and what they discarded: 2 * COUNT <= 10
        assert {f["last_packet"] for f in _frames(capture, record["topic"], command)} <= evidence
