"""A connection's end as the pipeline reports it, for tests that feed an engine by hand.

Input: a connection id, its key, when and how it ended, its last packet.
Output: `ended(...)`, its `Conversation` (no handshake info, every per-side count zero).
Rule: what the diagnoses read of an end (id, key, times, packets, reason) comes from the
arguments; nothing else is made up.
"""

from __future__ import annotations

from dissector.events import CloseReason, ConnectionInfo, Conversation, DirectionStats, FlowKey

#: One side of a connection that counted nothing.
NO_STATS = DirectionStats(
    packets=0, wire_bytes=0, stream_bytes=0, preamble_bytes=0, frames=0, frame_bytes=0,
    skipped_bytes=0, gap_bytes=0,
)  # fmt: skip


def ended(
    conn_id: int, key: FlowKey, *, end_ts: int, last_packet: int, reason: CloseReason
) -> Conversation:
    """The `Conversation` of connection `conn_id` ended by `reason` at `end_ts` µs."""
    return Conversation(
        conn_id=conn_id, key=key, start_ts=0, end_ts=end_ts, first_packet=1,
        last_packet=last_packet, ended=reason, syn_seen=True, encrypted=False,
        proxied_client=None, c2b=NO_STATS, b2c=NO_STATS, info=ConnectionInfo(), anomalies=0,
    )  # fmt: skip
