"""A small maxMessageSize on Apache Pulsar's own broker: chunking, and the client's refusal.

Truth: the broker's setting (secure.MAX_MESSAGE_SIZE, written into its standalone.conf) and
the Java client's record (SecureClient.java, mode chunk): the sha256 and size of the
CHUNK_BYTES message a chunking producer sent, the message id and sha256 the consumer got,
and the exception a producer without chunking raised for the same message (client-side:
nothing of it may reach the wire).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import dissector
from tests.support.apache.secure import MAX_MESSAGE_SIZE, SecureBroker, captured

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

Run = tuple[Path, dict[str, Any], dissector.Capture]


@pytest.fixture(scope="module")
def chunk(apache_secure_broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    broker = apache_secure_broker
    assert f"maxMessageSize={MAX_MESSAGE_SIZE}\n" in broker.config_text()
    cap = tmp_path_factory.mktemp("oversize") / "chunk.pcap"
    topic = f"persistent://public/default/chunk-{uuid.uuid4().hex[:8]}"
    record = captured(cap, broker.port, lambda: broker.run_client("chunk", topic))
    return cap, record, dissector.read_capture(cap, ports=[broker.port])


def test_connected_carries_the_brokers_max_message_size(chunk: Run) -> None:
    _, _, capture = chunk
    assert list(capture.conversations.max_message_size) == [MAX_MESSAGE_SIZE]


def test_the_chunked_message_is_reassembled_as_the_client_sent_it(chunk: Run) -> None:
    _, record, capture = chunk
    (sent,) = [e for e in record["sent"] if e["producer"] == "chunking"]
    (got,) = record["received"]
    assert sent["size"] > MAX_MESSAGE_SIZE and got["sha256"] == sent["sha256"]
    messages = capture.messages
    for kind, entry in (("produced", sent), ("delivered", got)):
        (row,) = messages[messages.kind == kind].to_dict("records")
        assert row["chunked"] and row["complete"], row
        assert (row["payload_sha256"], row["payload_size"]) == (entry["sha256"], entry["size"])
        assert row["num_chunks"] * MAX_MESSAGE_SIZE >= entry["size"]
    delivered = messages[messages.kind == "delivered"].iloc[0]
    last = got["message_id"]  # the Java client's id of a chunked message: its last chunk's
    assert (delivered.ledger_id, delivered.entry_id) in {
        (last["ledger_id"], last["entry_id"]),
        (last["first_chunk"]["ledger_id"], last["first_chunk"]["entry_id"]),
    }
    frames = capture.frames
    sends = frames[frames.command == "SEND"]
    assert len(sends) == delivered.num_chunks
    assert (sends.payload_size <= MAX_MESSAGE_SIZE).all()  # each chunk within the limit
    # each chunk within the limit, the producer without chunking refused by its own client
    # (nothing on the wire): no finding at all (tests/test_diagnose_no_false_alarm.py)
    assert capture.findings.empty, capture.findings.to_dict("records")


def test_the_unchunked_producer_is_refused_by_its_client_and_sends_nothing(chunk: Run) -> None:
    _, record, capture = chunk
    (attempt,) = record["attempts"]
    assert attempt["what"] == "unchunked send" and not attempt["ok"]
    assert attempt["exception"].endswith("InvalidMessageException")
    assert str(MAX_MESSAGE_SIZE) in attempt["message"]
    entities = capture.entities
    (unchunked,) = entities[entities.name == "unchunked"].to_dict("records")
    assert unchunked["sent"] == 0  # created, and never sent
    frames = capture.frames
    sends = frames[(frames.command == "SEND") & (frames.producer_id == unchunked["entity_id"])]
    assert sends.empty
