"""The records a connection makes apart from its frames: its end, and why it is not decoded.

Input: what a `connection.Connection` knows when it ends (its `ConnOpened` and `ConnClosed`,
its decoders, preamble, conversation info, anomaly count, TLS facts).
Output: its `Conversation`; the `pulsar.encrypted` anomaly.
Rule: per direction, preamble + frame + skipped + gap bytes add up to the stream's length
(for TLS: the decrypted stream's, whose gap bytes include what could not be decrypted); a
side that never had a decoder counts its preamble bytes only.
"""

from __future__ import annotations

from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    ConnClosed,
    ConnectionInfo,
    ConnOpened,
    Conversation,
    Direction,
    DirectionStats,
    Preamble,
    TlsInfo,
)
from dissector.pulsar.framing import FrameDecoder, StreamStats

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT


def conversation(
    opened: ConnOpened,
    ev: ConnClosed,
    decoders: dict[Direction, FrameDecoder],
    preamble: Preamble | None,
    *,
    encrypted: bool,
    info: ConnectionInfo,
    anomalies: int,
    tls: TlsInfo | None,
) -> Conversation:
    """The connection's row: `opened` at its start, `ev` at its end."""
    pre = preamble.length if preamble is not None else 0
    return Conversation(
        conn_id=ev.conn_id,
        key=opened.key,
        start_ts=opened.ts,
        end_ts=ev.ts,
        first_packet=opened.packet,
        last_packet=ev.packet,
        ended=ev.reason,
        syn_seen=opened.syn_seen,
        encrypted=encrypted,
        proxied_client=preamble.source if preamble is not None else None,
        c2b=_stats(decoders.get(C2B), ev.packets_c2b, ev.bytes_c2b, pre),
        b2c=_stats(decoders.get(B2C), ev.packets_b2c, ev.bytes_b2c, 0),
        info=info,
        anomalies=anomalies,
        tls=tls,
        closed_by=ev.closed_by,
        close_packet=ev.close_packet,
        close_ts=ev.close_ts,
    )


def _stats(dec: FrameDecoder | None, packets: int, wire: int, preamble: int) -> DirectionStats:
    s = dec.stats if dec is not None else StreamStats()
    return DirectionStats(
        packets=packets,
        wire_bytes=wire,
        stream_bytes=preamble if dec is None else dec.offset,
        preamble_bytes=preamble,
        frames=s.frames,
        frame_bytes=s.frame_bytes,
        skipped_bytes=s.skipped_bytes,
        gap_bytes=s.gap_bytes,
    )


def encrypted(opened: ConnOpened, detail: str) -> Anomaly:
    """The connection's bytes are encrypted and not decoded (`detail` says why)."""
    return Anomaly.of(
        AnomalyCode.PULSAR_ENCRYPTED,
        conn_id=opened.conn_id,
        direction=None,
        stream_offset=None,
        detail=detail,
        packet=opened.packet,
        ts=opened.ts,
    )
