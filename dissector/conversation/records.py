"""The records a connection makes apart from its frames: its end, and events made twice.

Input: what a `connection.Connection` knows when it ends (its `ConnOpened` and `ConnClosed`,
its decoders, preamble, conversation info, anomaly count, TLS facts), or an event made before
its roles were swapped.
Output: its `Conversation`; the `pulsar.encrypted` anomaly; an event as made with the swapped
roles (`flip_tcp`, `flip`, `flip_closed`).
Rules:
- Per direction, preamble + frame + skipped + gap bytes add up to the stream's length (for
  TLS: the decrypted stream's, whose gap bytes include what could not be decrypted); a side
  that never had a decoder counts its preamble bytes only.
- A flip swaps what an event says per side and nothing else: a direction, or the counts of
  packets and bytes of each side.
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
    Frame,
    PipelineEvent,
    Preamble,
    StreamData,
    StreamGap,
    TcpEvent,
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


def flip_tcp(ev: TcpEvent) -> TcpEvent:
    """A TCP event made before its connection's roles were swapped, as made after."""
    if type(ev) is ConnClosed:
        return flip_closed(ev)
    if isinstance(ev, StreamData | StreamGap | Anomaly) and ev.direction is not None:
        return ev._replace(direction=B2C if ev.direction is C2B else C2B)
    return ev


def flip(ev: PipelineEvent) -> PipelineEvent:
    """A decoded event (held) made before its connection's roles were swapped, as made after."""
    if isinstance(ev, Frame | Anomaly) and ev.direction is not None:
        return ev._replace(direction=B2C if ev.direction is C2B else C2B)
    return ev


def flip_closed(ev: ConnClosed) -> ConnClosed:
    """A connection's end made before its roles were swapped, as made after."""
    return ev._replace(
        packets_c2b=ev.packets_b2c,
        packets_b2c=ev.packets_c2b,
        bytes_c2b=ev.bytes_b2c,
        bytes_b2c=ev.bytes_c2b,
    )
