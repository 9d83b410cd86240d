"""reconnect.retry_loop against Apache's broker: a client pinned to it, never looking up.

Apache's broker serves a topic only once it owns the topic's namespace bundle, which a
LOOKUP makes it take; a PRODUCER for a topic of a namespace no lookup has brought to it is
answered ERROR ServiceNotReady ("Please redo the lookup"). Our raw client plays the client of
apache/pulsar#25997 (pinned to a broker URL): on one namespace it asks for the same PRODUCER
on RETRIES new connections in a row, never looking up (a retry loop); on another it asks
RETRIES - 1 times, then looks the topic up and is served (no loop: a near miss).
The raw client's own record (every frame it sent and received, read with protobuf's parser
alone) is the truth: which ERRORs it received, on which connection.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import dissector
from dissector.findings import FindingCode, Thresholds
from tests.support.apache.admin import admin
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.raw import RawClient
from tests.support.apache.secure import captured
from tests.support.peers import LOOPBACK

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

RETRIES = Thresholds().retry_refusals


def _namespace(broker: ApacheBroker, tag: str) -> str:
    namespace = f"public/{tag}-{uuid.uuid4().hex[:8]}"
    admin(broker, "PUT", f"/admin/v2/namespaces/{namespace}")  # made, not yet owned
    return f"persistent://{namespace}/t"


def _refused(port: int, topic: str, times: int) -> list[dict[str, Any]]:
    """`times` connections, each asking for the PRODUCER once; their records."""
    records = []
    for i in range(times):
        with RawClient(LOOPBACK, port) as client:
            client.send("CONNECT", client_version="raw-pinned", protocol_version=21)
            client.expect("CONNECTED")
            client.send(
                "PRODUCER", topic=topic, producer_id=1, request_id=i + 1, producer_name="pinned"
            )
            client.expect("ERROR")
        records.append(client.record)
    return records


@pytest.fixture(scope="module")
def run(
    apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], list[dict[str, Any]], str, str]:
    """(our tables' findings, the refusals' records, the pinned topic, the near miss's)."""
    pinned, looked = _namespace(apache_broker, "pinned"), _namespace(apache_broker, "looked")
    cap = tmp_path_factory.mktemp("retry-loop") / "retry_loop.pcap"

    def talk() -> list[dict[str, Any]]:
        records = _refused(apache_broker.port, pinned, RETRIES)
        records += _refused(apache_broker.port, looked, RETRIES - 1)
        with RawClient(LOOPBACK, apache_broker.port) as client:
            client.send("CONNECT", client_version="raw-looked", protocol_version=21)
            client.expect("CONNECTED")
            client.send("LOOKUP", topic=looked, request_id=1)
            client.expect("LOOKUP_RESPONSE")
            client.send(
                "PRODUCER", topic=looked, producer_id=1, request_id=2, producer_name="pinned"
            )
            client.expect("PRODUCER_SUCCESS")
        return records

    records = captured(cap, apache_broker.port, talk)
    capture = dissector.read_capture(cap, ports=[apache_broker.port])
    return capture.findings.to_dict("records"), records, pinned, looked


def _errors(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        f["fields"]
        for r in records
        for f in r["frames"]
        if f["direction"] == "received" and f["command"] == "ERROR"
    ]


def test_the_broker_refused_every_pinned_producer(run: Any) -> None:
    _, records, _, _ = run
    errors = _errors(records)
    assert [e["error"] for e in errors] == ["ServiceNotReady"] * (2 * RETRIES - 1)


def test_the_pinned_client_is_a_retry_loop_and_the_one_that_looked_up_is_not(run: Any) -> None:
    findings, records, pinned, _ = run
    assert [(f["code"], f["topic"], f["count"]) for f in findings] == [
        (FindingCode.RECONNECT_RETRY_LOOP, pinned, RETRIES)
    ]
    (row,) = findings
    assert row["entity"] == "producer pinned"
    assert row["client_port"] == records[RETRIES - 1]["local_port"]  # the last refused
    summary = row["summary"]
    assert "ServiceNotReady" in summary and f"{RETRIES} times" in summary, summary
    assert f"{RETRIES} connections" in summary, summary
    assert len(row["evidence"]) == RETRIES
