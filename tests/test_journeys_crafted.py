"""The journeys table on crafted captures: every row is what the scene did.

Each scene sends its frames at chosen seconds on chosen connections; a row's times, packet
numbers and latencies are computed here from the scene's own times (`us`) and the order of
its packets (`Scene.packet`), its ids and names from the frames it sent (docs/journeys.md
gives the join rules), never from the dissector's output.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from dissector.read import read_capture
from tests.support.crafted import B2C, C2B, T0_US, Conn, Msg, msg
from tests.support.scenes import (
    SUB,
    TOPIC,
    Scene,
    ack,
    flow,
    journeys,
    message,
    producer,
    receipt,
    send,
    subscribe,
    two_hosts,
    us,
)

PUBLISH_MS = T0_US // 1000  # the publish time crafted frames carry (crafted.msg)
PRODUCER = "diag-producer"


def _meta(seq: int, **kw: Any) -> MessageMetadata:
    return MessageMetadata(producer_name=PRODUCER, sequence_id=seq, publish_time=PUBLISH_MS, **kw)


def _send(seq: int, **kw: Any) -> Msg:
    return send(seq, metadata=_meta(seq), **kw)


def _message(entry: int, seq: int, cid: int = 2, **kw: Any) -> Msg:
    return message(entry, cid=cid, metadata=_meta(seq), **kw)


def _sub(name: str, cid: int, rid: int, sub_type: int, consumer: str) -> list[Msg]:
    return [
        msg(
            C2B, "SUBSCRIBE", topic=TOPIC, subscription=name, subType=sub_type,
            consumer_id=cid, request_id=rid, consumer_name=consumer,
        ),
        msg(B2C, "SUCCESS", request_id=rid),
    ]  # fmt: skip


def _opened(s: Scene, *conns: Conn) -> None:
    for conn in conns:
        s.open(conn)


def _producer_and_consumer() -> tuple[Scene, Conn, Conn]:
    """A scene with a producer's connection and a subscribed consumer's, both opened."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    _opened(s, p, c)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    for m in subscribe():
        s.at(0, m, c)
    return s, p, c


def _by(rows: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    out = {r[key]: r for r in rows}
    assert len(out) == len(rows)
    return out


# ------------------------------------------------------------------- produce and consume


def test_round_trip_to_two_subscriptions(tmp_path: Path) -> None:
    """One message from a producer's connection to two subscriptions on two others: two
    rows, each hop's time and packet the scene's, each latency the difference of two of
    the scene's times."""
    s = Scene()
    p, a, b = Conn(client_port=40001), Conn(client_port=40002), Conn(client_port=40003)
    _opened(s, p, a, b)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    for m in _sub("orders-a", cid=2, rid=2, sub_type=0, consumer="alice"):
        s.at(0, m, a)
    for m in _sub("orders-b", cid=5, rid=3, sub_type=1, consumer="bob"):
        s.at(0, m, b)
    s.at(0.1, flow(10), a).at(0.1, flow(10, cid=5), b)
    sent, stored = _send(7), receipt(7, entry=3)
    to_a, to_b = _message(3, 7), _message(3, 7, cid=5)
    ack_a, ack_b = ack(3), ack(3, cid=5)
    s.at(1.0, sent, p).at(1.002, stored, p)
    s.at(1.005, to_a, a).at(1.250, ack_a, a)
    s.at(1.007, to_b, b).at(2.5, ack_b, b)
    for each in (p, a, b):
        s.close(3, each)
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "subscription")

    assert set(rows) == {"orders-a", "orders-b"}
    for name, delivered, acked, consumer, cid, conn, sub_type in (
        ("orders-a", to_a, ack_a, "alice", 2, 2, "Exclusive"),
        ("orders-b", to_b, ack_b, "bob", 5, 3, "Shared"),
    ):
        row = rows[name]
        t_delivered = {"orders-a": 1.005, "orders-b": 1.007}[name]
        t_acked = {"orders-a": 1.250, "orders-b": 2.5}[name]
        assert row == {
            **row,
            "ts": us(1.0),
            "conn_id": 1,
            "topic": TOPIC,
            "ledger_id": 9,
            "entry_id": 3,
            "partition": -1,
            "batch_index": None,
            "batch_size": None,
            "chunks": None,
            "producer_name": PRODUCER,
            "sequence_id": 7,
            "publish_time": PUBLISH_MS * 1000,
            "producer_conn_id": 1,
            "producer_id": 1,
            "send_ts": us(1.0),
            "send_packet": s.packet(sent),
            "receipt_ts": us(1.002),
            "receipt_packet": s.packet(stored),
            "persist_us": 2_000,
            "error": None,
            "sub_type": sub_type,
            "consumer_conn_id": conn,
            "consumer_id": cid,
            "consumer_name": consumer,
            "delivered_ts": us(t_delivered),
            "delivered_packet": s.packet(delivered),
            "dispatch_us": us(t_delivered) - us(1.002),
            "acked_ts": us(t_acked),
            "acked_packet": s.packet(acked),
            "consume_us": us(t_acked) - us(t_delivered),
            "end_to_end_us": us(t_acked) - us(1.0),
            "deliveries": 1,
            "redeliveries": 0,
            "broker_entry_ts": None,
            "broker_skew_us": None,
            "trace_id": None,
            "evicted": False,
        }
    assert rows["orders-a"]["dispatch_us"] == 3_000 and rows["orders-a"]["consume_us"] == 245_000
    assert rows["orders-b"]["end_to_end_us"] == 1_500_000


