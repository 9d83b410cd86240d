"""No false alarm: every finding code, on every sample capture, is one its scenario made.

Scenes covered here: every capture in pcaps/ (`*.pcap`, `*.pcap.gz`: the official Python
client and pulsar-lite, each with its manifest, pcaps/README.md). Each is named in EXPECTED
with the findings its manifest's scenario allows; a capture added to pcaps/ without an
entry fails the test, so a new sample is judged too. The findings compared are the whole
findings table, every code the registry has now or gets later (a rule added elsewhere that
fires on a healthy sample fails here), with the default thresholds (the clients' settings).

Every sample is a healthy run by its manifest: each message it sent has the broker's
message id (`result` Ok), each message received was the one sent, and its `quirks` and
`notes` are pulsar-lite's ways, not faults:
- acks: one negative ack and one REDELIVER_UNACKNOWLEDGED_MESSAGES, each redelivering once
  (`redelivery_requests`): below consumer.redelivery_storm's 3; batch-index acks, whose
  partial acks are no ack of the whole entry.
- seek: the broker sends acked messages again after each SEEK (`seeks`): a seek resets the
  cursor, so they are no consumer.redelivered_after_ack.
- keepalive: the broker's PINGs, each answered by the client.
- chunked, large_1mib: a 6 MiB message in two chunks of at most 5 MiB, a 1 MiB message: no
  message.oversize.
The clean bill of each is compared with the manifest too: the SENDs answered are the
entries the client's message ids name (a batch is one entry, a chunked message one entry
per chunk), on the producers that sent them, none failed and none unanswered.

The same scenarios recorded against Apache's own broker (tests/test_apache_golden.py, which
collects the per-scene test again on its recordings) are held to the same findings. The
other real-peer scenes assert their exact findings in their own files (their captures live as
long as the test): tests/test_apache_broker.py and tests/test_go_client.py (a healthy run:
no finding, and the clean bill's SENDs are the client's entries), tests/test_apache_dispatch.py
(healthy dispatch: no finding), tests/test_journeys_real_peers.py (healthy: no finding),
tests/test_apache_tls.py (no finding), tests/test_apache_oversize.py (a chunked message under
maxMessageSize: no finding), tests/test_apache_transactions.py (an aborted transaction's
ack: no finding), tests/test_go_client_lite.py (pulsar-lite's messages without checksum:
consumer.discarded_corrupt and nothing else) and tests/test_apache_errors.py (the busy
producers: producer.busy and nothing else).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dissector.read import Capture, read_capture

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
#: sample -> the findings its scenario allows, by code (every code not here must not fire)
EXPECTED: dict[str, Counter[str]] = {
    "acks": Counter(),
    "batching": Counter(),
    "chunked": Counter(),
    "compression_lz4": Counter(),
    "compression_snappy": Counter(),
    "compression_zlib": Counter(),
    "compression_zstd": Counter(),
    "keepalive": Counter(),
    "large_1mib": Counter(),
    "multi_producer": Counter(),
    "partitioned": Counter(),
    "produce_consume": Counter(),
    "seek": Counter(),
}


def _samples() -> list[Path]:
    return sorted([*PCAPS.glob("*.pcap"), *PCAPS.glob("*.pcap.gz")])


def _name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".pcap")


@pytest.fixture(scope="module", params=_samples(), ids=_name)
def sample(request: pytest.FixtureRequest) -> tuple[Capture, dict[str, Any]]:
    """A sample capture read with its broker's port, and its manifest."""
    path = request.param
    manifest = json.loads((PCAPS / f"{_name(path)}.manifest.json").read_text())
    tables = ["findings", "checks"]
    return read_capture(path, ports=[manifest["broker_port"]], tables=tables), manifest


def test_every_sample_has_its_expected_findings() -> None:
    assert sorted(_name(p) for p in _samples()) == sorted(EXPECTED)


def test_a_scene_has_only_the_findings_its_scenario_made(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    """(Collected again by tests/test_apache_golden.py, on the same scenarios recorded
    against Apache's broker.)"""
    capture, manifest = sample
    rows = capture.arrow["findings"].to_pylist()
    assert Counter(r["code"] for r in rows) == EXPECTED[manifest["name"]], rows
    checks = {r["check"]: r for r in capture.arrow["checks"].to_pylist()}
    sends = checks["sends"]
    assert all(e["result"] == "Ok" for e in manifest["sent"]), manifest["sent"]
    assert (sends["count"], sends["failed"], sends["unknown"]) == (_entries(manifest), 0, 0)
    assert sends["entities"] == _producers(manifest)
    assert checks["connections"]["unknown"] == checks["bytes"]["unknown"] == 0


def _where(entry: dict[str, Any]) -> str:
    return str(entry["partition_topic"] or entry["topic"])


def _entries(manifest: dict[str, Any]) -> int:
    """The entries the client's message ids name: one per batch or unbatched message, one
    per chunk of a chunked message (its id is its last chunk's, with its first's)."""
    entries = set()
    for e in manifest["sent"]:
        mid = e["message_id"]
        first = mid.get("first_chunk") or mid
        for entry in range(first["entry_id"], mid["entry_id"] + 1):
            entries.add((_where(e), mid["ledger_id"], entry))
    return len(entries)


def _producers(manifest: dict[str, Any]) -> int:
    """The producers that sent: one per client producer and partition it sent to."""
    return len({(e["producer"], _where(e)) for e in manifest["sent"]})
