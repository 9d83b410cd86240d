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
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dissector
from dissector.findings import FindingCode as F
from tests.support.apache.raw import RawClient
from tests.support.apache.secure import SecureBroker, captured
from tests.support.peers import LOOPBACK

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


def test_a_healthy_transaction_run_gives_no_transaction_finding(txn: Run) -> None:
    """Both transactions end (commit, abort) well within their 5-minute timeout: no txn.*."""
    codes = set(txn[2].findings.code)
    assert not {c for c in codes if c.startswith("txn.")}, txn[2].findings.to_dict("records")


# --------------------------------------------------------------------------- raw client

TTL_MS = 1000  # the transaction's txn_ttl_millis: the raw client outwaits it by construction
TC = 0  # the standalone broker's one transaction coordinator
NO_TC = 77  # a coordinator id that does not exist
UNKNOWN = (TC, 987_654_321)  # a transaction nobody opened
READY_TIMEOUT = 120.0  # bounds the wait for the coordinator (an event: its answer)
TC_TOPIC = f"persistent://pulsar/system/transaction_coordinator_assign-partition-{TC}"


def _fields(cmd: Any) -> dict[str, Any]:
    """A command's sub-message's fields set, as protobuf gives them (ints as ints)."""
    subs = [v for f, v in cmd.ListFields() if f.name != "type"]
    return {f.name: v for f, v in subs[0].ListFields()}


def _tc_connected(client: RawClient) -> int:
    """LOOKUP of the coordinator's topic (the broker then serves it, as the Java client
    has it do), then TC_CLIENT_CONNECT_REQUEST until the coordinator accepts it (it answers
    ServiceNotReady while its topic loads: asked again at once, each attempt waiting for
    the broker's answers); the next request id."""
    rid, deadline = 1, time.monotonic() + READY_TIMEOUT
    while True:
        client.send("LOOKUP", topic=TC_TOPIC, request_id=rid)
        client.expect("LOOKUP_RESPONSE")
        client.send("TC_CLIENT_CONNECT_REQUEST", request_id=rid + 1, tc_id=TC)
        rid += 2
        if "error" not in _fields(client.expect("TC_CLIENT_CONNECT_RESPONSE")):
            return rid
        assert time.monotonic() < deadline, "the transaction coordinator never got ready"


