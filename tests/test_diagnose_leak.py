"""flow.permit_leak on crafted captures: a consumer whose FLOWs return fewer permits than
the messages it was delivered and processed.

The scenes play a client with a receiver queue of 10 (its first FLOW grants 10). The
leaking one is the Java client of apache/pulsar#26336 (PIP-491): a batch of 5 fails its
checksum, the client discards it (ACK validation_error ChecksumMismatch = 2 of
proto/pulsar_api.proto) and returns 1 permit for it; it then keeps processing single
messages (each taken, acknowledged, its permit returned). Expected values follow from what
the scene sent: the broker debited 5 for the batch (num_messages_in_batch) and 1 per
message, the client returned 1 + 1 per message, so 4 permits are never returned and its
window (10 granted, nothing held) stays at 10 - 4 = 6. What the wire proves is a lower
bound: a message taken but not yet acknowledged at a FLOW may or may not have had its
permit returned (the twin returning each permit before its ACK proves 3). Near misses: the
same client returning 5 for the batch; a healthy client returning permits in batches of
half its queue (a capture ending before its next FLOW); redeliveries asked for and made; a
copy delivered again while the first waits in the client's queue; the leak seen from a
capture that began mid-connection; a threshold above the leak.
"""

from __future__ import annotations

from pathlib import Path

from dissector.findings import FindingCode as F
from dissector.findings import Thresholds
from dissector.pulsar.wire import MessageMetadata
from tests.support.crafted import B2C, C2B, T0_US, Msg, msg
from tests.support.scenes import SUB, TOPIC, Scene, ack, findings, flow, message, subscribe

CHECKSUM = 2  # ValidationError.ChecksumMismatch
QUEUE = 10  # the client's receiver queue: its first FLOW


def _batch(entry: int, n: int, *, checksum: bool | int = False, **kw: object) -> Msg:
    meta = MessageMetadata(
        producer_name="p", sequence_id=entry, publish_time=T0_US // 1000, num_messages_in_batch=n
    )
    mid = {"ledgerId": 9, "entryId": entry}
    return msg(
        B2C, "MESSAGE", consumer_id=2, message_id=mid, payload=b"b" * n, metadata=meta,
        checksum=checksum, **kw,
    )  # fmt: skip


def _discard(entry: int) -> Msg:
    mid = [{"ledgerId": 9, "entryId": entry}]
    return msg(C2B, "ACK", consumer_id=2, ack_type=0, message_id=mid, validation_error=CHECKSUM)


class Corrupt:
    """The scene: a batch of 5 failing its checksum, discarded, `returned` permits for it,
    then `more` single messages processed one by one (each received and acknowledged, then
    its permit returned; `ack_last`: its permit returned before its ACK)."""

    def __init__(
        self, returned: int, more: int = 6, *, connect: bool = True, ack_last: bool = False
    ) -> None:
        s = self.scene = Scene()
        s.open(connect=connect)
        for m in subscribe():
            s.at(0, m)
        self.first = flow(QUEUE)
        s.at(0.1, self.first)
        self.batch, self.discard = _batch(0, 5, checksum=0xBAD), _discard(0)
        self.returned = flow(returned)
        s.at(1, self.batch).at(1.1, self.discard).at(1.2, self.returned)
        self.flows = [self.returned]
        for i in range(1, more + 1):
            t = 1 + i
            back = flow(1)
            s.at(t, message(i))
            s.at(t + 0.1, ack(i) if not ack_last else back)
            s.at(t + 0.2, back if not ack_last else ack(i))
            self.flows.append(back)
        s.close(2 + more)


def test_a_batch_discarded_for_one_permit_leaks_the_rest(tmp_path: Path) -> None:
    sc = Corrupt(returned=1)
    s = sc.scene
    rows = [r for r in findings(s.write(tmp_path / "c.pcap")) if r["code"] == F.FLOW_PERMIT_LEAK]
    (row,) = rows
    assert (row["topic"], row["entity"]) == (TOPIC, f"consumer 2 (sub {SUB})")
    assert (row["value"], row["unit"]) == (4.0, "permits")  # 5 debited, 1 returned
    assert row["count"] == len(sc.flows)  # short after each FLOW that followed the discard
    assert f"window (permits granted minus those of the messages it processed) was {QUEUE} " \
        f"after its first FLOW and {QUEUE - 4} after its last" in row["summary"]  # fmt: skip
    assert "1 batch of 5 messages" in row["summary"]
    assert "ChecksumMismatch 1" in row["summary"]
    # the first FLOW, the corrupt batch and its discard, then the short FLOWs (the first
    # ones, and always the latest, as far as the evidence bound allows)
    shown = [sc.first, sc.batch, sc.discard, *sc.flows]
    packets = sorted(s.packet(m) for m in shown)
    assert row["evidence"] == packets[:9] + [packets[-1]]


