"""consumer.redelivered_after_ack and transactions: an ACK carrying a txnid holds only if
its transaction commits; after an abort the broker delivers those messages again (Apache
Pulsar 4.0 does, tests/test_apache_transactions.py), which is no fault.

Input: crafted captures (tests/support/scenes.py): a delivery, an ACK of it, the delivery
again. Output: the findings. Rule (the spec, PulsarApi.proto CommandAck): txnid_least_bits
and txnid_most_bits set make the ack part of that transaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, msg
from tests.support.scenes import Scene, codes, flow, message, subscribe


def _scene(ack_fields: dict[str, Any]) -> Scene:
    scene = Scene()
    scene.open()
    for m in subscribe():
        scene.at(0, m)
    ack = msg(
        C2B,
        "ACK",
        consumer_id=2,
        ack_type=0,
        message_id=[{"ledgerId": 9, "entryId": 3}],
        **ack_fields,
    )
    for t, m in ((0.1, flow(100)), (1, message(3)), (1.1, ack), (5, message(3))):
        scene.at(t, m)
    if "request_id" in ack_fields:  # a transactional ack asks for its receipt
        scene.at(1.2, msg(B2C, "ACK_RESPONSE", consumer_id=2, request_id=ack_fields["request_id"]))
    scene.close(6)
    return scene


def test_a_transactional_ack_then_the_message_again_is_no_finding(tmp_path: Path) -> None:
    txn = {"txnid_most_bits": 0, "txnid_least_bits": 1, "request_id": 7}
    assert codes(_scene(txn).write(tmp_path / "c.pcap")) == []


def test_the_same_ack_outside_a_transaction_is_still_found(tmp_path: Path) -> None:
    found = codes(_scene({}).write(tmp_path / "c.pcap"))
    assert found == [F.CONSUMER_REDELIVERED_AFTER_ACK]
