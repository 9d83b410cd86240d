"""Journey records out of a stored message: one per (message, subscription delivered to).

Input: a `Stored` message of dissector.journeys.state, its deliveries complete (the capture
ended, or the bound pushed it out).
Output: `Journey` records (dissector.events), one per message and subscription it was
delivered to, plus one per message of a SEND or receipt never seen delivered.
Rule: the times are the hops' own (the packets completing their frames); what the capture
did not show stays None. `partition` is the id's when the wire gave one, else the number a
partition's topic name ends with (`...-partition-N`), else -1, as Pulsar's message ids say.
`redeliveries` is the deliveries seen after the first, or the broker's redelivery_count
when it says more (the capture may have missed earlier deliveries). The trace context is
the message's own (a batch entry's from its own properties). With values asked for, a
message whose payload gave no message row says why in `value_error` (`NOT_SEEN`: only its
receipt or acks were seen; `NOT_DECODED`: its SEND or MESSAGE frame was seen, but no
message came out of it, e.g. metadata that does not decode).
"""

from __future__ import annotations

import re

from dissector.events import Journey
from dissector.journeys.state import Delivery, Msg, Stored, Sub

_PARTITION = re.compile(r"-partition-([0-9]{1,9})\Z")
#: value_error of a journey whose message has no value cells (values asked for): stable
#: wording, documented in docs/values.md and docs/journeys.md.
NOT_SEEN = "payload not seen: only its receipt or acks are in the capture"
NOT_DECODED = (
    "payload not decoded: its SEND or MESSAGE frame gave no message (metadata not decodable)"
)


def partition(s: Stored) -> int:
    if s.partition >= 0:
        return s.partition
    found = None if s.topic is None else _PARTITION.search(s.topic)
    return -1 if found is None else int(found.group(1))


def journeys(s: Stored, values: bool = False) -> list[Journey]:
    """The rows of `s`, its messages in batch order; `values`: values were asked for."""
    out: list[Journey] = []
    for m in sorted(s.messages(), key=lambda m: -1 if m.index is None else m.index):
        cells = m.value
        if values and cells is None:
            cells = (None, None, _no_value(s, m))
        if m.deliveries():
            out.extend(_journey(s, m, d.sub, d, cells) for d in m.deliveries())
        elif s.produced:
            out.append(_journey(s, m, None, None, cells))
    return out


def _no_value(s: Stored, m: Msg) -> str:
    """Why a message has no value cells: its payload's frame was never seen, or gave none."""
    if s.send_ts is not None or any(d.delivered_ts is not None for d in m.deliveries()):
        return NOT_DECODED
    return NOT_SEEN


def _journey(
    s: Stored,
    m: Msg,
    sub: Sub | None,
    d: Delivery | None,
    cells: tuple[str | None, str | None, str | None] | None,
) -> Journey:
    first = s.send_ts if s.send_ts is not None else s.receipt_ts
    conn_id = s.producer_conn
    if d is not None:
        if first is None:
            first = d.delivered_ts if d.delivered_ts is not None else d.acked_ts
        if conn_id is None:
            conn_id = d.conn_id
    # positional, in the fields' order (mypy checks each type): a call by keyword costs twice
    # the time, per row
    return Journey(
        0 if first is None else first,  # ts
        0 if conn_id is None else conn_id,  # conn_id
        s.topic,  # topic
        s.ledger,  # ledger_id
        s.entry,  # entry_id
        partition(s),  # partition
        m.index,  # batch_index
        s.batch_size,  # batch_size
        s.chunks,  # chunks
        s.producer_name,  # producer_name
        m.sequence_id if m.sequence_id is not None else s.sequence_id,  # sequence_id
        s.publish_time,  # publish_time
        s.producer_conn,  # producer_conn_id
        s.producer_id,  # producer_id
        s.send_ts,  # send_ts
        s.send_packet,  # send_packet
        s.receipt_ts,  # receipt_ts
        s.receipt_packet,  # receipt_packet
        s.error,  # error
        None if sub is None else sub.name,  # subscription
        None if sub is None else sub.sub_type,  # sub_type
        None if d is None else d.conn_id,  # consumer_conn_id
        None if d is None else d.consumer_id,  # consumer_id
        None if d is None else d.consumer_name,  # consumer_name
        None if d is None else d.delivered_ts,  # delivered_ts
        None if d is None else d.delivered_packet,  # delivered_packet
        None if d is None else d.acked_ts,  # acked_ts
        None if d is None else d.acked_packet,  # acked_packet
        0 if d is None else d.deliveries,  # deliveries
        0 if d is None else max(d.deliveries - 1, d.redelivery_count),  # redeliveries
        s.broker_ts,  # broker_entry_ts
        None if m.trace is None else m.trace[0],  # trace_id
        None if m.trace is None else m.trace[1],  # span_id
        None if m.trace is None else m.trace[2],  # trace_format
        s.evicted,  # evicted
        # the value columns: --values only, None otherwise
        None if cells is None else cells[0],  # value
        None if cells is None else cells[1],  # value_schema
        None if cells is None else cells[2],  # value_error
    )