def test_a_message_held_at_the_last_flow_is_not_counted(tmp_path: Path) -> None:
    """The same client returning each permit before its ACK: after each FLOW it may still
    hold the message it acknowledges next (its permit returned or not: the wire cannot
    tell), so what the capture proves is 4 - 1 permits leaked, and the window after the
    last FLOW is 6 + that message."""
    s = Corrupt(returned=1, ack_last=True).scene
    rows = [r for r in findings(s.write(tmp_path / "c.pcap")) if r["code"] == F.FLOW_PERMIT_LEAK]
    (row,) = rows
    assert row["value"] == 3.0
    assert f"was {QUEUE} after its first FLOW and {QUEUE - 4 + 1} after its last" in row["summary"]


def test_the_whole_batch_returned_is_no_leak(tmp_path: Path) -> None:
    s = Corrupt(returned=5).scene
    codes = [r["code"] for r in findings(s.write(tmp_path / "c.pcap"))]
    assert F.FLOW_PERMIT_LEAK not in codes
    assert F.CONSUMER_DISCARDED_CORRUPT in codes  # the discard is still a finding of its own


def test_a_threshold_above_the_leak_says_nothing(tmp_path: Path) -> None:
    path = Corrupt(returned=1).scene.write(tmp_path / "c.pcap")
    assert F.FLOW_PERMIT_LEAK in [r["code"] for r in findings(path, Thresholds(leaked_permits=4))]
    rows = findings(path, Thresholds(leaked_permits=5))
    assert F.FLOW_PERMIT_LEAK not in [r["code"] for r in rows]


def test_a_leak_once_the_client_stops_returning_is_not_established(tmp_path: Path) -> None:
    """One FLOW after the discard, then none: the client may yet make up (no second FLOW
    shows the window still short)."""
    s = Corrupt(returned=1, more=0).scene
    assert F.FLOW_PERMIT_LEAK not in [r["code"] for r in findings(s.write(tmp_path / "c.pcap"))]


def test_a_capture_begun_mid_connection_says_nothing(tmp_path: Path) -> None:
    s = Corrupt(returned=1, connect=False).scene
    assert F.FLOW_PERMIT_LEAK not in [r["code"] for r in findings(s.write(tmp_path / "c.pcap"))]


def test_half_queue_batching_is_no_leak(tmp_path: Path) -> None:
    """A healthy client: it returns permits 5 at a time (half its queue), when it takes the
    5th message out of its queue, and acknowledges each message after taking it; the
    capture ends with 3 permits owed (no FLOW for them yet)."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(0.1, flow(QUEUE))
    for i in range(13):
        t = 1 + i
        s.at(t, message(i))
        if i % 5 == 4:
            s.at(t + 0.05, flow(5))
        s.at(t + 0.1, ack(i))
    s.close(20)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_redeliveries_are_no_leak(tmp_path: Path) -> None:
    """A client that takes 4 messages, asks for them again (a negative ack), is delivered
    them again (redelivery_count 1), returns their permits and acknowledges them; the broker
    debits them twice, the client returns them twice."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(0.1, flow(8))
    for i in range(4):
        s.at(1 + i / 10, message(i))
    s.at(2, flow(4))  # it took all 4: half its queue owed
    asked = [{"ledgerId": 9, "entryId": i} for i in range(4)]
    s.at(2.1, msg(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=2, message_ids=asked))
    for i in range(4):
        s.at(3 + i / 10, message(i, redelivery_count=1))
    s.at(3.5, flow(4))
    s.at(3.6, ack(0, 1, 2, 3))
    for i in range(4, 8):
        s.at(4 + i / 10, message(i))
    s.at(5, flow(4))
    s.at(5.1, ack(4, 5, 6, 7))
    s.at(6, flow(0))
    s.close(7)
    codes = [r["code"] for r in findings(s.write(tmp_path / "c.pcap"))]
    assert F.FLOW_PERMIT_LEAK not in codes


def test_a_copy_delivered_again_while_the_first_waits_is_no_leak(tmp_path: Path) -> None:
    """A client (queue of 3, each permit returned after its ACK) holds entry 2 in its queue
    when the broker delivers it again; it takes the first copy, acknowledges entry 2 and
    returns that permit, the second copy still queued when the capture ends. Every permit
    of what it took came back: the ACK of entry 2 covers a copy the client has not taken."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(0.1, flow(3))
    for i in range(3):
        s.at(1 + i / 10, message(i))
    s.at(2, ack(0)).at(2.1, flow(1))
    asked = [{"ledgerId": 9, "entryId": 2}]
    s.at(3, msg(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=2, message_ids=asked))
    s.at(3.1, message(2, redelivery_count=1))
    s.at(4, ack(1)).at(4.1, flow(1))
    s.at(5, ack(2)).at(5.1, flow(1))
    s.close(6)
    codes = [r["code"] for r in findings(s.write(tmp_path / "c.pcap"))]
    assert F.FLOW_PERMIT_LEAK not in codes
