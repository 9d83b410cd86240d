"""The frame decoder on real traffic: the official client against pulsar-lite, on loopback.

Expected values come from the client's own record (the manifest), never from our output.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from dissector import Checksum, Direction, Frame, FrameDecoder
from tests.support.framehelpers import accounted, decode, frame_key
from tests.support.peers import (
    RecordedConnection,
    record,
    run_large_message_scenario,
    run_scenario,
)

Recording = tuple[list[RecordedConnection], dict[str, Any]]


@pytest.fixture(scope="module")
def unbatched() -> Recording:
    return record(run_scenario, messages=12, batching=False)


@pytest.fixture(scope="module")
def batched() -> Recording:
    return record(run_scenario, messages=12, batching=True)


@pytest.fixture(scope="module")
def large() -> Recording:
    return record(run_large_message_scenario, size=1 << 20)


def decode_connection(conn: RecordedConnection) -> dict[Direction, list[Frame]]:
    out = {}
    for direction, chunks in (
        (Direction.CLIENT_TO_BROKER, conn.c2b_chunks),
        (Direction.BROKER_TO_CLIENT, conn.b2c_chunks),
    ):
        dec = FrameDecoder(direction=direction)
        frames, anomalies, dec = decode([data for _, data in chunks], decoder=dec)
        assert anomalies == [], anomalies
        assert accounted(dec, sum(len(d) for _, d in chunks))
        assert dec.stats.skipped_bytes == dec.stats.gap_bytes == 0
        out[direction] = frames
    return out


def unknown_fields(msg: Message, path: str = "") -> list[str]:
    """Fields on the wire that our schema does not describe, anywhere in the message."""
    unknown = UnknownFieldSet(msg)
    found = [f"{path}#{unknown[i].field_number}" for i in range(len(unknown))]
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        items = value if field.is_repeated else [value]
        for item in items:
            found += unknown_fields(item, f"{path}.{field.name}")
    return found


def all_frames(recording: Recording) -> list[Frame]:
    conns, _ = recording
    return [f for c in conns for fs in decode_connection(c).values() for f in fs]


def test_schema_describes_every_field_on_the_wire(unbatched: Recording, batched: Recording) -> None:
    for frame in all_frames(unbatched) + all_frames(batched):
        assert unknown_fields(frame.command) == [], frame.command_name
        if frame.metadata is not None:
            assert unknown_fields(frame.metadata) == []


def test_handshake_and_checksums(unbatched: Recording) -> None:
    conns, manifest = unbatched
    assert manifest["connections"] == len(conns) == 1
    frames = decode_connection(conns[0])
    c2b, b2c = frames[Direction.CLIENT_TO_BROKER], frames[Direction.BROKER_TO_CLIENT]
    assert c2b[0].command_name == "CONNECT"
    assert c2b[0].body.client_version.startswith("Pulsar-CPP")
    assert b2c[0].command_name == "CONNECTED"
    # The client checksums every SEND; pulsar-lite's MESSAGE frames carry none (PEERS.md).
    sends = [f for f in c2b if f.command_name == "SEND"]
    messages = [f for f in b2c if f.command_name == "MESSAGE"]
    assert sends and all(f.checksum is Checksum.VALID for f in sends)
    assert messages and all(f.checksum is Checksum.ABSENT for f in messages)
    assert all(f.checksum_expected == f.checksum_computed for f in sends)


def test_unbatched_payloads_match_what_the_client_sent(unbatched: Recording) -> None:
    conns, manifest = unbatched
    frames = decode_connection(conns[0])
    sends = [f for f in frames[Direction.CLIENT_TO_BROKER] if f.command_name == "SEND"]
    sent = manifest["sent"]
    assert len(sends) == len(sent)
    for frame, expected in zip(sends, sent, strict=True):
        assert frame.payload is not None
        assert hashlib.sha256(frame.payload).hexdigest() == expected["sha256"]
        assert len(frame.payload) == expected["size"]
        assert frame.metadata.partition_key == expected["key"]
        props = {kv.key: kv.value for kv in frame.metadata.properties}
        assert props == expected["properties"]
        assert frame.body.sequence_id == frame.metadata.sequence_id
    delivered = [f for f in frames[Direction.BROKER_TO_CLIENT] if f.command_name == "MESSAGE"]
    received = manifest["received"]
    assert len(delivered) == len(received)  # duplicates included: the client saw them too
    by_id = {(r["message_id"]["ledger_id"], r["message_id"]["entry_id"]): r for r in received}
    for frame in delivered:
        mid = frame.body.message_id
        expected = by_id[(mid.ledgerId, mid.entryId)]
        assert frame.payload is not None
        assert hashlib.sha256(frame.payload).hexdigest() == expected["sha256"]


def test_batched_sends_carry_every_message(batched: Recording) -> None:
    conns, manifest = batched
    frames = decode_connection(conns[0])
    sends = [f for f in frames[Direction.CLIENT_TO_BROKER] if f.command_name == "SEND"]
    assert sum(f.body.num_messages for f in sends) == len(manifest["sent"])
    assert sum(f.metadata.num_messages_in_batch for f in sends) == len(manifest["sent"])
    receipts = [f for f in frames[Direction.BROKER_TO_CLIENT] if f.command_name == "SEND_RECEIPT"]
    assert sorted(f.body.sequence_id for f in receipts) == sorted(f.body.sequence_id for f in sends)


def test_real_recv_boundaries_do_not_matter(batched: Recording, large: Recording) -> None:
    for conns, _ in (batched, large):
        for conn in conns:
            for chunks in (conn.c2b_chunks, conn.b2c_chunks):
                pieces = [data for _, data in chunks]
                whole, _, _ = decode([b"".join(pieces)])
                split, _, _ = decode(pieces)
                assert [frame_key(f) for f in split] == [frame_key(f) for f in whole]


def test_one_mebibyte_message(large: Recording) -> None:
    conns, manifest = large
    (expected,) = manifest["sent"]
    frames = [f for c in conns for f in decode_connection(c)[Direction.CLIENT_TO_BROKER]]
    (send,) = [f for f in frames if f.command_name == "SEND"]
    assert send.checksum is Checksum.VALID
    assert send.payload is not None
    assert len(send.payload) == expected["size"] == 1 << 20
    assert hashlib.sha256(send.payload).hexdigest() == expected["sha256"]
    assert send.last_packet > send.first_packet  # it spanned several reads
