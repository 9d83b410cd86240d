"""Apache Pulsar's own broker (4.0, standalone) and its official Java client on the wire.

The Java client's own record (tests/support/apache/ApacheClient.java) is the truth: the
sequence id and value of every message it sent, and the message id, value, broker publish
time and broker index (the broker entry metadata, as Message.getBrokerPublishTime() and
Message.getIndex() give them) of every message it received and acknowledged. The capture
is tcpdump's on lo, complete when every connection's end is in the file (an event). The
run: an Exclusive subscription, SINGLES messages sent one by one without batching, then
BATCHES batches of BATCH_SIZE messages; every one received and acknowledged.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dissector
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.client import run_client
from tests.support.capture import Tcpdump, wait_closed
from tests.support.cli import cli

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

SINGLES, BATCHES, BATCH_SIZE = 6, 3, 4


@pytest.fixture(scope="module")
def run(
    apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any], dissector.Capture]:
    """(capture, the Java client's record, our tables of the capture)."""
    cap = tmp_path_factory.mktemp("apache") / "produce_consume.pcap"
    topic = f"persistent://public/default/apache-{uuid.uuid4().hex[:8]}"
    port = apache_broker.port
    with Tcpdump(cap, f"tcp port {port}"):  # returns once tcpdump is listening
        record = run_client(
            apache_broker.url,
            topic,
            "apache-sub",
            singles=SINGLES,
            batches=BATCHES,
            batch_size=BATCH_SIZE,
        )
        assert wait_closed(cap, (port,), timeout=120.0), "a connection did not end"
    return cap, record, dissector.read_capture(cap, ports=[port])


def _sha(hex_value: str) -> str:
    return hashlib.sha256(bytes.fromhex(hex_value)).hexdigest()


def _id(mid: dict[str, Any]) -> tuple[int, int, int | None]:
    return (mid["ledger_id"], mid["entry_id"], mid["batch_index"])


def _rows(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows, nulls as None."""
    rows: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return rows


def test_the_record_is_whole(run: tuple[Path, dict[str, Any], dissector.Capture]) -> None:
    _, record, _ = run
    total = SINGLES + BATCHES * BATCH_SIZE
    assert len(record["sent"]) == len(record["received"]) == total
    assert sorted(e["value_hex"] for e in record["sent"]) == sorted(
        e["value_hex"] for e in record["received"]
    )
    assert all(e["broker_publish_time"] is not None for e in record["received"])
    assert all(e["index"] is not None for e in record["received"])


def test_every_send_is_the_clients(run: tuple[Path, dict[str, Any], dissector.Capture]) -> None:
    _, record, capture = run
    rows = _rows(capture.messages[capture.messages.kind == "produced"])
    ours = Counter((r["producer_name"], r["sequence_id"], r["payload_sha256"]) for r in rows)
    theirs = Counter(
        (e["producer"], e["sequence_id"], _sha(e["value_hex"])) for e in record["sent"]
    )
    assert ours == theirs
    for row in rows:
        assert row["topic"] == record["topic"] and row["complete"], row


def test_every_message_is_the_clients_with_broker_entry_metadata(
    run: tuple[Path, dict[str, Any], dissector.Capture],
) -> None:
    _, record, capture = run
    rows = _rows(capture.messages[capture.messages.kind == "delivered"])
    expected = {_id(e["message_id"]): e for e in record["received"]}
    assert Counter((r["ledger_id"], r["entry_id"], r["batch_index"]) for r in rows) == Counter(
        list(expected)
    )
    for row in rows:
        entry = expected[(row["ledger_id"], row["entry_id"], row["batch_index"])]
        seen = {
            "sha": row["payload_sha256"],
            "sequence_id": row["sequence_id"],
            "producer": row["producer_name"],
            "properties": dict(row["properties"] or {}),
            "broker_ms": int(row["broker_entry_timestamp"].timestamp() * 1000),
            "index": row["broker_entry_index"],
            "redelivery_count": row["redelivery_count"] or 0,
        }
        assert seen == {
            "sha": _sha(entry["value_hex"]),
            "sequence_id": entry["sequence_id"],
            "producer": entry["producer"],
            "properties": entry["properties"],
            "broker_ms": entry["broker_publish_time"],
            "index": entry["index"],
            "redelivery_count": entry["redelivery_count"],
        }, row


def test_every_message_frame_has_a_valid_checksum(
    run: tuple[Path, dict[str, Any], dissector.Capture],
) -> None:
    _, record, capture = run
    frames = capture.frames
    messages = frames[frames.command == "MESSAGE"]
    entries = {
        (e["message_id"]["ledger_id"], e["message_id"]["entry_id"]) for e in record["received"]
    }
    assert len(messages) == len(entries)
    assert set(messages.checksum.astype(str)) == {"valid"}
    assert messages.broker_entry_index.notna().all()


def test_one_journey_per_message_acked(
    run: tuple[Path, dict[str, Any], dissector.Capture],
) -> None:
    _, record, capture = run
    rows = _rows(capture.journeys)
    got = Counter(
        (r["ledger_id"], r["entry_id"], r["batch_index"], r["subscription"], r["sequence_id"])
        for r in rows
    )
    want = Counter(
        (*_id(e["message_id"]), record["subscription"], e["sequence_id"])
        for e in record["received"]
    )
    assert got == want
    for row in rows:
        assert row["acked_ts"] is not None and row["send_ts"] is not None, row
        assert row["deliveries"] == 1 and row["redeliveries"] == 0, row


def test_a_healthy_run_has_no_anomaly_and_no_finding(
    run: tuple[Path, dict[str, Any], dissector.Capture],
) -> None:
    cap, record, capture = run
    assert _rows(capture.anomalies) == []
    assert _rows(capture.findings) == []
    port = str(capture.conversations.broker_port.iloc[0])
    done = cli("diagnose", str(cap), "--port", port, "--format", "json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["findings"], shown["connections"]) == (0, []), done.stdout
    # the clean bill: every SEND answered, one per entry the client's message ids name (a
    # batch is one entry), on its two producers; its one consumer's permits followed
    sends = shown["checked"]["sends"]
    entries = {(e["message_id"]["ledger_id"], e["message_id"]["entry_id"]) for e in record["sent"]}
    assert len(entries) == SINGLES + BATCHES
    assert (sends["count"], sends["failed"], sends["unknown"]) == (len(entries), 0, 0)
    assert sends["entities"] == len({e["producer"] for e in record["sent"]}) == 2
    assert shown["checked"]["permits"]["count"] == 1
    assert shown["checked"]["connections"]["unknown"] == shown["checked"]["bytes"]["unknown"] == 0
