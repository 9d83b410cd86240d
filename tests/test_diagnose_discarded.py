"""consumer.discarded_corrupt on crafted captures: ACKs with a validation_error.

A consumer that cannot use a delivered message acknowledges it with
CommandAck.validation_error (proto/pulsar_api.proto: UncompressedSizeCorruption = 0,
DecompressionError = 1, ChecksumMismatch = 2, BatchDeSerializeError = 3,
DecryptionError = 4). The scenes deliver messages and discard some; the row expected (its
count, kinds, evidence packets) follows from which ACK named which delivery, not from the
dissector's output. A plain ACK, the same ids acknowledged without a validation_error, is
no finding.
"""

from __future__ import annotations

from pathlib import Path

from dissector.anomalies import Severity
from dissector.findings import FindingCode as F
from tests.support.crafted import C2B, Msg, msg
from tests.support.scenes import SUB, TOPIC, Scene, ack, findings, flow, message, subscribe

SIZE, CHECKSUM = 0, 2  # ValidationError.UncompressedSizeCorruption, .ChecksumMismatch


def _discard(*entries: int, error: int, cid: int = 2) -> Msg:
    ids = [{"ledgerId": 9, "entryId": e} for e in entries]
    return msg(C2B, "ACK", consumer_id=cid, ack_type=0, message_id=ids, validation_error=error)


def _consumer() -> Scene:
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(0.1, flow(100))
    return s


def test_each_discarded_message_is_counted_with_its_kind(tmp_path: Path) -> None:
    s = _consumer()
    delivered = {entry: message(entry) for entry in (3, 4, 5, 6)}
    for i, m in enumerate(delivered.values()):
        s.at(1 + i / 10, m)
    first, second = _discard(3, error=CHECKSUM), _discard(4, 5, error=SIZE)
    s.at(2, first).at(2.1, second).at(2.2, ack(6))  # 6 acknowledged as it should
    s.close(3)
    rows = findings(s.write(tmp_path / "c.pcap"))
    (row,) = rows
    assert (row["code"], row["severity"], row["topic"], row["entity"]) == (
        F.CONSUMER_DISCARDED_CORRUPT,
        Severity.ERROR,
        TOPIC,
        f"consumer 2 (sub {SUB})",
    )
    assert (row["count"], row["value"], row["unit"]) == (3, 3.0, "messages")
    assert "ChecksumMismatch 1" in row["summary"]
    assert "UncompressedSizeCorruption 2" in row["summary"]
    assert row["evidence"] == [
        s.packet(delivered[3]),
        s.packet(first),
        s.packet(delivered[4]),
        s.packet(delivered[5]),
        s.packet(second),
    ]


def test_a_discard_of_a_delivery_the_capture_missed_still_counts(tmp_path: Path) -> None:
    """The capture began after the MESSAGE: the ACK alone says the message was discarded."""
    s = _consumer()
    discard = _discard(7, error=CHECKSUM)
    s.at(1, discard).close(2)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONSUMER_DISCARDED_CORRUPT and row["count"] == 1
    assert row["evidence"] == [s.packet(discard)]


def test_plain_acks_are_no_finding(tmp_path: Path) -> None:
    s = _consumer()
    s.at(1, message(3)).at(1.1, message(4)).at(2, ack(3, 4)).close(3)
    assert findings(s.write(tmp_path / "c.pcap")) == []
