"""One capture, one truth across the tables: the timeline's pairs, the journeys, the
messages, the entities and the findings say the same thing about each SEND, receipt,
delivery, ack, request and producer or consumer (issue 38).

Every bundled sample and crafted capture (tests/support/truth_scenes.py: late and lost
receipts, a send error, producers closed with SENDs pending, requests pending at a close and
at the capture's end, a producer answered "not ready" first, redeliveries, individual,
cumulative and batch-index acks, two subscriptions, a reconnect; the diagnose faults capture;
the payload faults; the values capture) is read once with every table, and each claim of
tests/support/agreement.py computes both sides from their own tables: the expected value is
the other table's row. The samples' receipts are also tied to the client's own record.
A disagreement found is an xfail(strict) naming the rows and the side the spec says is
wrong (`KNOWN`), until it is fixed: none is open.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest

from dissector.read import Capture, read_capture
from tests.support import agreement, agreement_findings
from tests.support.samples import CAPTURES, IDS, manifest
from tests.support.truth_scenes import SAMPLES, SCENES, corpus

Claim = Callable[[Capture], list[str]]
CLAIMS: dict[str, Claim] = {
    "sends": agreement.sends,
    "deliveries": agreement.deliveries,
    "acks": agreement.acks,
    "entities": agreement.entities,
    "unanswered_requests": agreement_findings.unanswered_requests,
    "unknown_responses": agreement_findings.unknown_responses,
    "send_timeouts": agreement_findings.send_timeouts,
}
FAULTS = "payload faults"  # every capture of tests/support/payload_faults.py but one
INVALID_BATCH = "fault:invalid_batch"
GROUPS = [*SAMPLES, *SCENES, FAULTS, INVALID_BATCH]

#: (capture, claim) -> the disagreement, which side is wrong and why (none open).
KNOWN: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Capture]]:
    made = corpus(tmp_path_factory.mktemp("one-truth-tables"))
    read = {name: read_capture(path) for name, path in made.items()}
    groups = {name: [read.pop(name)] for name in [*SAMPLES, *SCENES, INVALID_BATCH]}
    groups[FAULTS] = list(read.values())
    assert len(groups[FAULTS]) >= 5, sorted(read)
    return groups


def _cases() -> list[Any]:
    cases = []
    for group in GROUPS:
        for claim in CLAIMS:
            why = KNOWN.get((group, claim))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            cases.append(pytest.param(group, claim, marks=marks, id=f"{group}-{claim}"))
    return cases


@pytest.mark.parametrize(("group", "claim"), _cases())
def test_tables_agree(captures: dict[str, list[Capture]], group: str, claim: str) -> None:
    bad = [line for cap in captures[group] for line in CLAIMS[claim](cap)]
    assert bad == []


@pytest.mark.parametrize("path", CAPTURES, ids=IDS)
def test_receipts_are_the_ids_the_client_recorded(path: Path) -> None:
    assert agreement.receipts_as_recorded(read_capture(path), manifest(path)) == []


def test_the_crafted_scenes_hold_what_the_claims_compare(
    captures: dict[str, list[Capture]],
) -> None:
    """The scenes are not vacuous: each holds the rows its claims are about."""
    (sends,) = captures["sends"]
    outcomes = sends.timeline[sends.timeline.request_command == "SEND"].outcome
    assert set(outcomes) == {"success", "error", "unanswered"}
    assert set(sends.findings.code) == {"producer.send_timeout"}
    (requests,) = captures["requests"]
    assert len(requests.findings[requests.findings.code == "request.unanswered"]) == 2
    (consume,) = captures["consume"]
    assert set(consume.timeline.outcome) >= {"success", "redelivered", "unanswered"}
    assert consume.journeys.redeliveries.max() == 1 and consume.journeys.batch_index.max() == 2


def _altered(cap: Capture, table: str, column: str, by: int) -> Capture:
    """The capture with one table's integer column moved by `by` (a planted disagreement)."""
    t = cap.arrow[table]
    i = t.schema.get_field_index(column)
    moved = pa.compute.add(t.column(i), by)
    return cast(
        Capture,
        type("Altered", (), {"arrow": {**cap.arrow, table: t.set_column(i, column, moved)}}),
    )


def test_a_planted_disagreement_is_found(captures: dict[str, list[Capture]]) -> None:
    (cap,) = captures["produce_consume.pcap"]
    assert agreement.sends(_altered(cap, "journeys", "receipt_packet", 1))
    assert agreement.deliveries(_altered(cap, "journeys", "delivered_packet", 1))
    assert agreement.acks(_altered(cap, "journeys", "acked_packet", 1))
    assert agreement.entities(_altered(cap, "entities", "entity_id", 7))
    (invalid,) = captures[INVALID_BATCH]
    assert not agreement.sends(invalid)  # the claim's journeys, the payload's message row
    assert agreement.sends(_altered(invalid, "anomalies", "packet", 1))  # the SEND unmarked
    (sends,) = captures["sends"]
    assert agreement_findings.send_timeouts(_altered(sends, "timeline", "request_packet", 1))
    (requests,) = captures["requests"]
    assert agreement_findings.unanswered_requests(_altered(requests, "findings", "count", 1))