@pytest.fixture(scope="module")
def raw_txn(apache_secure_broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Two raw client connections (protocol 21). The first: TC_CLIENT_CONNECT until
    accepted; NEW_TXN with a TTL_MS timeout, and a second one never ended; then END_TXN
    (commit) of the first once its own clock says TTL_MS and a second more have passed since
    the first NEW_TXN_RESPONSE (the capture goes on past the second's too); END_TXN for a
    transaction nobody opened; NEW_TXN naming a coordinator that does not exist. The second:
    that NEW_TXN with no TC_CLIENT_CONNECT before. Their records: every frame sent and
    received."""
    broker = apache_secure_broker
    cap = tmp_path_factory.mktemp("txn") / "raw-txn.pcap"

    def run() -> list[dict[str, Any]]:
        with RawClient(LOOPBACK, broker.port) as client:
            client.connect("raw-txn", broker.super_token)
            rid = _tc_connected(client)
            client.send("NEW_TXN", request_id=rid, tc_id=TC, txn_ttl_millis=TTL_MS)
            made = _fields(client.expect("NEW_TXN_RESPONSE"))
            assert "error" not in made, made
            opened = time.monotonic()
            client.send("NEW_TXN", request_id=rid + 4, tc_id=TC, txn_ttl_millis=TTL_MS)
            assert "error" not in _fields(client.expect("NEW_TXN_RESPONSE"))  # left open
            while time.monotonic() - opened < TTL_MS / 1000 + 1.0:
                time.sleep(0.1)
            bits = {k: made.get(k, 0) for k in ("txnid_most_bits", "txnid_least_bits")}
            client.send("END_TXN", request_id=rid + 1, txn_action=0, **bits)
            client.expect("END_TXN_RESPONSE")
            most, least = UNKNOWN
            client.send(
                "END_TXN",
                request_id=rid + 2,
                txn_action=0,
                txnid_most_bits=most,
                txnid_least_bits=least,
            )
            client.expect("END_TXN_RESPONSE")
            client.send("NEW_TXN", request_id=rid + 3, tc_id=NO_TC, txn_ttl_millis=TTL_MS)
            client.expect("NEW_TXN_RESPONSE")
        with RawClient(LOOPBACK, broker.port) as other:
            other.connect("raw-txn-unconnected", broker.super_token)
            other.send("NEW_TXN", request_id=1, tc_id=NO_TC, txn_ttl_millis=TTL_MS)
            other.expect("NEW_TXN_RESPONSE")
        return [client.record, other.record]

    records = captured(cap, broker.port, run)
    return cap, {"records": records}, dissector.read_capture(cap, ports=[broker.port])


def _received(record: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [f["fields"] for f in record["frames"] if f["command"] == name]


def test_the_brokers_own_answers_make_the_transaction_findings(raw_txn: Run) -> None:
    _, record, capture = raw_txn
    first, second = record["records"]
    made, left, no_tc = [f for f in _received(first, "NEW_TXN_RESPONSE") if "error" not in f] + [
        f for f in _received(first, "NEW_TXN_RESPONSE") if "error" in f
    ]
    open_ident = (int(left.get("txnid_most_bits", 0)), int(left["txnid_least_bits"]))
    late, unknown = _received(first, "END_TXN_RESPONSE")
    (unconnected,) = _received(second, "NEW_TXN_RESPONSE")
    ident = (int(made.get("txnid_most_bits", 0)), int(made["txnid_least_bits"]))
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in capture.findings.to_dict("records"):
        rows.setdefault(row["code"], []).append(row)
    # what the broker answered, as the raw clients read it, decides what must be found
    ended = [
        (f"txn ({ident[0]}, {ident[1]})", late.get("error")),
        (f"txn ({UNKNOWN[0]}, {UNKNOWN[1]})", unknown.get("error")),
    ]
    refused = [(t, e) for t, e in ended if e in ("InvalidTxnStatus", "TransactionNotFound")]
    assert refused, (late, unknown)  # Apache refuses the END_TXN of an unknown txn at least
    (row,) = rows.pop(F.TXN_INVALID_STATUS)
    assert row["count"] == len(refused)
    for name, error in refused:
        assert f"END_TXN {name} ({error})" in row["summary"]
    # the first was ended after its timeout, the second never: both by construction
    (row,) = rows.pop(F.TXN_TIMEOUT)
    assert row["count"] == 2 and row["value"] > TTL_MS / 1000
    assert f"txn ({ident[0]}, {ident[1]}) (timeout {TTL_MS / 1000:g} s) ended" in row["summary"]
    if late.get("error"):
        assert f"answered {late['error']}" in row["summary"]
    still = f"txn ({open_ident[0]}, {open_ident[1]}) (timeout {TTL_MS / 1000:g} s) still open"
    assert still in row["summary"]
    # a coordinator that does not exist, with and without TC_CLIENT_CONNECT before
    assert no_tc["error"] == unconnected["error"] == "TransactionCoordinatorNotFound"
    connected, alone = sorted(rows.pop(F.TXN_COORDINATOR_NOT_FOUND), key=lambda r: r["conn_id"])
    assert connected["count"] == alone["count"] == 1
    assert "had sent TC_CLIENT_CONNECT_REQUEST before" in connected["summary"]
    assert "1 of them with no TC_CLIENT_CONNECT_REQUEST before" in alone["summary"]
    assert "protocol 21" in alone["summary"]
    conversations = capture.conversations
    port = dict(zip(conversations.conn_id, conversations.client_port, strict=True))
    assert [port[r["conn_id"]] for r in (connected, alone)] == [
        first["local_port"],
        second["local_port"],
    ]
    assert rows == {}, rows