def test_delivery_seen_before_the_receipt_is_one_message(tmp_path: Path) -> None:
    """The broker dispatches as it stores: a MESSAGE may precede the receipt in the capture.
    The receipt's id joins them (dispatch_us < 0), one row."""
    s, p, c = _producer_and_consumer()
    s.at(1.0, _send(0), p).at(1.001, _message(4, 0), c).at(1.003, receipt(0, entry=4), p)
    s.at(1.2, ack(4), c)
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert (row["send_ts"], row["receipt_ts"], row["delivered_ts"]) == (us(1), us(1.003), us(1.001))
    assert row["dispatch_us"] == -2_000 and row["persist_us"] == 3_000
    assert (row["subscription"], row["deliveries"], row["entry_id"]) == (SUB, 1, 4)


def test_producer_whose_producer_command_was_missed(tmp_path: Path) -> None:
    """The capture began after the PRODUCER: the SEND's topic is unknown, so a MESSAGE seen
    before the receipt cannot find it by name; the receipt's id joins them (by id alone,
    one message has it), and the row takes the consumer's topic."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p, connect=False)
    s.open(c)
    for m in subscribe():
        s.at(0, m, c)
    s.at(1.0, _send(0), p).at(1.001, _message(4, 0), c).at(1.003, receipt(0, entry=4), p)
    s.at(1.2, ack(4), c)
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    # connections are numbered as they appear: the consumer's at 0 s, the producer's at 1 s
    assert (row["topic"], row["producer_conn_id"], row["consumer_conn_id"]) == (TOPIC, 2, 1)
    assert (row["persist_us"], row["dispatch_us"], row["end_to_end_us"]) == (
        3_000,
        -2_000,
        200_000,
    )


def test_receipt_lost_joins_by_producer_name_and_sequence_id(tmp_path: Path) -> None:
    """The capture lost the receipt: the MESSAGE's metadata (producer name, sequence id)
    finds the SEND still waiting for it."""
    s, p, c = _producer_and_consumer()
    s.at(1.0, _send(0), p).at(1.0, _send(1), p)
    s.at(1.1, _message(6, 1), c).at(1.3, ack(6), c)
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "sequence_id")
    assert rows[1]["entry_id"] == 6 and rows[1]["subscription"] == SUB
    assert rows[1]["end_to_end_us"] == 300_000 and rows[1]["receipt_ts"] is None
    assert rows[0]["subscription"] is None and rows[0]["entry_id"] is None


# -------------------------------------------------------------------------- redelivery


def test_redelivery_after_a_reconnect(tmp_path: Path) -> None:
    """Delivered on one connection, never acked there; the consumer reconnects (a new
    connection, a new consumer id, the same subscription) and gets it again, with the
    broker's redelivery_count, and acks it: one row, two deliveries, one redelivery; the
    first delivery's time and connection, the ack's time on the second."""
    s = Scene()
    p, first, second = Conn(client_port=40001), Conn(client_port=40002), Conn(client_port=40003)
    _opened(s, p, first)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    for m in subscribe():
        s.at(0, m, first)
    delivered, again, acked = (
        _message(2, 0),
        _message(2, 0, cid=8, redelivery_count=1),
        ack(2, cid=8),
    )
    s.at(1.0, _send(0), p).at(1.001, receipt(0, entry=2), p).at(1.002, delivered, first)
    s.close(5.0, first)
    s.open(second, 6.0)
    for m in subscribe(cid=8, rid=4):
        s.at(6.0, m, second)
    s.at(6.1, again, second).at(6.3, acked, second)
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert (row["deliveries"], row["redeliveries"]) == (2, 1)
    assert (row["delivered_ts"], row["delivered_packet"]) == (us(1.002), s.packet(delivered))
    assert (row["acked_ts"], row["acked_packet"]) == (us(6.3), s.packet(acked))
    assert (row["consumer_conn_id"], row["consumer_id"]) == (2, 2)
    assert row["consume_us"] == us(6.3) - us(1.002)
    assert row["end_to_end_us"] == us(6.3) - us(1.0)


def test_redelivery_count_beyond_the_deliveries_seen(tmp_path: Path) -> None:
    """The capture saw one delivery whose redelivery_count says 3 earlier ones."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(1, _message(2, 0, redelivery_count=3)).at(2, ack(2))
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert (row["deliveries"], row["redeliveries"]) == (1, 3)


