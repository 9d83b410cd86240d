"""Apache's broker stops dispatching to a consumer holding permits: the broker's own limit
(max_unacked_messages_per_consumer, a namespace policy) blocks a Shared consumer that never
acknowledges, while a producer on another connection keeps being receipted.

Our raw client (tests/support/apache/raw.py) speaks both connections, as no official client
sends CONSUMER_STATS (the Java client's stats are its own or the admin API's, over HTTP): a
producer publishes MAX_UNACKED messages; then a consumer subscribes from the earliest message
(Shared), grants PERMITS, receives them and never acknowledges; it asks the broker for its
CONSUMER_STATS until the broker says it is blocked; then the producer sends PUBLISHED more
messages, one every GAP seconds, each receipted, and the consumer asks once more. The raw
client's record (every frame it sent and received, read with protobuf's parser alone) is the
truth: the MESSAGEs it received, the permits it granted, the receipts after its last
MESSAGE, the broker's answers. The findings are read with dispatch_wait DISPATCH_WAIT, well
below the PUBLISHED * GAP seconds the scene waits by construction.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import dissector
from dissector.findings import FindingCode as F
from dissector.findings import Thresholds
from tests.support.apache.admin import admin
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.raw import RawClient
from tests.support.apache.secure import captured
from tests.support.peers import LOOPBACK

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

MAX_UNACKED = 3
PERMITS = 100
PUBLISHED = 10
GAP = 0.5
DISPATCH_WAIT = 2.0
#: Bounds the polls for the broker's blocked flag (generous: each poll is an answered
#: request, an event; the bound only ends a broker that never blocks).
BLOCKED_TIMEOUT = 120.0


def _publish(producer: RawClient, seq: int) -> None:
    producer.send(
        "SEND",
        producer_id=1,
        sequence_id=seq,
        metadata={"producer_name": "stall-producer", "sequence_id": seq, "publish_time": 1},
        payload=f"m{seq}".encode(),
    )
    producer.expect("SEND_RECEIPT")


def _stats(consumer: RawClient, rid: int) -> Any:
    """CONSUMER_STATS, and its answer (the MESSAGEs before it are in the record)."""
    consumer.send("CONSUMER_STATS", request_id=rid, consumer_id=1)
    while True:
        cmd = consumer.receive()
        assert cmd is not None, "the broker closed the consumer's connection"
        if cmd.HasField("consumerStatsResponse"):
            return cmd.consumerStatsResponse


def _talk(broker: ApacheBroker, topic: str) -> dict[str, Any]:
    with RawClient(LOOPBACK, broker.port) as producer:
        producer.send("CONNECT", client_version="raw-stall-producer", protocol_version=21)
        producer.expect("CONNECTED")
        producer.send("LOOKUP", topic=topic, request_id=1)
        producer.expect("LOOKUP_RESPONSE")
        producer.send("PRODUCER", topic=topic, producer_id=1, request_id=2)
        producer.expect("PRODUCER_SUCCESS")
        for seq in range(MAX_UNACKED):
            _publish(producer, seq)
        with RawClient(LOOPBACK, broker.port) as consumer:
            consumer.send("CONNECT", client_version="raw-stall-consumer", protocol_version=21)
            consumer.expect("CONNECTED")
            consumer.send(
                "SUBSCRIBE", topic=topic, subscription="stalled", subType=1, consumer_id=1,
                request_id=1, initialPosition=1,
            )  # fmt: skip
            consumer.expect("SUCCESS")
            consumer.send("FLOW", consumer_id=1, messagePermits=PERMITS)
            for _ in range(MAX_UNACKED):
                consumer.expect("MESSAGE")
            rid, deadline = 2, time.monotonic() + BLOCKED_TIMEOUT
            while not _stats(consumer, rid).blockedConsumerOnUnackedMsgs:
                assert time.monotonic() < deadline, "the broker never said it was blocked"
                rid += 1  # asked again at once: each poll waits for the broker's answer
            for seq in range(MAX_UNACKED, MAX_UNACKED + PUBLISHED):
                time.sleep(GAP)
                _publish(producer, seq)
            _stats(consumer, rid + 1)
        record = {"producer": producer.record, "consumer": consumer.record}
    return record


@pytest.fixture(scope="module")
def run(
    apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the raw clients' records, the findings of the capture with dispatch_wait 2 s)."""
    namespace = f"public/stall-{uuid.uuid4().hex[:8]}"
    admin(apache_broker, "PUT", f"/admin/v2/namespaces/{namespace}")
    admin(
        apache_broker,
        "POST",
        f"/admin/v2/namespaces/{namespace}/maxUnackedMessagesPerConsumer",
        MAX_UNACKED,
    )
    topic = f"persistent://{namespace}/t"
    cap = tmp_path_factory.mktemp("stall") / "stall.pcap"
    record = captured(cap, apache_broker.port, lambda: _talk(apache_broker, topic))
    th = Thresholds(dispatch_wait=DISPATCH_WAIT)
    table = dissector.read_capture(cap, ports=[apache_broker.port], thresholds=th).findings
    rows: list[dict[str, Any]] = table.to_dict("records")
    return record, rows


