"""Transactions on Apache Pulsar's own broker (transactionCoordinatorEnabled, standalone).

Truth: the Java client's record (SecureClient.java, mode txn): the TxnID (most and least
bits) of each transaction and how it ended (txn 1 committed: two messages sent in it; txn 2
aborted: the first message acknowledged in it and a third sent in it), with the message
ids. The frames table has no txnid columns: the txnid is read from its `fields` column
(every field of the command, as JSON), the documented way to see any field.
Rules checked: TC_CLIENT_CONNECT_REQUEST, NEW_TXN, ADD_PARTITION_TO_TXN,
ADD_SUBSCRIPTION_TO_TXN, END_TXN and ACK with a request_id are paired with their responses
by request_id (the spec: every one of these carries request_id, their responses echo it);
each SEND and ACK carries its transaction's bits.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dissector
from tests.support.apache.secure import SecureBroker, captured

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

Run = tuple[Path, dict[str, Any], dissector.Capture]
TXN_PAIRS = {
    "TC_CLIENT_CONNECT_REQUEST": "TC_CLIENT_CONNECT_RESPONSE",
    "NEW_TXN": "NEW_TXN_RESPONSE",
    "ADD_PARTITION_TO_TXN": "ADD_PARTITION_TO_TXN_RESPONSE",
    "ADD_SUBSCRIPTION_TO_TXN": "ADD_SUBSCRIPTION_TO_TXN_RESPONSE",
    "END_TXN": "END_TXN_RESPONSE",
}


@pytest.fixture(scope="module")
def txn(apache_secure_broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    broker = apache_secure_broker
    cap = tmp_path_factory.mktemp("txn") / "txn.pcap"
    topic = f"persistent://public/default/txn-{uuid.uuid4().hex[:8]}"
    record = captured(cap, broker.port, lambda: broker.run_client("txn", topic))
    return cap, record, dissector.read_capture(cap, ports=[broker.port], fields=True)


def _bits(fields: dict[str, Any]) -> tuple[int, int]:
    return (fields.get("txnid_most_bits", 0), fields.get("txnid_least_bits", 0))


def _txn(entry: dict[str, Any]) -> tuple[int, int]:
    return (entry["most_bits"], entry["least_bits"])


def _commands(capture: dissector.Capture, *names: str) -> list[tuple[str, dict[str, Any]]]:
    frames = capture.frames[capture.frames.command.isin(names)]
    return [(c, json.loads(f)) for c, f in zip(frames.command, frames.fields, strict=True)]


def test_every_transaction_request_is_paired_with_its_response(txn: Run) -> None:
    _, record, capture = txn
    timeline = capture.timeline
    rows = timeline[timeline.request_command.isin(list(TXN_PAIRS))]
    assert set(zip(rows.request_command, rows.response_command, strict=True)) <= set(
        TXN_PAIRS.items()
    )
    assert set(rows.outcome) == {"success"} and rows.request_id.notna().all()
    counts = Counter(rows.request_command)
    assert counts["TC_CLIENT_CONNECT_REQUEST"] == 1
    assert counts["NEW_TXN"] == counts["END_TXN"] == len(record["txns"])
    assert counts["ADD_SUBSCRIPTION_TO_TXN"] == sum(1 for a in record["acks"] if a["txn"])
    # one partition added per transaction that sent (one topic)
    assert counts["ADD_PARTITION_TO_TXN"] == len({_txn(e["txn"]) for e in record["sent"]})
    # the transactional ACK asks for a receipt: paired by request_id too
    acks = timeline[(timeline.request_command == "ACK") & timeline.request_id.notna()]
    assert list(acks.response_command) == ["ACK_RESPONSE"] * len(acks) and len(acks) == 1


def test_new_txn_and_end_txn_carry_the_clients_txn_ids(txn: Run) -> None:
    _, record, capture = txn
    made = [_bits(f) for _, f in _commands(capture, "NEW_TXN_RESPONSE")]
    assert made == [_txn(t) for t in record["txns"]]
    ended = [(_bits(f), f["txn_action"]) for _, f in _commands(capture, "END_TXN")]
    actions = {"committed": "COMMIT", "aborted": "ABORT"}
    assert ended == [(_txn(t), actions[t["outcome"]]) for t in record["txns"]]


def test_sends_and_acks_carry_their_transaction(txn: Run) -> None:
    _, record, capture = txn
    sends = [(f["sequence_id"], _bits(f)) for _, f in _commands(capture, "SEND")]
    assert sends == [(e["sequence_id"], _txn(e["txn"])) for e in record["sent"]]
    acks = [(c, f) for c, f in _commands(capture, "ACK") if "txnid_least_bits" in f]
    assert [
        (_bits(f), [(m["ledgerId"], m["entryId"]) for m in f["message_id"]]) for _, f in acks
    ] == [
        (_txn(a["txn"]), [(a["message_id"]["ledger_id"], a["message_id"]["entry_id"])])
        for a in record["acks"]
        if a["txn"]
    ]
    receipts = capture.frames[capture.frames.command == "SEND_RECEIPT"]
    assert list(zip(receipts.ledger_id, receipts.entry_id, strict=True)) == [
        (e["message_id"]["ledger_id"], e["message_id"]["entry_id"]) for e in record["sent"]
    ]


def test_an_aborted_transactional_ack_is_no_ack(txn: Run) -> None:
    """The broker redelivers what an aborted transaction acknowledged: expected, not a fault
    (Apache 4.0 redelivers the consumer's unacknowledged messages at the abort)."""
    _, record, capture = txn
    aborted = [
        a
        for a in record["acks"]
        if a["txn"]
        and _txn(a["txn"]) in {_txn(t) for t in record["txns"] if t["outcome"] == "aborted"}
    ]
    assert aborted
    # no finding at all: a committed and an aborted transaction, each ended by the client
    # (its record), are no txn.* fault either (tests/test_diagnose_no_false_alarm.py)
    assert capture.findings.empty, capture.findings.to_dict("records")
