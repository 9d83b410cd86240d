"""`pulsar-dissect live -i lo` on Apache's own broker: the frames it prints as they pass are
the official client's record.

Input:  the session's Apache broker (tests/support/apache), the sniffer as a subprocess on
        its port (`live -i lo --port P --format jsonl`), and the official Python client
        producing, consuming and acknowledging twelve messages (run_scenario: its
        ClientRecorder manifest is the record: every message sent with the id the broker
        gave back, every message received, every acknowledgement).
Output: assertions that the live rows say what the client recorded, and what the Java
        broker does that pulsar-lite does not (its MESSAGE frames carry the stored entry's
        checksum and the broker entry metadata its configuration exposes).
Rule:   event-driven: the sniffer is listening before the client starts (Live waits for its
        "listening on"); it is stopped once it has printed the row of every connection it
        printed frames of (a conversation's row comes when its FIN is seen); the waits are
        bounds on a hang, never on speed. Nothing expected comes from our own output.
"""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import pytest

from tests.support.apache.broker import ApacheBroker
from tests.support.live import Live
from tests.support.peers import run_scenario

pytestmark = [pytest.mark.apache, pytest.mark.peers, pytest.mark.capture]

MESSAGES = 12
#: A bound on a hang (the client's closing FIN is printed well before), not on speed.
ROWS_TIMEOUT = 120.0
C2B, B2C = "client_to_broker", "broker_to_client"


def _every_connection_ended(live: Live) -> bool:
    """Whether the sniffer printed a conversation row for every connection it printed
    frames of (and printed some)."""
    rows = live.rows()
    framed = {r["conn_id"] for r in rows if r["table"] == "frames"}
    ended = {r["conn_id"] for r in rows if r["table"] == "conversations"}
    return bool(framed) and framed <= ended


@pytest.fixture(scope="module")
def run(apache_broker: ApacheBroker) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """(the client's manifest, the rows `live` printed, its exit code)."""
    port = str(apache_broker.port)
    live = Live("-i", "lo", "--port", port, "--format", "jsonl")
    try:
        manifest = run_scenario(apache_broker.url, messages=MESSAGES, batching=False)
        live.wait_until(
            lambda: _every_connection_ended(live), "a row for every connection", ROWS_TIMEOUT
        )
    finally:
        rc = live.stop(signal.SIGINT)
    assert rc == 0, live.stderr
    return manifest, live.rows(), apache_broker.port


def _ids(entries: list[dict[str, Any]]) -> Counter[tuple[int, int]]:
    return Counter((e["message_id"]["ledger_id"], e["message_id"]["entry_id"]) for e in entries)


def test_live_frames_are_the_clients_record(run: tuple[dict[str, Any], Any, int]) -> None:
    manifest, rows, port = run
    frames = [r for r in rows if r["table"] == "frames"]
    commands = Counter((f["direction"], f["command"]) for f in frames)
    sent, received = manifest["sent"], manifest["received"]
    assert len(sent) == MESSAGES and all(s["result"] == "Ok" for s in sent)
    conversations = [r for r in rows if r["table"] == "conversations"]
    assert commands[C2B, "CONNECT"] == commands[B2C, "CONNECTED"] == len(conversations) >= 1
    assert all(c["ended"] == "fin" and c["broker_port"] == port for c in conversations)
    assert commands[C2B, "PRODUCER"] == manifest["producers_created"] == 1
    assert commands[C2B, "SUBSCRIBE"] == manifest["consumers_created"] == 1
    assert commands[C2B, "CLOSE_PRODUCER"] == commands[C2B, "CLOSE_CONSUMER"] == 1
    assert commands[C2B, "SEND"] == commands[B2C, "SEND_RECEIPT"] == MESSAGES
    assert all(f["complete"] for f in frames)
    # the ids the broker gave each SEND (the client's receipts) and the entries it delivered
    # (each message received, a redelivery as often as the client received it)
    receipts = [f for f in frames if f["command"] == "SEND_RECEIPT"]
    assert Counter((f["ledger_id"], f["entry_id"]) for f in receipts) == _ids(sent)
    delivered = [f for f in frames if f["command"] == "MESSAGE"]
    assert Counter((f["ledger_id"], f["entry_id"]) for f in delivered) == _ids(received)
    # every message received was acknowledged (grouped by the client: count the ids)
    acked = sum(f["num_messages"] for f in frames if f["command"] == "ACK")
    assert acked == len(manifest["acks"]) == len(received)


def test_the_java_broker_checksums_and_stamps_every_message(
    run: tuple[dict[str, Any], Any, int],
) -> None:
    """Unlike pulsar-lite (no checksum, no entry metadata: docs of the peers), Apache's
    broker delivers the stored entry with the producer's CRC32C and, as its configuration
    exposes it (tests/support/apache/broker.py), the broker entry metadata: the index
    counts the topic's entries from 0, in the order the client's receipts gave them."""
    manifest, rows, _ = run
    frames = [r for r in rows if r["table"] == "frames"]
    checked = [f for f in frames if f["command"] in ("SEND", "MESSAGE")]
    assert {f["checksum"] for f in checked} == {"valid"}
    delivered = [f for f in frames if f["command"] == "MESSAGE"]
    assert all(f["broker_entry_timestamp"] is not None for f in delivered)
    order = sorted(_ids(manifest["sent"]))  # one entry per message: no batching
    index = {(f["ledger_id"], f["entry_id"]): f["broker_entry_index"] for f in delivered}
    assert [index[i] for i in order] == list(range(MESSAGES))


def test_live_rows_name_the_clients_topic(run: tuple[dict[str, Any], Any, int]) -> None:
    manifest, rows, _ = run
    entities = {e["kind"]: e for e in rows if e["table"] == "entities"}
    assert entities["producer"]["topic"] == entities["consumer"]["topic"] == manifest["topic"]
    assert entities["producer"]["sent"] == MESSAGES
