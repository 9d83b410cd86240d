"""What the joiner keeps per held message, counted (issue 42 item 7), not timed.

Input: n messages delivered on one connection before their SEND and receipt on another
(the order of f14_deliver_noack_60000.pcap: each consumer-side record is merged into its
producer's), never acknowledged.
Output: pass or fail: the objects alive per held message, counted with the garbage
collector: one stored message, one message, one delivery; no dict or list for the one
message, delivery and id most have; a merged-away record is not kept alive by the
subscription's heap.
Rule: counts of live objects of the joiner's own types, never wall-clock time or bytes.
"""

from __future__ import annotations

import gc
from collections import Counter

from dissector.journeys.state import Delivery, Msg, Stored
from dissector.pulsar.wire import MessageMetadata
from tests.journeys.fed import Fed
from tests.journeys.test_joiner import frame

N = 2_000


def _alive() -> Counter[type]:
    gc.collect()
    kinds = (Stored, Msg, Delivery, dict, list)
    return Counter(type(o) for o in gc.get_objects() if type(o) in kinds)


def test_a_held_message_is_three_records_and_no_container() -> None:
    joiner = Fed()
    joiner.feed(frame(1, "PRODUCER", 0, topic="t", producer_id=1, request_id=1))
    before = _alive()
    for i in range(N):
        meta = MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
        mid = {"ledgerId": 1, "entryId": i}
        joiner.feed(frame(2, "MESSAGE", 3 * i, consumer_id=1, message_id=mid))
        joiner.feed(frame(1, "SEND", 3 * i + 1, meta, producer_id=1, sequence_id=i))
        joiner.feed(frame(1, "SEND_RECEIPT", 3 * i + 2, producer_id=1, sequence_id=i,
                          message_id=mid))  # fmt: skip
    assert joiner.ix.held_msgs == N
    grown = _alive() - before
    # the producer's records; the consumer's, merged into them, are gone (the heap, rebuilt
    # past 1.5 times what is live, held up to half as many again)
    assert grown[Stored] == N and grown[Msg] == N and grown[Delivery] == N
    # dicts and lists: the indexes' own (a constant), none per message (it had three: its
    # messages, its deliveries, its ids)
    assert grown[dict] + grown[list] < 20
    rows = list(joiner.finish())
    assert len(rows) == N and all(j.delivered_ts is not None for j in rows)
    assert [j.entry_id for j in rows] == list(range(N))