# -------------------------------------------------------------------- never delivered


def test_messages_never_delivered(tmp_path: Path) -> None:
    """Produced and receipted, produced and never answered, refused by the broker: one row
    each, no subscription, nothing after the last hop seen."""
    s = Scene()
    s.open()
    for m in producer(name=PRODUCER):
        s.at(0, m)
    refused = msg(B2C, "SEND_ERROR", producer_id=1, sequence_id=2, error=2, message="persistence")
    s.at(1, _send(0)).at(1.004, receipt(0, entry=1)).at(2, _send(1)).at(3, _send(2))
    s.at(3.5, refused)
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "sequence_id")
    assert set(rows) == {0, 1, 2}
    for row in rows.values():
        assert row["subscription"] is None and row["delivered_ts"] is None
        assert row["deliveries"] == 0 and row["acked_ts"] is None
        assert row["end_to_end_us"] is None and row["dispatch_us"] is None
    assert (rows[0]["entry_id"], rows[0]["persist_us"], rows[0]["error"]) == (1, 4_000, None)
    assert (rows[1]["receipt_ts"], rows[1]["persist_us"], rows[1]["error"]) == (None, None, None)
    assert rows[2]["error"] == "PersistenceError" and rows[2]["receipt_ts"] is None
    assert [rows[k]["ts"] for k in (0, 1, 2)] == [us(1), us(2), us(3)]


# ------------------------------------------------------------------------------- batches


def _batch(seqs: list[int]) -> bytes:
    out = b""
    for seq in seqs:
        single = SingleMessageMetadata(payload_size=1, sequence_id=seq).SerializeToString()
        out += struct.pack(">I", len(single)) + single + b"x"
    return out


def test_batch_entries_and_batch_index_acks(tmp_path: Path) -> None:
    """A batch of 3 (the entries' own sequence ids 10, 12, 14), stored as one entry,
    delivered in one MESSAGE; a batch-index ack (ack_set: bit 2 still set) acknowledges
    entries 0 and 1, a whole-entry ack later the last: three rows."""
    s, p, c = _producer_and_consumer()
    meta = _meta(10, num_messages_in_batch=3)
    batched = send(10, payload=_batch([10, 12, 14]), metadata=meta, num_messages=3)
    delivered = message(5, payload=_batch([10, 12, 14]), metadata=meta)
    part = msg(
        C2B, "ACK", consumer_id=2, ack_type=0,
        message_id=[{"ledgerId": 9, "entryId": 5, "ack_set": [0b100]}],
    )  # fmt: skip
    rest = ack(5)
    s.at(1.0, batched, p).at(1.001, receipt(10, entry=5), p)
    s.at(1.002, delivered, c).at(1.1, part, c).at(1.4, rest, c)
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "batch_index")
    assert set(rows) == {0, 1, 2}
    for index, seq, acked in ((0, 10, 1.1), (1, 12, 1.1), (2, 14, 1.4)):
        row = rows[index]
        assert (row["entry_id"], row["batch_size"], row["sequence_id"]) == (5, 3, seq)
        assert (row["send_ts"], row["receipt_ts"], row["delivered_ts"]) == (
            us(1.0),
            us(1.001),
            us(1.002),
        )
        assert row["acked_ts"] == us(acked) and row["consume_us"] == us(acked) - us(1.002)
        assert row["deliveries"] == 1 and row["subscription"] == SUB


