"""TLS on Apache Pulsar's own broker (its brokerServicePortTls, a certificate made per run).

Truth: a raw client of ours over Python's `ssl` (keylog_filename: the NSS key log) records
every frame it sent and received (protobuf's own parser, not ours) and its local port; the
official Java client (SecureClient.java, pulsar+ssl://, no key log) records its messages;
the test PKI says which certificate the broker serves. Our tables must decrypt the raw
client's session with its key log and show exactly its frames; the Java client's session,
without keys, is a TLS conversation reported as such and not decoded. The broker's own
client keeps a TLS connection of its own on that port (brokerClientTlsEnabled): it started
before the capture (no SYN in the file) and is told apart by that.
"""

from __future__ import annotations

import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector
from tests.support.apache.raw import RawClient
from tests.support.apache.secure import SecureBroker, captured
from tests.support.peers import LOOPBACK

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

PAYLOAD = b"hello over TLS from a raw client"
Run = tuple[Path, dict[str, Any], dissector.Capture]


def _ours(capture: dissector.Capture, table: pd.DataFrame, port: int) -> pd.DataFrame:
    """`table`'s rows of the connection from local port `port`."""
    conv = capture.conversations
    conn_ids = set(conv[conv.client_port == port].conn_id)
    assert len(conn_ids) == 1, conv
    return table[table.conn_id.isin(conn_ids)]


@pytest.fixture(scope="module")
def raw_tls(apache_secure_broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    broker = apache_secure_broker
    folder = tmp_path_factory.mktemp("tls")
    cap, keylog = folder / "raw.pcap", folder / "keys.log"
    topic = f"persistent://public/default/tls-raw-{uuid.uuid4().hex[:8]}"

    def run() -> dict[str, Any]:
        context = ssl.create_default_context(cafile=str(broker.pki.ca_path))
        context.keylog_filename = str(keylog)
        with RawClient(
            LOOPBACK, broker.tls_port, context=context, server_hostname=broker.pki.host
        ) as client:
            client.connect("raw-tls", broker.super_token)
            client.send("LOOKUP", topic=topic, request_id=1)  # the broker takes the topic on
            client.expect("LOOKUP_RESPONSE")
            client.send(
                "PRODUCER", topic=topic, producer_id=0, request_id=2, producer_name="raw-tls"
            )
            client.expect("PRODUCER_SUCCESS")
            meta = {
                "producer_name": "raw-tls",
                "sequence_id": 0,
                "publish_time": int(time.time() * 1000),
            }
            client.send(
                "SEND", producer_id=0, sequence_id=0, num_messages=1, metadata=meta, payload=PAYLOAD
            )
            client.expect("SEND_RECEIPT")
            client.send("CLOSE_PRODUCER", producer_id=0, request_id=3)
            client.expect("SUCCESS")
            tls = client.sock
            assert isinstance(tls, ssl.SSLSocket)
            info = {"tls_version": tls.version(), "cipher": tls.cipher()}
        return {**client.record, **info, "topic": topic}

    record = captured(cap, broker.tls_port, run)
    capture = dissector.read_capture(
        cap, ports=[broker.port], tls_ports=[broker.tls_port], tls_keylog=[keylog]
    )
    return cap, record, capture


def test_the_key_log_decrypts_exactly_what_the_raw_client_said(raw_tls: Run) -> None:
    _, record, capture = raw_tls
    frames = _ours(capture, capture.frames, record["local_port"])
    ours = [
        ("sent" if d == "client_to_broker" else "received", c)
        for d, c in zip(frames.direction, frames.command, strict=True)
    ]
    assert ours == [(f["direction"], f["command"]) for f in record["frames"]]
    receipt = next(f["fields"] for f in record["frames"] if f["command"] == "SEND_RECEIPT")
    row = frames[frames.command == "SEND_RECEIPT"].iloc[0]
    assert (row.ledger_id, row.entry_id) == (
        int(receipt["message_id"]["ledgerId"]),
        int(receipt["message_id"]["entryId"]),
    )
    assert set(frames.topic.dropna()) == {record["topic"]}
    messages = _ours(capture, capture.messages, record["local_port"])
    (produced,) = messages.payload_size.tolist()
    assert produced == len(PAYLOAD)
    timeline = _ours(capture, capture.timeline, record["local_port"])
    assert set(timeline.outcome) == {"success"} and len(timeline) == 5


def test_the_raw_session_is_reported_decrypted(raw_tls: Run, apache_secure_broker: Any) -> None:
    _, record, capture = raw_tls
    conv = _ours(capture, capture.conversations, record["local_port"]).iloc[0]
    assert bool(conv.encrypted) and bool(conv.tls_decrypted)
    assert conv.tls_version == record["tls_version"].replace("TLSv", "TLS ")
    assert record["tls_version"] == "TLSv1.3"  # whose suite names are IANA's, as ours
    assert conv.tls_cipher == record["cipher"][0]
    assert conv.tls_sni == apache_secure_broker.pki.host
    assert conv.auth_method == "token" and conv.client_version == "raw-tls"
    anomalies = _ours(capture, capture.anomalies, record["local_port"])
    assert anomalies.empty, anomalies.to_dict("records")


@pytest.fixture(scope="module")
def java_tls(apache_secure_broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    broker = apache_secure_broker
    cap = tmp_path_factory.mktemp("tls") / "java.pcap"
    topic = f"persistent://public/default/tls-java-{uuid.uuid4().hex[:8]}"
    record = captured(cap, broker.tls_port, lambda: broker.run_client("plain", topic, tls=True))
    capture = dissector.read_capture(cap, ports=[broker.port], tls_ports=[broker.tls_port])
    return cap, record, capture


def test_the_java_client_over_tls_without_keys_is_reported_not_decoded(java_tls: Run) -> None:
    _, record, capture = java_tls
    assert len(record["sent"]) == len(record["received"]) > 0  # it did talk, over TLS
    conv = capture.conversations
    ours = conv[conv.syn_seen.astype(bool)]  # the broker's own client's started before
    assert len(ours) == 1
    row = ours.iloc[0]
    assert bool(row.encrypted) and not bool(row.tls_decrypted)
    assert row.tls_version in ("TLS 1.2", "TLS 1.3") and row.ended == "fin"
    assert capture.frames.empty and capture.messages.empty
    codes = set(capture.anomalies[capture.anomalies.conn_id == row.conn_id].code)
    assert "pulsar.encrypted" in codes
    assert capture.findings.empty  # the right port for TLS: no wrong-protocol finding
