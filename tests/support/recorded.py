"""Real peers under capture: pulsar-lite and the official client on loopback, recorded by
tcpdump (the diagnosis and journeys real-peer tests share them).

Input: a capture path, broker settings, a topic stem.
Output: `recorded` (the broker under tcpdump, the capture complete when the block ends),
`client` (the official client, closed however the block ends), `topic_name` (a fresh
non-partitioned topic).
Rule: nothing here is measured or timed: tcpdump is listening before the block starts
(Tcpdump waits for its "listening on"), and the capture is stopped once the file holds the
end of every connection it saw open (capture.wait_closed), not after a pause.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.capture import Tcpdump, wait_closed
from tests.support.peers import PulsarLite

QUIET = logging.getLogger("pulsar.diag")
QUIET.propagate = False
QUIET.setLevel(logging.ERROR)


@contextlib.contextmanager
def recorded(path: Path, **broker: Any) -> Iterator[PulsarLite]:
    """pulsar-lite under tcpdump on lo, the capture written to `path` when the block ends.
    Topics are not partitioned (a receiver queue of 0 needs a plain topic)."""
    config: dict[str, int | bool | str] = {"default_partitions": 0}
    with PulsarLite(extra_config=config, **broker) as lite, Tcpdump(path, f"tcp port {lite.port}"):
        yield lite  # (Tcpdump returns once tcpdump says it is listening)
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
