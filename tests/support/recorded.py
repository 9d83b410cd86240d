"""Real peers under capture: a broker (pulsar-lite, or Apache's own) and the official client on
loopback, recorded by tcpdump (the diagnosis, journeys and trace-context real-peer tests
share them).

Input: a capture path, the peer (`LITE`, or the session's ApacheBroker through `peer_of`),
broker settings for pulsar-lite, a topic stem.
Output: `recorded` (the broker under tcpdump, the capture complete when the block ends;
pulsar-lite is started for the block, the Apache broker is the session's and stays up),
`client` (the official client, closed however the block ends), `topic_name` (a fresh
topic: non-partitioned on both peers), `PEERS` and `peer_of` (the `peer` fixture's
parameters, the Apache one carrying the `apache` tier marker, and its value; `own_peer_of`
gives the Apache case a broker of its own, for a test that pauses it).
Rule: nothing here is measured or timed: tcpdump is listening before the block starts
(Tcpdump waits for its "listening on"), and the capture is stopped once the file holds the
end of every connection it saw open (capture.wait_closed), not after a pause. The Apache
broker is named here only through the `apache_broker` fixture (by name) and a local import,
so that the pulsar-lite cases need no JVM: only the "apache" parameter carries the `apache`
marker (the tier guard checks at run time that no other case starts a JVM).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.support.capture import Tcpdump, wait_closed
from tests.support.peers import PulsarLite

QUIET = logging.getLogger("pulsar.diag")
QUIET.propagate = False
QUIET.setLevel(logging.ERROR)

#: The `peer` fixture's parameters: the Apache case needs the Apache broker's tier.
PEERS = [pytest.param("lite", id="lite"), pytest.param("apache", marks=pytest.mark.apache)]


class Broker(Protocol):
    """What a scenario uses of a running broker (PulsarLite and ApacheBroker have it)."""

    url: str
    port: int

    @property
    def pid(self) -> int | None: ...


@dataclass(frozen=True)
class Peer:
    """The broker a scenario runs against: `name` "lite" (a pulsar-lite started for each
    recording) or "apache" (`broker`, the session's Apache broker, shared)."""

    name: str
    broker: Broker | None = None

    @property
    def apache(self) -> bool:
        return self.name == "apache"


LITE = Peer("lite")


def peer_of(request: pytest.FixtureRequest) -> Peer:
    """The `peer` fixture's value for its parameter ("lite" or "apache")."""
    if request.param == "lite":
        return LITE
    return Peer("apache", request.getfixturevalue("apache_broker"))


def own_peer_of(request: pytest.FixtureRequest) -> Peer:
    """As `peer_of`, but the Apache case gets a broker of its own, started for the test and
    stopped by its PID after it: for a fault done to the broker itself (a paused JVM), which
    the session's broker must not carry into the tests after it."""
    if request.param == "lite":
        return LITE
    from tests.support.apache.broker import ApacheBroker

    broker = ApacheBroker().start()
    request.addfinalizer(broker.stop)
    return Peer("apache", broker)


class _Lite:
    """A started PulsarLite seen as a Broker (its PID)."""

    def __init__(self, lite: PulsarLite) -> None:
        self.lite, self.url, self.port = lite, lite.url, lite.port

    @property
    def pid(self) -> int | None:
        return self.lite._proc.pid if self.lite._proc is not None else None


@contextlib.contextmanager
def recorded(path: Path, peer: Peer = LITE, **lite_settings: Any) -> Iterator[Broker]:
    """The peer's broker under tcpdump on lo, the capture written to `path` when the block
    ends. Topics are not partitioned (a receiver queue of 0 needs a plain topic): pulsar-lite
    is told so; the Apache broker creates a non-partitioned topic on first use by default
    (allowAutoTopicCreationType, checked by tests/test_recorded_peers.py). `lite_settings`
    are PulsarLite's (the Apache broker is the session's, with its own settings)."""
    if peer.broker is not None:
        if lite_settings:
            raise ValueError(f"pulsar-lite settings for the Apache broker: {lite_settings}")
        with Tcpdump(path, f"tcp port {peer.broker.port}"):
            yield peer.broker
            wait_closed(path, (peer.broker.port,))
        return
    config: dict[str, int | bool | str] = {"default_partitions": 0}
    with (
        PulsarLite(extra_config=config, **lite_settings) as lite,
        Tcpdump(path, f"tcp port {lite.port}"),
    ):
        yield _Lite(lite)  # (Tcpdump returns once tcpdump says it is listening)
        wait_closed(path, (lite.port,))  # every connection's end is in the file


@contextlib.contextmanager
def client(url: str, logger: logging.Logger | None = None) -> Iterator[Any]:
    """The official client, closed however the block ends (else it retries forever)."""
    import pulsar

    made = pulsar.Client(url, operation_timeout_seconds=10, logger=logger or QUIET)
    try:
        yield made
    finally:
        made.close()


def topic_name(name: str) -> str:
    return f"persistent://public/default/diag-{name}-{uuid.uuid4().hex[:8]}"