def _frames(record: dict[str, Any], direction: str, command: str) -> list[dict[str, Any]]:
    return [f for f in record["frames"] if f["direction"] == direction and f["command"] == command]


def test_the_broker_blocked_the_consumer_with_permits_left(
    run: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    record, _ = run
    answers = _frames(record["consumer"], "received", "CONSUMER_STATS_RESPONSE")
    last = answers[-1]["fields"]
    delivered = len(_frames(record["consumer"], "received", "MESSAGE"))
    flows = _frames(record["consumer"], "sent", "FLOW")
    granted = sum(f["fields"]["messagePermits"] for f in flows)
    assert delivered == MAX_UNACKED and granted == PERMITS
    assert last["blockedConsumerOnUnackedMsgs"] is True
    assert int(last["availablePermits"]) == granted - delivered
    assert int(last["unackedMessages"]) == delivered  # it never acknowledged


def test_the_stall_is_found_with_the_clients_numbers(
    run: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    record, rows = run
    assert sorted(r["code"] for r in rows) == [F.DISPATCH_STALLED_WITH_PERMITS]
    (row,) = rows
    consumer = record["consumer"]
    messages = _frames(consumer, "received", "MESSAGE")
    granted = sum(f["fields"]["messagePermits"] for f in _frames(consumer, "sent", "FLOW"))
    stalled_ms = messages[-1]["ms"]
    blocked_ms = _frames(consumer, "received", "CONSUMER_STATS_RESPONSE")[0]["ms"]
    receipts = _frames(record["producer"], "received", "SEND_RECEIPT")
    assert len([f for f in receipts if f["ms"] > blocked_ms]) == PUBLISHED
    summary = row["summary"]
    assert row["entity"] == "consumer 1 (sub stalled, Shared)"
    assert f"holding {granted - len(messages)} permits" in summary
    assert f"got {PUBLISHED} SEND_RECEIPTs" in summary
    assert f"{len(messages)} messages delivered to it were unacknowledged" in summary
    assert "the broker said blockedConsumerOnUnackedMsgs" in summary
    # it began with the last MESSAGE: after the client's FLOW, before the client read it
    # (capture and record share the clock; the record's times are whole milliseconds)
    began_ms = row["first_ts"].timestamp() * 1000
    flow_ms = _frames(consumer, "sent", "FLOW")[0]["ms"]
    assert flow_ms - 1 <= began_ms <= stalled_ms + 1
    # and lasted at least the PUBLISHED gaps the producer waited after it
    assert row["value"] >= PUBLISHED * GAP
    assert row["topic"].endswith("/t")


def test_the_brokers_answers_agree_with_the_capture(
    run: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """The broker's availablePermits and unackedMessages are what the client granted and
    was delivered: no consumer.stats_mismatch."""
    _, rows = run
    assert F.CONSUMER_STATS_MISMATCH not in {r["code"] for r in rows}
