"""Crafted captures where the tables must agree on hard cases: late and lost receipts, send
errors, producers closed with SENDs pending, requests pending at a close or at the capture's
end (past and short of the timeout), a producer answered "not ready" first, redeliveries,
individual, cumulative and batch-index acks, two subscriptions, a reconnect.

Input: a folder. Output: `SCENES` (name -> function writing its capture) and `corpus(tmp)`:
every bundled sample (pcaps/) and every crafted capture (these scenes, scenes.faults_capture,
the payload faults, the values capture), name -> path.
Rule: the scenes are frames at chosen times (tests/support/scenes.py); which table is right
when they disagree is decided by the spec and the scene itself, never by one table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from tests.support.crafted import B2C, C2B, Conn, Msg, msg
from tests.support.payload_faults import crafted
from tests.support.scenes import (
    TOPIC,
    Scene,
    ack,
    faults_capture,
    message,
    ping,
    pong,
    producer,
    receipt,
    send,
    subscribe,
)
from tests.support.value_capture import write_value_capture

PCAPS = Path(__file__).resolve().parent.parent.parent / "pcaps"
NAME = "truth-producer"


def _meta(seq: int, **kw: Any) -> MessageMetadata:
    return MessageMetadata(
        producer_name=NAME, sequence_id=seq, publish_time=1_700_000_000_000, **kw
    )


def _send(seq: int, pid: int = 1, **kw: Any) -> Msg:
    return send(seq, pid, metadata=_meta(seq), **kw)


def _message(entry: int, seq: int, cid: int = 2, **kw: Any) -> Msg:
    return message(entry, cid=cid, metadata=_meta(seq), **kw)


def _pair(s: Scene, conn: Conn, t: float, *msgs: Msg) -> None:
    for m in msgs:
        s.at(t, m, conn)


def _keepalive(s: Scene, conn: Conn, *times: float) -> None:
    for t in times:
        s.at(t, ping(), conn).at(t, pong(), conn)


def sends(path: Path) -> Path:
    """Producer 1: receipts in time, one 35 s late, a SEND_ERROR, one never answered (pending
    past the timeout at the capture's end); producer 3 closed by its client with two SENDs
    pending, one answered after the close."""
    s = Scene()  # each connection's frames in time order (their TCP order)
    c = s.open(Conn(client_port=41001))
    _pair(s, c, 0, *producer(name=NAME))
    s.at(1, _send(0), c).at(1.01, receipt(0, entry=0), c)
    s.at(2, _send(1), c).at(3, _send(2), c)
    s.at(3.2, msg(B2C, "SEND_ERROR", producer_id=1, sequence_id=2, error=2,
                  message="persistence"), c)  # fmt: skip
    s.at(4, _send(3), c)
    _pair(s, c, 5, *producer(pid=3, rid=3, name="truth-closing"))
    s.at(6, send(0, 3), c).at(6, send(1, 3), c)
    s.at(8, msg(C2B, "CLOSE_PRODUCER", producer_id=3, request_id=4), c)
    s.at(8.1, receipt(0, 3, entry=7), c).at(8.2, msg(B2C, "SUCCESS", request_id=4), c)
    _keepalive(s, c, 20)
    s.at(37, receipt(1, entry=1), c)
    _keepalive(s, c, 40, 60)
    return s.write(path)


def requests(path: Path) -> Path:
    """Conn 1: a LOOKUP answered, one pending past the request timeout and one pending short
    of it when the capture ends; conn 2: a PRODUCER answered 'not ready' then ready, and a
    PARTITIONED_METADATA pending when the connection closes."""
    s = Scene()
    one, two = s.open(Conn(client_port=41011)), s.open(Conn(client_port=41012))
    lookup: dict[str, Any] = {"topic": TOPIC, "authoritative": False}
    s.at(1, msg(C2B, "LOOKUP", request_id=1, **lookup), one)
    s.at(1.1, msg(B2C, "LOOKUP_RESPONSE", request_id=1, response=1), one)
    s.at(2, msg(C2B, "LOOKUP", request_id=2, **lookup), one)
    _keepalive(s, one, 20, 40)
    s.at(45, msg(C2B, "LOOKUP", request_id=3, **lookup), one)
    _keepalive(s, one, 50)
    s.at(1, msg(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=5), two)
    s.at(1.5, msg(B2C, "PRODUCER_SUCCESS", request_id=5, producer_name="p", producer_ready=False),
         two)  # fmt: skip
    s.at(3, msg(B2C, "PRODUCER_SUCCESS", request_id=5, producer_name="p", producer_ready=True),
         two)  # fmt: skip
    s.at(4, msg(C2B, "PARTITIONED_METADATA", topic=TOPIC, request_id=6), two)
    s.close(5, two)
    return s.write(path)


def _entries(*seqs: int) -> bytes:
    """A batch payload of one-byte entries whose own sequence ids are `seqs`."""
    metas = [SingleMessageMetadata(payload_size=1, sequence_id=q).SerializeToString() for q in seqs]
    return b"".join(len(m).to_bytes(4, "big") + m + b"x" for m in metas)


def consume(path: Path) -> Path:
    """A producer's connection sends 0..3 and a batch of 3 (seq 10..12); consumer 2 (sub A,
    its own connection) gets 0..3: 0 acked alone, 1 redelivered (asked) then acked, 2 and 3
    by one cumulative ack; the batch acked by batch index (entries 0, 1) then whole. Consumer 4
    (sub B, a second connection) gets 0, never acks, and its connection drops; it comes back
    on a third connection and gets 0 again, acked."""
    s = Scene()
    p = s.open(Conn(client_port=41021))
    a, b, b2 = Conn(client_port=41022), Conn(client_port=41023), Conn(client_port=41024)
    s.open(a, 0.01)
    s.open(b, 0.01)
    _pair(s, p, 0, *producer(name=NAME))
    _pair(s, a, 0.01, *subscribe())
    sub_b = subscribe(cid=4, rid=4)
    sub_b[0] = msg(C2B, "SUBSCRIBE", topic=TOPIC, subscription="B", subType=1, consumer_id=4,
                   request_id=4)  # fmt: skip
    _pair(s, b, 0.01, *sub_b)
    for seq in range(4):
        s.at(1 + seq, _send(seq), p).at(1.01 + seq, receipt(seq, entry=seq), p)
        s.at(1.02 + seq, _message(seq, seq), a)
    meta = _meta(10, num_messages_in_batch=3)
    s.at(6, send(10, payload=_entries(10, 11, 12), metadata=meta, num_messages=3), p)
    s.at(6.01, receipt(10, entry=4), p)
    s.at(6.02, message(4, payload=_entries(10, 11, 12), metadata=meta), a)
    s.at(6.5, ack(0), a)
    ids = [{"ledgerId": 9, "entryId": 1}]
    s.at(7, msg(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=2, message_ids=ids), a)
    s.at(7.1, _message(1, 1, redelivery_count=1), a).at(7.2, ack(1), a)
    s.at(7.5, ack(3, cumulative=True), a)
    part = [{"ledgerId": 9, "entryId": 4, "ack_set": [0b100]}]
    s.at(8, msg(C2B, "ACK", consumer_id=2, ack_type=0, message_id=part), a)
    s.at(9, ack(4), a)
    s.at(1.03, _message(0, 0, cid=4), b)
    s.close(10, b)
    s.open(b2, 11)
    sub_b2 = [msg(C2B, "SUBSCRIBE", topic=TOPIC, subscription="B", subType=1, consumer_id=4,
                  request_id=1), msg(B2C, "SUCCESS", request_id=1)]  # fmt: skip
    _pair(s, b2, 11, *sub_b2)
    s.at(11.1, _message(0, 0, cid=4, redelivery_count=1), b2).at(11.2, ack(0, cid=4), b2)
    for conn in (p, a, b2):
        s.close(12, conn)
    return s.write(path)


SCENES: dict[str, Callable[[Path], Path]] = {
    "sends": sends,
    "requests": requests,
    "consume": consume,
    "faults": faults_capture,
    "values": write_value_capture,
}

SAMPLES = sorted(p.name for p in PCAPS.glob("*.pcap*"))


def corpus(tmp: Path) -> dict[str, Path]:
    """Every bundled sample and crafted capture, name -> path (crafted ones written to tmp)."""
    out = {name: PCAPS / name for name in SAMPLES}
    for name, write in SCENES.items():
        out[name] = write(tmp / f"{name}.pcap")
    for name, (path, _) in crafted(tmp).items():
        out[f"fault:{name}"] = path
    return out
