"""Chunked messages: chunks that stopped arriving before the message was whole.

Input: SEND and MESSAGE frames whose metadata says they are chunks (num_chunks_from_msg > 1),
the clock (`sweep`), the connection's end.
Output: chunk.incomplete_expired, one row per connection with every expired message.
Rules: chunks are grouped per (direction, producer or consumer id, uuid); a message is whole
once every chunk id 0..n-1 arrived. One whose first chunk (id 0) was captured and whose
next chunk has not come for longer than chunk_expiry (measured at a later frame, at its
connection's end or at the capture's end) has expired: consumers discard it then. One
whose chunk 0 is not in the capture started before it: unknown, never reported.
"""

from __future__ import annotations

from typing import Any

from dissector.diagnose.state import MAX_TRACKED, ConnState, Context, Pending, finding
from dissector.events import Frame
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

_SEND = COMMAND_TYPES["SEND"]


def on_payload(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A SEND or MESSAGE: its chunk, if it is one."""
    meta = frame.metadata
    if meta is None or meta.num_chunks_from_msg <= 1:
        return
    owner = body.producer_id if frame.command_type == _SEND else body.consumer_id
    key = (frame.direction.value, owner, meta.uuid)
    pending = conn.chunks.get(key)
    if pending is None:
        if meta.chunk_id != 0:
            return  # its start is not in the capture: unknown
        pending = conn.chunks[key] = Pending(frame, meta.num_chunks_from_msg)
        if len(conn.chunks) > MAX_TRACKED:
            conn.chunks.popitem(last=False)
    else:
        gap = frame.last_ts - pending.last_ts
        if gap > ctx.us["chunk_expiry"]:
            _expired(conn, pending, gap)
            del conn.chunks[key]
            return
        pending.last_ts, pending.last_packet = frame.last_ts, frame.last_packet
    pending.ids.add(meta.chunk_id)
    if len(pending.ids) >= pending.expected:
        del conn.chunks[key]


def _expired(conn: ConnState, pending: Pending, gap: int) -> None:
    ev = conn.chunk_expired
    ev.add_at(pending.first_packet, pending.first_ts)
    ev.add_at(pending.last_packet, pending.last_ts, count=0)  # one message, two packets
    conn.chunk_gap = max(conn.chunk_gap, gap)
    conn.chunk_topic = pending.topic
    conn.chunk_detail = f"{len(pending.ids)} of {pending.expected} chunks"


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended; messages still incomplete at `horizon` are judged now."""
    for pending in conn.chunks.values():
        if horizon - pending.last_ts > ctx.us["chunk_expiry"]:
            _expired(conn, pending, horizon - pending.last_ts)
    conn.chunks.clear()
    ev = conn.chunk_expired
    if ev:
        ctx.emit(
            finding(
                FindingCode.CHUNK_INCOMPLETE_EXPIRED,
                ev,
                conn=conn,
                ts=ev.first_ts + ctx.us["chunk_expiry"],
                topic=conn.chunk_topic,
                summary=f"{ev.count} chunked messages stopped arriving for more than "
                f"{ctx.th.chunk_expiry:g} s (last one: {conn.chunk_detail}, "
                f"{conn.chunk_gap / 1e6:.1f} s without its next chunk)",
                value=conn.chunk_gap / 1e6,
                unit="s",
            )
        )


HANDLERS = {_SEND: on_payload, COMMAND_TYPES["MESSAGE"]: on_payload}
