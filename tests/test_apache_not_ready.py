"""ServiceNotReady from Apache's broker: a PRODUCER for a topic whose namespace no lookup has
brought to the broker yet.

The broker serves a topic only once it owns the topic's namespace bundle, which a LOOKUP
makes it take; a client that skips the lookup (our raw client, as a client pinned to a
broker URL does) is answered ERROR ServiceNotReady and told to look up again. The raw
client's own record (every frame it sent and received, read with protobuf's parser alone) is
the truth: the request id, the error code and message the broker sent. Then the client
looks the topic up, and the same PRODUCER is created: the timeline must pair both.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

import dissector
from tests.support.apache.admin import admin
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.raw import RawClient
from tests.support.apache.secure import captured
from tests.support.peers import LOOPBACK

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]


@pytest.fixture(scope="module")
def run(
    apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dissector.Capture, str]:
    """(the raw client's record, our tables of the capture, the topic)."""
    namespace = f"public/notready-{uuid.uuid4().hex[:8]}"
    admin(apache_broker, "PUT", f"/admin/v2/namespaces/{namespace}")  # made, not yet owned
    topic = f"persistent://{namespace}/t"
    cap = tmp_path_factory.mktemp("notready") / "not_ready.pcap"

    def talk() -> dict[str, Any]:
        with RawClient(LOOPBACK, apache_broker.port) as client:
            client.send("CONNECT", client_version="raw-notready", protocol_version=21)
            client.expect("CONNECTED")
            client.send("PRODUCER", topic=topic, producer_id=1, request_id=1)
            client.expect("ERROR")
            client.send("LOOKUP", topic=topic, request_id=2)
            client.expect("LOOKUP_RESPONSE")
            client.send("PRODUCER", topic=topic, producer_id=2, request_id=3)
            client.expect("PRODUCER_SUCCESS")
        return client.record

    record = captured(cap, apache_broker.port, talk)
    return record, dissector.read_capture(cap, ports=[apache_broker.port], fields=True), topic


def _received(record: dict[str, Any], command: str) -> list[dict[str, Any]]:
    return [
        f["fields"]
        for f in record["frames"]
        if f["direction"] == "received" and f["command"] == command
    ]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def test_the_broker_said_service_not_ready(run: tuple[dict[str, Any], Any, str]) -> None:
    record, _, _ = run
    [error] = _received(record, "ERROR")
    assert error["error"] == "ServiceNotReady"
    assert int(error["request_id"]) == 1


def test_the_refusal_and_the_retry_are_paired(run: tuple[dict[str, Any], Any, str]) -> None:
    record, capture, topic = run
    [error] = _received(record, "ERROR")
    timeline = capture.timeline
    pairs = timeline[timeline.request_command.isin(["PRODUCER", "LOOKUP"])]
    got = [
        (r.request_command, int(r.request_id), r.response_command, r.outcome, _text(r.error_code))
        for r in pairs.itertuples()
    ]
    assert got == [
        ("PRODUCER", 1, "ERROR", "error", "ServiceNotReady"),
        ("LOOKUP", 2, "LOOKUP_RESPONSE", "success", None),
        ("PRODUCER", 3, "PRODUCER_SUCCESS", "success", None),
    ]
    refused = pairs.iloc[0]
    assert refused.error_message == error["message"]
    assert refused.topic == topic


def test_the_frames_carry_the_brokers_error(run: tuple[dict[str, Any], Any, str]) -> None:
    record, capture, _ = run
    [error] = _received(record, "ERROR")
    frames = capture.frames
    errors = frames[frames.command == "ERROR"]
    assert list(errors.direction) == ["broker_to_client"]
    fields = json.loads(errors.iloc[0]["fields"])
    assert (fields["error"], fields["message"]) == ("ServiceNotReady", error["message"])
