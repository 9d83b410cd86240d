"""The one rule of a batch's count (dissector.facts.batches), on hand-made metadata.

Expected values come from the rule's own numbers, computed by hand: the claim
(num_messages_in_batch) up to 10,000; 6 bytes the smallest entry (a 4-byte size, a tag byte
and a one-byte varint of `payload_size`, no payload); a compressed payload stands for at
most 16 plain bytes per byte.
"""

from __future__ import annotations

from dissector.events import Direction, Frame
from dissector.facts.batches import carried, claimed, plain_bound
from dissector.pulsar.wire import MessageMetadata


def _frame(payload: bytes) -> Frame:
    return Frame(1, Direction.CLIENT_TO_BROKER, 0, 0, 0, 6, "SEND", None, None, None,
                 payload=memoryview(payload))  # fmt: skip


def test_the_claim_is_the_count_up_to_the_bound() -> None:
    assert claimed(MessageMetadata(num_messages_in_batch=3)) == 3
    assert claimed(MessageMetadata(num_messages_in_batch=20_000)) == 10_000
    assert claimed(MessageMetadata(num_messages_in_batch=0)) is None  # one message still
    assert claimed(MessageMetadata()) is None and claimed(None) is None


def test_an_unsplit_claim_is_what_its_bytes_can_carry() -> None:
    # the invalid batch of tests/support/payload_faults.py: 23 plain bytes claiming 3
    payload = b"\x00\x00\x00\x05garbage-not-a-batch"
    meta = MessageMetadata(num_messages_in_batch=3)
    assert carried(3, plain_bound(_frame(payload), meta)) == 3  # 23 // 6 = 3 entries fit
    assert carried(10_000, 60) == 10  # 60 bytes: 10 entries, not 10,000
    assert carried(10_000, 5) == 0  # not one entry fits


def test_a_compressed_payload_stands_for_at_most_16_bytes_a_byte() -> None:
    meta = MessageMetadata(compression="ZLIB", uncompressed_size=1_000)
    assert plain_bound(_frame(bytes(10)), meta) == 160
    meta = MessageMetadata(compression="ZLIB", uncompressed_size=100)
    assert plain_bound(_frame(bytes(10)), meta) == 100
