"""Golden tests of conversations, entities and the timeline on the real-traffic samples.

Expected values come from the client's manifest (what it created, sent, received and acked)
and from the frames table's own timestamps (latency must be their difference).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from dissector.read import Capture, read_capture
from tests.support.broker_traits import CLOSES_CONSUMER_ON_SEEK, implementation, server_version_ok
from tests.support.samples import CAPTURES, IDS, PCAPS, manifest


@pytest.fixture(scope="module", params=CAPTURES, ids=IDS)
def sample(request: pytest.FixtureRequest) -> tuple[Capture, dict[str, Any]]:
    return read_capture(request.param), manifest(request.param)


def test_latency_is_the_difference_of_the_frames_timestamps(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    cap, _ = sample
    frames = cap.frames.set_index(["conn_id", "direction", "stream_offset"])["ts"]
    t = cap.timeline
    answered = t[t["request_offset"].notna() & t["response_offset"].notna()]
    assert len(answered) > 0
    for row in answered.itertuples():
        back = (
            "broker_to_client"
            if row.request_direction == "client_to_broker"
            else "client_to_broker"
        )
        req_ts = frames[(row.conn_id, row.request_direction, row.request_offset)]
        resp_ts = frames[(row.conn_id, back, row.response_offset)]
        assert row.latency_us == (resp_ts - req_ts) // pd.Timedelta(microseconds=1)
        assert row.latency_us >= 0


def test_every_send_has_its_receipt(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, _ = sample
    t = cap.timeline
    sends = t[t["request_command"] == "SEND"]
    assert (sends["outcome"] == "success").all()
    assert (sends["response_command"] == "SEND_RECEIPT").all()
    frames = cap.frames
    assert len(sends) == (frames["command"] == "SEND").sum()


def test_every_request_with_an_id_is_answered(sample: tuple[Capture, dict[str, Any]]) -> None:
    """Every request with an id is answered, but one the client sent while closing (after its
    first CLOSE_PRODUCER/CLOSE_CONSUMER on the connection: the C++ client may ask a
    PARTITIONED_METADATA then and end the connection before the answer), as the frames show."""
    cap, _ = sample
    t = cap.timeline
    with_id = t[t["request_id"].notna() & t["request_command"].notna()]
    f = cap.frames
    closes = f[f["command"].isin(["CLOSE_PRODUCER", "CLOSE_CONSUMER"])]
    closes = closes[closes["direction"] == "client_to_broker"]
    closing = closes.groupby("conn_id")["ts"].min()
    since = with_id["conn_id"].map(closing)
    given_up = since.notna() & (with_id["request_ts"] > since)
    answered = with_id[~given_up]
    assert (answered["outcome"] == "success").all(), answered[["request_command", "outcome"]]
    assert (with_id[given_up]["outcome"].isin(["success", "unanswered"])).all()
    frames = cap.frames
    requests = frames[  # a broker's CLOSE_PRODUCER/CONSUMER with request_id -1 asks nothing
        frames["request_id"].notna()
        & (frames["request_id"] != -1)
        & ~frames["command"].str.endswith("_RESPONSE")
        & ~frames["command"].isin(["SUCCESS", "ERROR", "PRODUCER_SUCCESS"])
    ]
    assert len(with_id) == len(requests)


def test_acks_the_client_made_pair_with_deliveries(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, m = sample
    t = cap.timeline
    acked = t[(t["request_command"] == "MESSAGE") & (t["response_command"] == "ACK")]
    acked_ids = set(zip(acked["ledger_id"], acked["entry_id"], strict=True))
    for ack in m["acks"]:
        if ack["kind"] in ("individual", "cumulative"):
            mid = ack["message_id"]
            assert (mid["ledger_id"], mid["entry_id"]) in acked_ids, ack
    assert (acked["outcome"] == "success").all()
    # Deliveries never acked are listed, as unanswered or redelivered, never lost.
    deliveries = (cap.frames["command"] == "MESSAGE").sum()
    assert (t["request_command"] == "MESSAGE").sum() == deliveries


def test_entities_are_what_the_client_created(sample: tuple[Capture, dict[str, Any]]) -> None:
    cap, m = sample
    e = cap.entities
    producers = e[e["kind"] == "producer"]
    consumers = e[e["kind"] == "consumer"]
    created_topics = {p["topic"] for p in m["producers"]}
    got_topics = set(producers["topic"])
    assert all(
        any(g == t or g.startswith(t + "-partition-") for g in got_topics) for t in created_topics
    )
    assert set(producers["name"]) >= {p["producer_name"] for p in m["producers"]}
    assert {c["subscription"] for c in m["consumers"]} <= set(consumers["subscription"])
    assert set(e["state"]) <= {"created", "closed_by_client", "closed_by_broker"}
    # Apache's broker closes the consumer on each SEEK (the client subscribes again)
    by_broker = len(m["seeks"]) if CLOSES_CONSUMER_ON_SEEK[implementation(m)] else 0
    assert (e["state"] == "closed_by_broker").sum() == by_broker
    conv = cap.conversations
    assert conv["producers"].sum() == len(producers)
    assert conv["consumers"].sum() == len(consumers)
    assert (conv["client_version"].str.startswith("Pulsar-CPP")).all()
    assert all(server_version_ok(m, v) for v in conv["server_version"])
    assert (conv["client_protocol"] == 20).all()
    assert (conv["anomalies"] == 0).all()
    delivered = cap.messages
    for row in consumers.itertuples():
        # its life: from its SUBSCRIBE to the next one of its id on its connection
        again = consumers[
            (consumers["conn_id"] == row.conn_id)
            & (consumers["entity_id"] == row.entity_id)
            & (consumers["ts"] > row.ts)
        ]["ts"]
        got = delivered[
            (delivered["kind"] == "delivered")
            & (delivered["conn_id"] == row.conn_id)
            & (delivered["consumer_id"] == row.entity_id)
            & (delivered["ts"] >= row.ts)
            & (
                delivered["ts"]
                < (again.min() if len(again) else pd.Timestamp.max.tz_localize("UTC"))
            )
        ]
        # Permit accounting counts every batch entry and every chunk (each is an entry).
        chunked = got[got["chunked"]]
        assert row.delivered == len(got) - len(chunked) + int(chunked["num_chunks"].sum())
        assert row.permits > 0


@pytest.fixture(scope="module")
def keepalive() -> Capture:
    """3 messages, then idle past the broker's 2 s keep-alive interval."""
    return read_capture(PCAPS / "keepalive.pcap")


def test_keepalive_pings_are_answered(keepalive: Capture) -> None:
    cap = keepalive
    t = cap.timeline
    pings = t[t["request_command"] == "PING"]
    assert len(pings) == (cap.frames["command"] == "PING").sum() >= 2
    assert (pings["response_command"] == "PONG").all() and (pings["outcome"] == "success").all()
    assert (pings["request_direction"] == "broker_to_client").all()