def test_batch_delivered_again_without_its_acked_entries(tmp_path: Path) -> None:
    """A MESSAGE whose ack_set leaves out entries 0 and 1 (acked before) delivers only
    entry 2 again."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    meta = _meta(0, num_messages_in_batch=3)
    s.at(1, message(5, payload=_batch([0, 1, 2]), metadata=meta))
    s.at(2, message(5, payload=_batch([0, 1, 2]), metadata=meta, ack_set=[0b100]))
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "batch_index")
    assert {i: r["deliveries"] for i, r in rows.items()} == {0: 1, 1: 1, 2: 2}


def test_cumulative_ack(tmp_path: Path) -> None:
    """A cumulative ack of entry 3 acknowledges entries 1 to 3 delivered before it, not 4."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    for i in (1, 2, 3, 4):
        s.at(i / 10, _message(i, i))
    s.at(1.0, ack(3, cumulative=True))
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "entry_id")
    assert {e: r["acked_ts"] for e, r in rows.items()} == {
        1: us(1.0),
        2: us(1.0),
        3: us(1.0),
        4: None,
    }


# ------------------------------------------------------------------ one side of the capture


def test_capture_of_the_consumer_side_only(tmp_path: Path) -> None:
    """Only the consumer's connection: the MESSAGE's metadata names the producer; no
    producer hop, so no latency that needs one."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    delivered, acked = _message(3, 42), ack(3)
    s.at(1.0, delivered).at(1.75, acked)
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert row == {
        **row,
        "ts": us(1.0),
        "conn_id": 1,
        "topic": TOPIC,
        "ledger_id": 9,
        "entry_id": 3,
        "producer_name": PRODUCER,
        "sequence_id": 42,
        "publish_time": PUBLISH_MS * 1000,
        "producer_conn_id": None,
        "send_ts": None,
        "receipt_ts": None,
        "persist_us": None,
        "dispatch_us": None,
        "end_to_end_us": None,
        "subscription": SUB,
        "consumer_conn_id": 1,
        "delivered_packet": s.packet(delivered),
        "acked_packet": s.packet(acked),
        "consume_us": 750_000,
        "deliveries": 1,
    }


def test_subscribe_missed_is_a_subscription_of_its_own(tmp_path: Path) -> None:
    """A consumer whose SUBSCRIBE the capture missed: its deliveries still join the
    producer's message (by id alone: its topic is unknown), with no subscription name."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p)
    s.open(c, connect=False)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    s.at(1.0, _send(0), p).at(1.001, receipt(0, entry=7), p)
    s.at(1.002, _message(7, 0), c).at(1.5, ack(7), c)
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert row["subscription"] is None and row["topic"] == TOPIC
    assert (row["producer_conn_id"], row["consumer_conn_id"]) == (1, 2)
    assert row["end_to_end_us"] == 500_000 and row["deliveries"] == 1


