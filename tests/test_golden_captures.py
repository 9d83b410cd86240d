"""Golden tests: the bundled real-traffic captures against what the client itself recorded.

Each pcaps/NAME.pcap has NAME.manifest.json written from the client's own reports (messages
sent and received, producers, consumers). Nothing here is copied from our own output.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from dissector.read import Capture, read_capture
from tests.support.broker_traits import MESSAGE_CHECKSUM, implementation
from tests.support.samples import CAPTURES, IDS, manifest


@pytest.fixture(scope="module", params=CAPTURES, ids=IDS)
def sample(request: pytest.FixtureRequest) -> tuple[Capture, dict[str, Any]]:
    path = request.param
    return read_capture(path, ports=[manifest(path)["broker_port"]]), manifest(path)


def test_there_are_samples() -> None:
    assert len(CAPTURES) >= 10


def test_clean_capture_has_no_anomalies(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, _ = sample
    assert cap.anomalies.empty, cap.anomalies[["code", "detail"]].to_string()


def test_every_stream_byte_is_a_frame_byte(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, _ = sample
    conv = cap.conversations
    assert len(conv) >= 1
    for d in ("c2b", "b2c"):
        assert (conv[f"frame_bytes_{d}"] == conv[f"stream_bytes_{d}"]).all()
        assert (conv[f"gap_bytes_{d}"] == 0).all() and (conv[f"skipped_bytes_{d}"] == 0).all()
    frames = cap.frames
    per_conn = frames.groupby(["conn_id", "direction"])["frame_size"].sum()
    for row in conv.itertuples():
        assert per_conn.get((row.conn_id, "client_to_broker"), 0) == row.frame_bytes_c2b
        assert per_conn.get((row.conn_id, "broker_to_client"), 0) == row.frame_bytes_b2c


def test_broker_endpoint_and_handshake(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, m = sample
    assert set(cap.conversations["broker_port"]) == {m["broker_port"]}
    assert (cap.conversations["broker_ip"] == "127.0.0.1").all()
    frames = cap.frames
    for conn_id, group in frames.groupby("conn_id"):
        c2b = group[group["direction"] == "client_to_broker"]
        b2c = group[group["direction"] == "broker_to_client"]
        assert c2b.iloc[0]["command"] == "CONNECT", conn_id
        assert b2c.iloc[0]["command"] == "CONNECTED", conn_id


def test_sends_and_receipts_match_what_the_client_sent(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    cap, m = sample
    frames = cap.frames
    sends = frames[frames["command"] == "SEND"]
    # Every application message the client sent is in a SEND (batched or chunked).
    sent = [s for s in m["sent"] if s.get("result", "Ok") == "Ok"]
    if any("chunk" in str(q).lower() for q in m.get("notes", [])) or m["name"] == "chunked":
        assert len(sends) >= len(sent)
    else:
        assert int(sends["num_messages"].sum()) == len(sent)
    assert (sends["checksum"] == "valid").all()
    receipts = frames[frames["command"] == "SEND_RECEIPT"]
    assert sorted(zip(receipts["producer_id"], receipts["sequence_id"], strict=True)) == sorted(
        zip(sends["producer_id"], sends["sequence_id"], strict=True)
    )
    # The message ids the client got back from send() are the receipts' ledger/entry ids.
    got = set(zip(receipts["ledger_id"], receipts["entry_id"], strict=True))
    for s in sent:
        mid = s["message_id"]
        assert (mid["ledger_id"], mid["entry_id"]) in got


def test_deliveries_match_what_the_client_received(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    cap, m = sample
    frames = cap.frames
    messages = frames[frames["command"] == "MESSAGE"]
    assert (messages["checksum"] == MESSAGE_CHECKSUM[implementation(m)]).all()
    delivered = set(zip(messages["ledger_id"], messages["entry_id"], strict=True))
    for r in m["received"]:
        mid = r["message_id"]
        assert (mid["ledger_id"], mid["entry_id"]) in delivered


def test_topics_named_by_frames(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, m = sample
    frames = cap.frames
    named = set(frames.loc[frames["command"].isin(["PRODUCER", "SUBSCRIBE"]), "topic"])
    expected = {p["topic"] for p in m.get("producers", [])}
    assert expected <= named or any(t.startswith(e) for e in expected for t in named)


def test_frames_are_time_ordered_per_direction(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, _ = sample
    for _, group in cap.frames.groupby(["conn_id", "direction"]):
        assert group["stream_offset"].is_monotonic_increasing
        assert group["ts"].is_monotonic_increasing
        assert (group["first_packet"] <= group["last_packet"]).all()
    assert isinstance(cap.frames["ts"].dtype, pd.DatetimeTZDtype)
