"""reconnect.storm against Apache's broker: our raw client opening and ending connections in
a burst.

The raw client opens STORM connections one after the other: on the first REFUSED of them it
asks for a PRODUCER of a topic (each its own) in a namespace no lookup has brought to the
broker, which the broker refuses (ERROR ServiceNotReady), then closes; on the others it only
says CONNECT and closes after CONNECTED. The raw client's own record (its frames, the times
it connected and closed) is the truth: whether the burst fits in a minute (the storm
expected, else none), and how each connection ended.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
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

STORM = Thresholds().storm_per_minute
REFUSED = 12
#: "N ended (fin) how", one per kind of ending in the summary
_ENDED = re.compile(r"(\d+) ended \((?:fin|rst)\) (.+?)(?=, \d+ ended|$)")


@pytest.fixture(scope="module")
def run(
    apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[dict[str, Any]], list[tuple[int, int]], list[dict[str, Any]]]:
    """(our findings, each connection's (opened, closed) ms, the raw client's records)."""
    namespace = f"public/storm-{uuid.uuid4().hex[:8]}"
    admin(apache_broker, "PUT", f"/admin/v2/namespaces/{namespace}")  # made, not yet owned
    cap = tmp_path_factory.mktemp("storm") / "storm.pcap"

    def talk() -> tuple[list[tuple[int, int]], list[dict[str, Any]]]:
        spans, records = [], []
        for i in range(STORM):
            opened = int(time.time() * 1000)
            with RawClient(LOOPBACK, apache_broker.port) as client:
                client.send("CONNECT", client_version="raw-storm", protocol_version=21)
                client.expect("CONNECTED")
                if i < REFUSED:
                    topic = f"persistent://{namespace}/t{i}"
                    client.send("PRODUCER", topic=topic, producer_id=1, request_id=1)
                    client.expect("ERROR")
            assert client.closed_ms is not None
            spans.append((opened, client.closed_ms))
            records.append(client.record)
        return spans, records

    spans, records = captured(cap, apache_broker.port, talk)
    capture = dissector.read_capture(cap, ports=[apache_broker.port])
    return capture.findings.to_dict("records"), spans, records


def _worst_minute(spans: list[tuple[int, int]]) -> int:
    """The most connections that opened and ended within one 60 s window (the record's)."""
    return max(sum(1 for o, _ in spans if end - 60_000 <= o) for _, end in spans)


def test_the_burst_is_a_storm_that_says_how_its_connections_ended(
    run: Any, apache_broker: ApacheBroker
) -> None:
    findings, spans, records = run
    refused = [
        f["fields"]["error"]
        for r in records
        for f in r["frames"]
        if f["direction"] == "received" and f["command"] == "ERROR"
    ]
    assert refused == ["ServiceNotReady"] * REFUSED
    worst = _worst_minute(spans)
    storms = [f for f in findings if f["code"] == FindingCode.RECONNECT_STORM]
    if worst < STORM:  # a machine so slow the burst took over a minute: no storm to find
        assert storms == []
        return
    assert [f["code"] for f in findings] == [FindingCode.RECONNECT_STORM]  # nothing else
    (row,) = storms
    assert (row["count"], row["broker_port"]) == (worst, apache_broker.port)
    summary = row["summary"]
    assert f"opened and ended {worst} connections" in summary, summary
    ended: Counter[str] = Counter()
    for n, how in re.findall(_ENDED, summary.split(": ", 1)[1]):
        ended[how] += int(n)  # fin or rst: whichever the kernel's close made
    assert ended == {
        "after ERROR ServiceNotReady to PRODUCER": REFUSED,
        "after CONNECTED, with no producer or consumer": STORM - REFUSED,
    }, summary
    assert row["client_port"] == records[-1]["local_port"]  # the worst minute's last