def test_ack_of_a_delivery_not_captured(tmp_path: Path) -> None:
    """The capture began after the delivery: the ack still makes the row, 0 deliveries."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(1.0, ack(3))
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert (row["entry_id"], row["deliveries"], row["delivered_ts"]) == (3, 0, None)
    assert row["acked_ts"] == us(1.0) and row["ts"] == us(1.0)


# ------------------------------------------------------------------------------- chunks


def _chunk_meta(chunk: int, of: int) -> MessageMetadata:
    return _meta(0, uuid="u-1", chunk_id=chunk, num_chunks_from_msg=of, total_chunk_msg_size=of * 4)


def test_chunked_message(tmp_path: Path) -> None:
    """Three chunks, each stored as an entry (ids 20, 21, 22): one message whose id is the
    first chunk's; sent at the first chunk, stored at the last receipt, delivered at the
    last chunk's MESSAGE, acked by the ack naming the chunks' ids."""
    s, p, c = _producer_and_consumer()
    for i in range(3):
        chunk = send(0, payload=b"part", metadata=_chunk_meta(i, 3), is_chunk=True)
        s.at(1 + i / 10, chunk, p).at(1.05 + i / 10, receipt(0, entry=20 + i), p)
    for i in range(3):
        s.at(2 + i / 10, message(20 + i, payload=b"part", metadata=_chunk_meta(i, 3)), c)
    s.at(3, ack(20, 21, 22), c)
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert (row["entry_id"], row["chunks"], row["batch_index"]) == (20, 3, None)
    assert (row["send_ts"], row["receipt_ts"]) == (us(1.0), us(1.25))
    assert (row["delivered_ts"], row["acked_ts"]) == (us(2.2), us(3))
    assert row["deliveries"] == 1 and row["end_to_end_us"] == 2_000_000


# ------------------------------------------------------------ acks before what they ack


def test_ack_seen_before_the_receipt_of_a_batch(tmp_path: Path) -> None:
    """Frames of different directions may reach the capture out of order (the benchmark's
    mix capture writes a client's SEND and ACK, then the broker's receipt and MESSAGE): an
    ACK of the whole entry, seen before the receipt, acknowledges every entry of the batch
    once the receipt names the entry; no row of its own."""
    s = Scene()
    s.open()
    for m in [*producer(name=PRODUCER), *subscribe()]:
        s.at(0, m)
    meta = _meta(10, num_messages_in_batch=3)
    s.at(1.0, send(10, payload=_batch([10, 11, 12]), metadata=meta, num_messages=3))
    s.at(1.1, ack(5)).at(1.2, receipt(10, entry=5))
    s.at(1.3, message(5, payload=_batch([10, 11, 12]), metadata=meta))
    rows = _by(journeys(s.write(tmp_path / "c.pcap")), "batch_index")
    assert set(rows) == {0, 1, 2}
    for row in rows.values():
        assert (row["acked_ts"], row["delivered_ts"], row["deliveries"]) == (us(1.1), us(1.3), 1)
        assert row["send_ts"] == us(1.0) and row["subscription"] == SUB


def test_acks_seen_before_the_receipts_of_chunks(tmp_path: Path) -> None:
    """The same for a chunked message: each chunk's ack before its receipt; one row."""
    s = Scene()
    s.open()
    for m in [*producer(name=PRODUCER), *subscribe()]:
        s.at(0, m)
    for i in range(3):
        chunk = send(0, payload=b"part", metadata=_chunk_meta(i, 3), is_chunk=True)
        s.at(1 + i / 10, chunk).at(1.01 + i / 10, ack(20 + i)).at(
            1.02 + i / 10, receipt(0, entry=20 + i)
        )
        s.at(1.03 + i / 10, message(20 + i, payload=b"part", metadata=_chunk_meta(i, 3)))
    (row,) = journeys(s.write(tmp_path / "c.pcap"))
    assert (row["entry_id"], row["chunks"], row["deliveries"]) == (20, 3, 1)
    assert (row["acked_ts"], row["receipt_ts"], row["delivered_ts"]) == (
        us(1.01),
        us(1.22),
        us(1.23),
    )


# -------------------------------------------------------------------- several captures


def test_captures_of_two_hosts_read_together(tmp_path: Path) -> None:
    """The producer's host and the consumer's host captured apart, read together (merged
    by time): the journeys of the capture that saw both (connections numbered alike: the
    producer's opens first)."""
    s, p, c = two_hosts(PRODUCER)
    s.at(1.0, _send(0), p).at(1.002, receipt(0, entry=3), p).at(1.005, _message(3, 0), c)
    s.at(1.3, ack(3), c).at(2.0, _send(1), p)
    s.close(3, p)
    s.close(3, c)
    whole = journeys(s.write(tmp_path / "both.pcap"))
    apart = s.write_apart({p: tmp_path / "producer-host.pcap", c: tmp_path / "consumer-host.pcap"})
    table = read_capture(apart, tables=["journeys"]).arrow["journeys"]
    assert table.equals(read_capture(tmp_path / "both.pcap", tables=["journeys"]).arrow["journeys"])
    assert len(whole) == 2 and whole[0]["end_to_end_us"] == 300_000
