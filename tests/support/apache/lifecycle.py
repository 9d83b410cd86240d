"""LifecycleClient.java's scenarios against an Apache broker, captured by tcpdump.

Input:  an ApacheBroker, a folder, and the scenarios to run (LifecycleClient.java names
        them: producer_busy, consumer_busy, topic_not_found, incompatible_schema,
        not_allowed, terminated_producer, terminate, unload, failover, key_shared,
        partitioned, seek, nack, ack_timeout).
Output: `Run`: the capture file, the Java client's own record (per scenario), and our
        tables of the capture (`dissector.read_capture(..., fields=True)`); helpers that
        pick a scenario's rows out of those tables by its topic and connection.
Rule:   the set-up a scenario needs before it starts is made here with the admin API
        (`prepare`: a namespace without automatic topic creation, one allowing only the
        Exclusive subscription type, a partitioned topic of 3 partitions, a terminated
        topic); tcpdump listens on the broker port before the client starts, and the
        capture is read once every connection's end is in the file (an event). Nothing
        here reads our tables to decide what is expected.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

import dissector
from tests.support.apache.admin import admin, topic_path
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.client import run_java
from tests.support.capture import Tcpdump, wait_closed

SOURCE = Path(__file__).resolve().parent / "LifecycleClient.java"
#: Scenarios with a namespace of their own (public/PREFIX-SCENARIO), and its policies.
NAMESPACES: dict[str, tuple[str, Any]] = {
    "topic_not_found": ("autoTopicCreation", {"allowAutoTopicCreation": False}),
    "not_allowed": ("subscriptionTypesEnabled", ["Exclusive"]),
}


def topic_of(prefix: str, scenario: str) -> str:
    """The topic LifecycleClient.java uses for `scenario` (its header says the rule)."""
    if scenario in NAMESPACES:
        return f"persistent://public/{prefix}-{scenario}/t"
    return f"persistent://public/default/{prefix}-{scenario}"


def prepare(broker: ApacheBroker, prefix: str, scenarios: list[str]) -> None:
    """The admin set-up the scenarios expect before they start."""
    for scenario in scenarios:
        topic = topic_of(prefix, scenario)
        if scenario in NAMESPACES:
            namespace = f"/admin/v2/namespaces/public/{prefix}-{scenario}"
            policy, body = NAMESPACES[scenario]
            admin(broker, "PUT", namespace)
            admin(broker, "POST", f"{namespace}/{policy}", body)
        elif scenario == "partitioned":
            admin(broker, "PUT", f"{topic_path(topic)}/partitions", 3)
        elif scenario == "terminated_producer":
            admin(broker, "PUT", topic_path(topic))
            admin(broker, "POST", f"{topic_path(topic)}/terminate")


@dataclass
class Run:
    """One LifecycleClient run: its capture, its record, our tables of the capture."""

    path: Path
    record: dict[str, Any]
    capture: dissector.Capture

    def scenario(self, name: str) -> dict[str, Any]:
        """The client's record of one scenario."""
        found: dict[str, Any] = self.record["scenarios"][name]
        return found

    def conns(self, *topics: str) -> set[int]:
        """The connections whose producers or consumers name one of `topics` (a partitioned
        topic's partitions count as it)."""
        frames = self.capture.frames
        named = frames.topic.astype(object).map(lambda t: _within(t, topics))
        return set(frames[named].conn_id.astype(int))

    def frames(self, *topics: str) -> pd.DataFrame:
        """The frames of the connections of `topics` (every command, ERROR included)."""
        frames = self.capture.frames
        return frames[frames.conn_id.isin(self.conns(*topics))]

    def timeline(self, *topics: str) -> pd.DataFrame:
        timeline = self.capture.timeline
        return timeline[timeline.conn_id.isin(self.conns(*topics))]

    def entities(self, *topics: str) -> pd.DataFrame:
        entities = self.capture.entities
        return entities[entities.topic.astype(object).map(lambda t: _within(t, topics))]


def _within(topic: Any, topics: tuple[str, ...]) -> bool:
    return isinstance(topic, str) and any(
        topic == t or topic.startswith(f"{t}-partition-") for t in topics
    )


def capture_run(broker: ApacheBroker, folder: Path, scenarios: list[str]) -> Run:
    """Prepare, capture LifecycleClient running `scenarios`, and read the capture."""
    prefix = f"life-{uuid.uuid4().hex[:8]}"
    prepare(broker, prefix, scenarios)
    path = folder / f"{prefix}.pcap"
    with Tcpdump(path, f"tcp port {broker.port}"):  # returns once tcpdump is listening
        record = run_java(SOURCE, [broker.url, broker.web_url, prefix, ",".join(scenarios)])
        assert wait_closed(path, (broker.port,), timeout=120.0), "a connection did not end"
    record["prefix"] = prefix
    return Run(path, record, dissector.read_capture(path, ports=[broker.port], fields=True))


def rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A DataFrame's rows, nulls as None."""
    found: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return found
