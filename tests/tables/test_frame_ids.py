"""The frames row's id readers (dissector.tables.frame_ids), one per command type.

Input: commands built field by field here. Output: assertions against values worked out by
hand from PulsarApi.proto: uint64 ids past 2**63 as Java's long (2**64 - 1 -> -1), a field
unset -> None, the first of a repeated message id and their count, the metadata's count.
"""

from __future__ import annotations

from dissector.pulsar.wire import COMMAND_TYPES, BaseCommand, MessageMetadata
from dissector.tables.frame_ids import IDS


def _body(name: str, field: str, **values: object) -> object:
    cmd = BaseCommand(type=name)
    body = getattr(cmd, field)
    for key, value in values.items():
        setattr(body, key, value)
    return body


def test_send_reads_its_ids_and_counts_from_its_own_num_messages() -> None:
    body = _body("SEND", "send", producer_id=2**64 - 1, sequence_id=7, num_messages=3)
    meta = MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    meta.num_messages_in_batch = 5
    assert IDS[COMMAND_TYPES["SEND"]](body, meta) == (None, -1, None, 7, None, None, 3)


def test_send_without_num_messages_counts_from_the_metadata() -> None:
    body = _body("SEND", "send", producer_id=1, sequence_id=2**63)
    meta = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    meta.num_messages_in_batch = 5
    assert IDS[COMMAND_TYPES["SEND"]](body, meta) == (None, 1, None, -(2**63), None, None, 5)


def test_unset_fields_are_none() -> None:
    body = BaseCommand(type="SEND_RECEIPT").send_receipt
    assert IDS[COMMAND_TYPES["SEND_RECEIPT"]](body, None) == (None,) * 7


def test_a_repeated_message_id_gives_the_first_and_the_count() -> None:
    cmd = BaseCommand(type="ACK")
    ack = cmd.ack
    ack.consumer_id = 4
    for ledger, entry in ((10, 2**64 - 2), (11, 1)):
        mid = ack.message_id.add()
        mid.ledgerId, mid.entryId = ledger, entry
    assert IDS[COMMAND_TYPES["ACK"]](ack, None) == (None, None, 4, None, 10, -2, 2)


def test_a_request_reads_its_request_id_only_where_the_command_has_one() -> None:
    body = _body("PRODUCER", "producer", topic="t", producer_id=3, request_id=9)
    assert IDS[COMMAND_TYPES["PRODUCER"]](body, None) == (9, 3, None, None, None, None, None)
