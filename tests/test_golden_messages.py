"""Golden tests of the messages table: every sample capture against the client's manifest.

The manifest holds, for every message the client sent or received, the sha256 and size of
its payload, its key and properties as the client API reported them. Batching, compression
(LZ4, ZLIB, ZSTD, SNAPPY) and chunking must all be undone for the hashes to match.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dissector.read import Capture, read_capture
from tests.support.samples import CAPTURES, IDS, PCAPS, identity, manifest, manifest_path, rows


@pytest.fixture(scope="module", params=CAPTURES, ids=IDS)
def sample(request: pytest.FixtureRequest) -> tuple[Capture, dict[str, Any]]:
    return read_capture(request.param), manifest(request.param)


def test_produced_messages_are_what_the_client_sent(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    cap, m = sample
    msgs = cap.messages
    produced = msgs[msgs["kind"] == "produced"]
    assert produced["complete"].all()
    expected = [
        identity(s["sha256"], s["size"], s["key"], s["properties"])
        for s in m["sent"]
        if s.get("result", "Ok") == "Ok"
    ]
    assert Counter(rows(produced)) == Counter(expected)
    if m.get("compression") not in (None, "NONE"):
        assert set(produced["compression"]) == {m["compression"].upper()}


def test_delivered_messages_include_everything_the_client_received(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    cap, m = sample
    msgs = cap.messages
    delivered = msgs[msgs["kind"] == "delivered"]
    assert delivered["complete"].all()
    got = Counter(rows(delivered))
    wanted = Counter(
        identity(r["sha256"], r["size"], r["key"], r["properties"]) for r in m["received"]
    )
    # The wire may carry more than the application saw (a redelivery the client dropped),
    # never less.
    assert not wanted - got
    sent = {identity(s["sha256"], s["size"], s["key"], s["properties"]) for s in m["sent"]}
    assert set(got) <= sent


def test_delivered_ids_and_topics(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, m = sample
    msgs = cap.messages
    delivered = msgs[msgs["kind"] == "delivered"]
    ids = set(zip(delivered["ledger_id"], delivered["entry_id"], strict=True))
    for r in m["received"]:
        mid = r["message_id"]
        assert (mid["ledger_id"], mid["entry_id"]) in ids
    topics = {s.get("partition_topic") or s["topic"] for s in m["sent"]}
    assert set(msgs["topic"]) <= topics


@pytest.fixture(scope="module")
def chunked() -> tuple[Capture, dict[str, Any]]:
    """One message of 6 MiB sent in chunks, and its manifest."""
    path = PCAPS / "chunked.pcap.gz"
    return read_capture(path), json.loads(manifest_path(path).read_text())


@pytest.fixture(scope="module")
def produce_consume() -> tuple[Path, dict[str, Any]]:
    path = PCAPS / "produce_consume.pcap"
    return path, manifest(path)


def test_chunked_message_is_joined(chunked: tuple[Capture, dict[str, Any]]) -> None:
    cap, m = chunked
    msgs = cap.messages
    (sent,) = m["sent"]
    for kind in ("produced", "delivered"):
        (row,) = msgs[msgs["kind"] == kind].itertuples()
        assert row.chunked and row.num_chunks == m["chunks"] == 2
        assert row.payload_sha256 == sent["sha256"] and row.payload_size == sent["size"]
    frames = cap.frames
    assert (frames["command"] == "SEND").sum() == 2  # both chunks are still frames


def test_payload_preview_is_opt_in(produce_consume: tuple[Path, dict[str, Any]]) -> None:
    path, _ = produce_consume
    assert read_capture(path).messages["payload_preview"].isna().all()
    previews = read_capture(path, payload_preview=8).messages["payload_preview"]
    assert previews.str.len().between(1, 32).all()
