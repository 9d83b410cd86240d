"""The end-to-end latencies the joiner tells as its join first knows them (`end_to_end`).

A read's joiner, given a listener (the metrics' feed is one), tells each (topic,
subscription, end_to_end_us) once, when the join first knows it: the subscription's first
ACK of a message whose SEND was seen, or, when the ACK came first, the receipt that joins
them. Each scene's expected values are its own times (`us`) and packets (`Scene.packet`);
on every sample capture, what was told is the journeys table's end_to_end_us, row for row,
and the table is the same with and without a listener.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from dissector.events import Frame
from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from dissector.read.options import ReaderOptions
from dissector.read.tables import read_tables, stream_tables
from tests.support.crafted import C2B, Conn, Msg, msg
from tests.support.scenes import (
    SUB,
    TOPIC,
    Scene,
    ack,
    journeys,
    message,
    producer,
    receipt,
    send,
    subscribe,
    us,
)

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
SAMPLES = sorted(PCAPS.glob("*.pcap*"))
PRODUCER = "e2e-producer"
#: (topic, subscription, end_to_end_us, packet of the latest frame when told)
Told = tuple[str | None, str | None, int, int]


def told(path: Path) -> list[Told]:
    """What the joiner of a read of `path` told, each with the packet of the frame it
    was reading then (a frame's facts follow it: the ACK, or the receipt that joined)."""
    latest = [0]
    out: list[Told] = []

    def watch(ev: object) -> None:
        if type(ev) is Frame:
            latest[0] = ev.last_packet

    stream_tables(
        [path],
        ReaderOptions(),
        ["journeys"],
        lambda _name, _batch: None,
        watch=watch,
        end_to_end=lambda topic, sub, e2e: out.append((topic, sub, e2e, latest[0])),
    )
    return out


def _meta(seq: int, **kw: Any) -> MessageMetadata:
    return MessageMetadata(producer_name=PRODUCER, sequence_id=seq, publish_time=1, **kw)


def _batch(seqs: list[int]) -> bytes:
    out = b""
    for seq in seqs:
        single = SingleMessageMetadata(payload_size=1, sequence_id=seq).SerializeToString()
        out += struct.pack(">I", len(single)) + single + b"x"
    return out


def _scene() -> Scene:
    """One connection: a producer and a subscription (consumer id 2)."""
    s = Scene()
    s.open()
    for m in [*producer(name=PRODUCER), *subscribe()]:
        s.at(0, m)
    return s


def _e2e(path: Path) -> list[int]:
    return sorted(r["end_to_end_us"] for r in journeys(path) if r["end_to_end_us"] is not None)


# ------------------------------------------------------------------------ crafted scenes


def test_told_at_each_subscriptions_first_ack(tmp_path: Path) -> None:
    """One message, two subscriptions on two connections: each told at its own first ACK
    (the later ACK of the first subscription tells nothing), the scene's ack - send."""
    s = Scene()
    p, a, b = Conn(client_port=40001), Conn(client_port=40002), Conn(client_port=40003)
    for conn in (p, a, b):
        s.open(conn)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    for conn, name, cid in ((a, "orders-a", 2), (b, "orders-b", 5)):
        sub = msg(C2B, "SUBSCRIBE", topic=TOPIC, subscription=name, subType=1, consumer_id=cid,
                  request_id=cid)  # fmt: skip
        s.at(0, sub, conn)
    ack_a, ack_b, again = ack(3), ack(3, cid=5), ack(3)
    s.at(1.0, send(7, metadata=_meta(7)), p).at(1.002, receipt(7, entry=3), p)
    s.at(1.005, message(3, metadata=_meta(7)), a).at(1.25, ack_a, a)
    s.at(1.007, message(3, cid=5, metadata=_meta(7)), b).at(2.5, ack_b, b).at(2.6, again, a)
    path = s.write(tmp_path / "c.pcap")
    assert told(path) == [
        (TOPIC, "orders-a", 250_000, s.packet(ack_a)),
        (TOPIC, "orders-b", 1_500_000, s.packet(ack_b)),
    ]
    assert _e2e(path) == [250_000, 1_500_000]


def test_a_cumulative_ack_tells_each_message_it_acks(tmp_path: Path) -> None:
    """Three messages delivered, a cumulative ACK of the second: two told, at that ACK."""
    s = _scene()
    for seq in (0, 1, 2):
        t = 1 + seq / 10
        s.at(t, send(seq, metadata=_meta(seq))).at(t + 0.01, receipt(seq, entry=seq))
        s.at(t + 0.02, message(seq, metadata=_meta(seq)))
    cumulative = ack(1, cumulative=True)
    s.at(2.0, cumulative)
    path = s.write(tmp_path / "c.pcap")
    at = s.packet(cumulative)
    assert told(path) == [(TOPIC, SUB, 1_000_000, at), (TOPIC, SUB, 900_000, at)]
    assert _e2e(path) == [900_000, 1_000_000]


def test_batch_entries_told_as_their_acks_come(tmp_path: Path) -> None:
    """A batch of 3: a batch-index ACK (bit 2 still set) tells entries 0 and 1, a later
    whole-entry ACK entry 2 alone."""
    s = _scene()
    meta = _meta(10, num_messages_in_batch=3)
    s.at(1.0, send(10, payload=_batch([10, 11, 12]), metadata=meta, num_messages=3))
    s.at(1.001, receipt(10, entry=5))
    s.at(1.002, message(5, payload=_batch([10, 11, 12]), metadata=meta))
    part = msg(C2B, "ACK", consumer_id=2, ack_type=0,
               message_id=[{"ledgerId": 9, "entryId": 5, "ack_set": [0b100]}])  # fmt: skip
    rest = ack(5)
    s.at(1.1, part).at(1.4, rest)
    path = s.write(tmp_path / "c.pcap")
    one, three = s.packet(part), s.packet(rest)
    assert told(path) == [
        (TOPIC, SUB, 100_000, one),
        (TOPIC, SUB, 100_000, one),
        (TOPIC, SUB, 400_000, three),
    ]
    assert _e2e(path) == [100_000, 100_000, 400_000]


def test_an_ack_before_the_receipt_is_told_when_the_receipt_joins_it(tmp_path: Path) -> None:
    """An ACK of the whole entry seen before the receipt of the batch (frames of two
    directions out of order): nothing is known at the ACK; the receipt joins it to the
    SEND, and then every entry is told."""
    s = _scene()
    meta = _meta(10, num_messages_in_batch=3)
    s.at(1.0, send(10, payload=_batch([10, 11, 12]), metadata=meta, num_messages=3))
    stored = receipt(10, entry=5)
    s.at(1.1, ack(5)).at(1.2, stored)
    path = s.write(tmp_path / "c.pcap")
    assert told(path) == [(TOPIC, SUB, 100_000, s.packet(stored))] * 3
    assert _e2e(path) == [100_000] * 3


def test_without_the_send_nothing_is_told(tmp_path: Path) -> None:
    """The capture saw the receipt, the delivery and the ACK, not the SEND: no end-to-end
    latency, none told."""
    s = _scene()
    s.at(1.0, receipt(0, entry=4)).at(1.1, message(4, metadata=_meta(0))).at(1.2, ack(4))
    path = s.write(tmp_path / "c.pcap")
    assert told(path) == []
    (row,) = journeys(path)
    assert row["acked_ts"] == us(1.2) and row["end_to_end_us"] is None


def _chunk(i: int) -> Msg:
    meta = _meta(0, uuid="u-1", chunk_id=i, num_chunks_from_msg=2, total_chunk_msg_size=8)
    return send(0, payload=b"part", metadata=meta, is_chunk=True)


def test_an_earlier_ack_joined_later_changes_nothing(tmp_path: Path) -> None:
    """A chunked message (chunks stored as entries 20 and 21): an ACK naming the second
    chunk's id comes before that chunk's receipt (nothing names it yet), then an ACK of the
    first chunk's id, joined at once: told then. The receipt that joins the earlier ACK
    changes neither what was told nor the row (its ack stays the one told)."""
    s = _scene()
    s.at(1.0, _chunk(0)).at(1.01, receipt(0, entry=20)).at(1.1, _chunk(1))
    first = ack(20)
    s.at(1.5, ack(21)).at(1.6, first).at(1.7, receipt(0, entry=21))
    path = s.write(tmp_path / "c.pcap")
    assert told(path) == [(TOPIC, SUB, 600_000, s.packet(first))]
    (row,) = journeys(path)
    assert (row["acked_ts"], row["end_to_end_us"], row["receipt_ts"]) == (
        us(1.6),
        600_000,
        us(1.7),
    )


# ------------------------------------------------------------------------ sample captures


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_what_is_told_is_the_tables_end_to_end_row_for_row(path: Path) -> None:
    """Every row with an end_to_end_us told once, with that value, topic and subscription,
    at the packet of its ACK (the samples' receipts come before their ACKs); the journeys
    table is the same whether a listener is told or not."""
    got = told(path)
    table = read_tables(path, tables=["journeys"])["journeys"]
    rows = [r for r in table.to_pylist() if r["end_to_end_us"] is not None]
    assert sorted(got, key=repr) == sorted(
        ((r["topic"], r["subscription"], r["end_to_end_us"], r["acked_packet"]) for r in rows),
        key=repr,
    )
    assert rows  # every sample has acked messages whose SEND it saw
    batches: list[Any] = []
    stream_tables(
        [path],
        ReaderOptions(),
        ["journeys"],
        lambda _name, batch: batches.append(batch),
        end_to_end=lambda *_: None,
    )
    assert table.equals(type(table).from_batches(batches, schema=table.schema))
