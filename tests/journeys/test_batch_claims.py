"""Journeys of batches that claim more entries than their bytes hold (issue 42, item 6).

A batch's rows are the entries its payload holds, not `num_messages_in_batch`; a batch-index
ack of an entry the capture never showed names at most 64 entries per `ack_set` word. The
expected counts come from the crafted bytes: entries written here, bytes of the smallest
entry (a 4-byte size, `payload_size` as a tag byte and a one-byte varint, no payload), bits
of 64-bit words.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from tests.support.crafted import C2B, T0_US, Msg, msg
from tests.support.scenes import Scene, journeys, message, producer, send, subscribe

CLAIM = 10_000


def _meta(**kw: Any) -> MessageMetadata:
    return MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0_US // 1000, **kw)


def _entries(n: int) -> bytes:
    """n batch entries of one payload byte each, written as the clients write them."""
    out = b""
    for seq in range(n):
        single = SingleMessageMetadata(payload_size=1, sequence_id=seq).SerializeToString()
        out += struct.pack(">I", len(single)) + single + b"x"
    return out


def _rows(tmp_path: Path, *frames: Msg, produce: bool = False) -> list[dict[str, Any]]:
    s = Scene()
    s.open()
    for m in [*(producer(name="p") if produce else []), *subscribe()]:
        s.at(0, m)
    for i, m in enumerate(frames):
        s.at(1 + i, m)
    return journeys(s.write(tmp_path / "c.pcap"))


def test_a_claim_in_an_empty_payload_is_one_delivery(tmp_path: Path) -> None:
    """num_messages_in_batch 10,000, no payload byte: no entry fits, the entry's delivery
    is one row (the whole entry), not 10,000."""
    rows = _rows(tmp_path, message(5, payload=b"", metadata=_meta(num_messages_in_batch=CLAIM)))
    assert [(r["batch_index"], r["deliveries"]) for r in rows] == [(None, 1)]


def test_a_claim_makes_the_entries_the_payload_holds(tmp_path: Path) -> None:
    """Claims of 10,000 with 3 entries written (MESSAGE) and 2 (SEND): 3 and 2 rows."""
    delivered = message(5, payload=_entries(3), metadata=_meta(num_messages_in_batch=CLAIM))
    rows = _rows(tmp_path, delivered)
    assert sorted(r["batch_index"] for r in rows) == [0, 1, 2]
    assert {r["batch_size"] for r in rows} == {CLAIM}  # the claim, as the wire says it
    sent = send(0, payload=_entries(2), metadata=_meta(num_messages_in_batch=CLAIM))
    rows = _rows(tmp_path, sent, produce=True)
    assert sorted(r["batch_index"] for r in rows) == [0, 1]


def test_an_undecodable_batch_is_bounded_by_its_bytes(tmp_path: Path) -> None:
    """An encrypted batch (not decoded) of 60 bytes claiming 10,000: at most one entry per
    6 bytes, 10 rows."""
    meta = _meta(num_messages_in_batch=CLAIM, encryption_keys=[{"key": "k", "value": b"v"}])
    rows = _rows(tmp_path, message(5, payload=bytes(60), metadata=meta))
    assert sorted(r["batch_index"] for r in rows) == list(range(10))


def _batch_ack(ack_set: list[int], batch_size: int) -> Msg:
    mid = {"ledgerId": 9, "entryId": 5, "ack_set": ack_set, "batch_size": batch_size}
    return msg(C2B, "ACK", consumer_id=2, ack_type=0, message_id=[mid])


def test_an_ack_of_an_unseen_batch_names_64_entries_per_word(tmp_path: Path) -> None:
    """ack_set [1] (entry 0 still unacknowledged), batch_size 10,000, entry never seen:
    the word's 63 clear bits are 63 acked rows, not 9,999."""
    rows = _rows(tmp_path, _batch_ack([1], CLAIM))
    assert sorted(r["batch_index"] for r in rows) == list(range(1, 64))
    assert all(r["acked_ts"] is not None and r["deliveries"] == 0 for r in rows)


def test_an_ack_of_an_unseen_batch_stops_at_its_size(tmp_path: Path) -> None:
    """Two words, batch_size 100: entries 1 .. 99 (the size bounds it before the words)."""
    rows = _rows(tmp_path, _batch_ack([1, 0], 100))
    assert sorted(r["batch_index"] for r in rows) == list(range(1, 100))
