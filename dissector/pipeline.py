"""The one place the stages are wired together: packets in, frames and conversations out.

Input: RawPackets in capture order (from a file reader or live capture), then `close()`.
Output: `ConversationOpened` (once a connection is known to be Pulsar or TLS), `Frame`,
`Anomaly` and `Conversation` (when a connection ends) events.
Rules:
- Headers -> TCP reassembly -> (client stream: TLS / PROXY header sniffing) -> frame decoding.
- A connection on a broker port is Pulsar; on any other port it is Pulsar only if one side
  opens with a decodable CONNECT (that side is then the client, whatever the SYN said).
  Anything else is dropped silently: other protocols in a capture are not our business.
- TLS connections (TLS ports, or a ClientHello first) are reported, not decoded.
- Per direction, preamble + frame + skipped + gap bytes add up to the stream's length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from dissector.events import Anomaly, Direction, Frame, RawPacket, Segment
from dissector.flow.net import NetIssue, parse_packet
from dissector.flow.preamble import Preamble, sniff
from dissector.flow.tcp import (
    ConnClosed,
    ConnOpened,
    FlowKey,
    Reassembler,
    StreamData,
    StreamGap,
)
from dissector.pulsar.conversations import ConversationState, Pair, Summary
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from dissector.pulsar.messages import AppMessage, MessageExtractor
from dissector.pulsar.wire import COMMAND_TYPES, PAYLOAD_TYPES

#: Bytes a connection off the broker ports may send without completing a first frame before
#: it is judged not to be Pulsar (a CONNECT is well under 1 KiB, a few KiB with auth data).
PENDING_LIMIT = 64 << 10

#: Events held for a connection off the broker ports while its client side is unknown.
_MAX_HELD = 1000

DEFAULT_BROKER_PORTS = frozenset({6650, 6651})
DEFAULT_TLS_PORTS = frozenset({6651})
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_CONNECT = COMMAND_TYPES["CONNECT"]


class ConversationOpened(NamedTuple):
    conn_id: int
    key: FlowKey
    ts: int
    packet: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectionStats:
    packets: int  # packets seen (retransmissions included)
    wire_bytes: int  # TCP payload bytes on the wire (retransmissions included)
    stream_bytes: int  # length of the reassembled stream
    preamble_bytes: int  # PROXY protocol header
    frames: int
    frame_bytes: int
    skipped_bytes: int  # seen but not part of any frame (resync)
    gap_bytes: int  # missing from the capture


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversation:
    """One TCP connection that carried Pulsar (or TLS on a Pulsar port), when it ended."""

    conn_id: int
    key: FlowKey
    start_ts: int
    end_ts: int
    first_packet: int
    last_packet: int
    ended: str  # fin | rst | capture_end | port_reuse | evicted
    syn_seen: bool
    encrypted: bool
    proxied_client: tuple[str, int] | None  # original client from a PROXY header
    c2b: DirectionStats
    b2c: DirectionStats
    summary: Summary  # handshake and entities
    anomalies: int  # anomaly rows of this connection


PipelineEvent = ConversationOpened | Frame | Anomaly | Conversation | AppMessage | Pair


class _Conv:
    __slots__ = (
        "anomalies",
        "decoders",
        "head",
        "held",
        "midstream",
        "mode",
        "opened",
        "preamble",
        "state",
        "verdict",
    )

    def __init__(self, opened: ConnOpened, mode: str) -> None:
        self.opened = opened
        self.mode = mode  # pending | pulsar | tls | ignored
        self.decoders: dict[Direction, FrameDecoder] = {}
        self.midstream = {C2B: False, B2C: False}
        self.head: bytes | None = b""  # client bytes awaiting preamble sniffing; None: done
        self.preamble: Preamble | None = None
        self.held: list[PipelineEvent] = []  # events of a pending connection
        self.state = ConversationState(opened.conn_id)
        self.verdict: dict[Direction, bool] = {}  # pending: did this side open with CONNECT?
        self.anomalies = 0


class Pipeline:
    """Dissect one capture source; see the module docstring."""

    def __init__(
        self,
        *,
        broker_ports: Iterable[int] = DEFAULT_BROKER_PORTS,
        tls_ports: Iterable[int] = DEFAULT_TLS_PORTS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        first_conn_id: int = 1,
        messages: MessageExtractor | None = None,
    ) -> None:
        """messages: the extractor of application messages, or None not to extract them."""
        self.broker_ports = frozenset(broker_ports)
        self.tls_ports = frozenset(tls_ports)
        self.max_frame_size = max_frame_size
        self.messages = messages
        self.tcp = Reassembler(self.broker_ports, first_id=first_conn_id)
        self._convs: dict[int, _Conv] = {}
        self.packets = 0
        self.non_tcp_packets = 0

    def feed(self, pkt: RawPacket) -> list[PipelineEvent]:
        self.packets += 1
        seg = parse_packet(pkt)
        if seg is None:
            self.non_tcp_packets += 1
            return []
        if isinstance(seg, NetIssue):
            ports = (seg.src_port, seg.dst_port)
            if seg.src_port is not None and not self.broker_ports.intersection(ports):
                return []  # another protocol's packet: not ours to report
            return [_net_anomaly(seg)]
        return self.feed_segment(seg)

    def feed_segment(self, seg: Segment) -> list[PipelineEvent]:
        out: list[PipelineEvent] = []
        for ev in self.tcp.feed(seg):
            self._route(ev, out)
        return out

    def close(self) -> list[PipelineEvent]:
        out: list[PipelineEvent] = []
        for ev in self.tcp.close():
            self._route(ev, out)
        return out

    # ------------------------------------------------------------------ routing

    def _route(
        self,
        ev: ConnOpened | StreamData | StreamGap | ConnClosed | Anomaly,
        out: list[PipelineEvent],
    ) -> None:
        if type(ev) is StreamData:
            conv = self._convs[ev.conn_id]
            if conv.mode == "pulsar" or conv.mode == "pending":
                self._data(conv, ev.direction, ev.data, ev.offset, ev.packet, ev.ts, out)
        elif type(ev) is StreamGap:
            conv = self._convs[ev.conn_id]
            if conv.mode == "pulsar" or conv.mode == "pending":
                self._gap(conv, ev, out)
        elif type(ev) is ConnOpened:
            self._opened(ev, out)
        elif type(ev) is ConnClosed:
            self._closed(ev, out)
        elif isinstance(ev, Anomaly):
            owner = self._convs.get(ev.conn_id)
            if owner is None:
                out.append(ev)
                return
            if ev.code == "tcp.midstream_start" and ev.direction is not None:
                owner.midstream[ev.direction] = True
            self._emit(owner, ev, out)

    def _emit(self, conv: _Conv, ev: PipelineEvent, out: list[PipelineEvent]) -> None:
        if conv.mode == "pending":
            conv.held.append(ev)
        elif conv.mode != "ignored":
            if type(ev) is Anomaly:
                conv.anomalies += 1
            out.append(ev)

    def _opened(self, ev: ConnOpened, out: list[PipelineEvent]) -> None:
        key = ev.key
        if key.broker_port in self.tls_ports:
            conv = _Conv(ev, "tls")
            self._convs[ev.conn_id] = conv
            self._start_tls(conv, "TLS port", out)
            return
        known = key.broker_port in self.broker_ports and not ev.guessed
        conv = _Conv(ev, "pulsar" if known else "pending")
        self._convs[ev.conn_id] = conv
        if known:
            out.append(ConversationOpened(ev.conn_id, key, ev.ts, ev.packet))

    def _start_tls(self, conv: _Conv, why: str, out: list[PipelineEvent]) -> None:
        opened = conv.opened
        conv.mode = "tls"
        conv.held.clear()
        self.tcp.ignore(opened.conn_id)
        out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
        out.append(
            Anomaly.of(
                "pulsar.encrypted",
                conn_id=opened.conn_id,
                direction=None,
                stream_offset=None,
                detail=f"{why}: encrypted, not decoded",
                packet=opened.packet,
                ts=opened.ts,
            )
        )

    def _decoder(self, conv: _Conv, direction: Direction, offset: int) -> FrameDecoder:
        dec = conv.decoders.get(direction)
        if dec is None:
            dec = FrameDecoder(
                conn_id=conv.opened.conn_id,
                direction=direction,
                max_frame_size=self.max_frame_size,
                synced=not conv.midstream[direction],
                offset=offset,
            )
            conv.decoders[direction] = dec
        return dec

    def _data(
        self,
        conv: _Conv,
        direction: Direction,
        data: bytes,
        offset: int,
        packet: int,
        ts: int,
        out: list[PipelineEvent],
    ) -> None:
        if direction is C2B and conv.head is not None:
            if conv.midstream[C2B]:
                conv.head = None
            else:
                head = conv.head + data
                found = sniff(head)
                if found is None:
                    conv.head = head
                    return
                conv.head = None
                conv.preamble = found
                if found.kind == "tls":
                    self._start_tls(conv, "TLS ClientHello", out)
                    return
                if found.kind == "proxy_invalid":
                    # Skip what looked like the header and resynchronise on the first frame.
                    self._emit(conv, self._proxy_anomaly(conv, found, packet, ts), out)
                    conv.midstream[C2B] = True
                data = head[found.length :]
                offset = found.length
                if not data:
                    self._decoder(conv, C2B, offset)
                    return
        dec = self._decoder(conv, direction, offset)
        events = dec.feed(data, packet=packet, ts=ts)
        if conv.mode == "pending" and not events and dec.pending > PENDING_LIMIT:
            self._ignore(conv)
        self._deliver(conv, events, out)

    def _proxy_anomaly(self, conv: _Conv, found: Preamble, packet: int, ts: int) -> Anomaly:
        return Anomaly.of(
            "proxy.header_invalid",
            conn_id=conv.opened.conn_id,
            direction=C2B,
            stream_offset=0,
            detail=found.detail,
            length=found.length,
            packet=packet,
            ts=ts,
        )

    def _gap(self, conv: _Conv, ev: StreamGap, out: list[PipelineEvent]) -> None:
        if ev.direction is C2B:  # bytes lost before the preamble was known
            self._unsniffed(conv, out, ev.packet, ev.ts)
        events = self._decoder(conv, ev.direction, ev.offset).gap(ev.length)
        self._deliver(conv, events, out)

    def _unsniffed(self, conv: _Conv, out: list[PipelineEvent], packet: int, ts: int) -> None:
        """Client bytes too few to classify (the stream ended or lost bytes before the
        preamble was known) are still part of the stream: hand them to the decoder."""
        head, conv.head = conv.head, None
        if head:
            self._deliver(conv, self._decoder(conv, C2B, 0).feed(head, packet=packet, ts=ts), out)

    def _deliver(
        self, conv: _Conv, events: list[Frame | Anomaly], out: list[PipelineEvent]
    ) -> None:
        if conv.mode == "pending" and events:
            self._decide(conv, list(events), out)
        elif conv.mode == "pulsar":
            self._publish(conv, events, out)

    def _publish(
        self,
        conv: _Conv,
        events: Sequence[PipelineEvent],
        out: list[PipelineEvent],
    ) -> None:
        """Emit a Pulsar connection's events: frames with their topic, pairs, messages."""
        state = conv.state
        messages = self.messages
        for ev in events:
            if type(ev) is Frame:
                topic, pairs = state.observe(ev)
                if topic is not None:
                    ev = ev._replace(topic=topic)
                out.append(ev)
                if pairs:
                    out.extend(pairs)
                if messages is not None and ev.command_type in PAYLOAD_TYPES:
                    for item in messages.feed(ev):
                        if type(item) is Anomaly:
                            conv.anomalies += 1
                        out.append(item)
            else:
                if type(ev) is Anomaly:
                    conv.anomalies += 1
                out.append(ev)

    def _decide(self, conv: _Conv, events: list[Frame | Anomaly], out: list[PipelineEvent]) -> None:
        """A connection off the broker ports is Pulsar if one side opens with a CONNECT.

        Each direction gets one verdict, on its first event; events are held until a CONNECT
        is seen (its sender is the client) or both sides opened with something else.
        """
        first = events[0]
        direction = first.direction
        assert direction is not None
        if direction not in conv.verdict:
            conv.verdict[direction] = isinstance(first, Frame) and first.command_type == _CONNECT
        if not conv.verdict[direction]:
            conv.held.extend(events)
            if len(conv.verdict) == 2 or len(conv.held) > _MAX_HELD:
                self._ignore(conv)
            return
        opened = conv.opened
        key = opened.key
        held = conv.held + list(events)
        if direction is B2C:  # the side we took for the broker sent CONNECT
            key = self.tcp.swap_roles(opened.conn_id)
            conv.decoders = {
                C2B: conv.decoders[B2C],
                **({B2C: conv.decoders[C2B]} if C2B in conv.decoders else {}),
            }
            for direction, dec in conv.decoders.items():
                dec.direction = direction
            conv.midstream = {C2B: conv.midstream[B2C], B2C: conv.midstream[C2B]}
            held = [_flip(e) for e in held]
            conv.opened = opened._replace(key=key)
        conv.mode = "pulsar"
        conv.held = []
        out.append(ConversationOpened(opened.conn_id, key, opened.ts, opened.packet))
        self._publish(conv, held, out)

    def _ignore(self, conv: _Conv) -> None:
        conv.mode = "ignored"
        conv.held.clear()
        conv.decoders.clear()
        self.tcp.ignore(conv.opened.conn_id)

    def _closed(self, ev: ConnClosed, out: list[PipelineEvent]) -> None:
        conv = self._convs.pop(ev.conn_id)
        if conv.mode in ("pulsar", "pending"):
            self._unsniffed(conv, out, 0, 0)  # their packets are no longer known
        for dec in list(conv.decoders.values()):
            self._deliver(conv, dec.close(), out)
        if conv.mode == "pulsar":
            if self.messages is not None:
                self._publish(conv, self.messages.close_conn(ev.conn_id), out)
            out.extend(conv.state.close())
        if conv.mode == "pending":
            conv.mode = "ignored"
        if conv.mode == "ignored":
            return
        opened = conv.opened
        proxied = conv.preamble.source if conv.preamble is not None else None
        pre = conv.preamble.length if conv.preamble is not None else 0
        out.append(
            Conversation(
                conn_id=ev.conn_id,
                key=opened.key,
                start_ts=opened.ts,
                end_ts=ev.ts,
                first_packet=opened.packet,
                last_packet=ev.packet,
                ended=ev.reason,
                syn_seen=opened.syn_seen,
                encrypted=conv.mode == "tls",
                proxied_client=proxied,
                c2b=_stats(conv.decoders.get(C2B), ev.packets_c2b, ev.bytes_c2b, pre),
                b2c=_stats(conv.decoders.get(B2C), ev.packets_b2c, ev.bytes_b2c, 0),
                summary=conv.state.summary,
                anomalies=conv.anomalies,
            )
        )


def _stats(dec: FrameDecoder | None, packets: int, wire: int, preamble: int) -> DirectionStats:
    if dec is None:
        return DirectionStats(
            packets=packets,
            wire_bytes=wire,
            stream_bytes=preamble,
            preamble_bytes=preamble,
            frames=0,
            frame_bytes=0,
            skipped_bytes=0,
            gap_bytes=0,
        )
    s = dec.stats
    return DirectionStats(
        packets=packets,
        wire_bytes=wire,
        stream_bytes=dec.offset,
        preamble_bytes=preamble,
        frames=s.frames,
        frame_bytes=s.frame_bytes,
        skipped_bytes=s.skipped_bytes,
        gap_bytes=s.gap_bytes,
    )


def _flip(ev: PipelineEvent) -> PipelineEvent:
    if isinstance(ev, Frame | Anomaly) and ev.direction is not None:
        return ev._replace(direction=B2C if ev.direction is C2B else C2B)
    return ev


def _net_anomaly(issue: NetIssue) -> Anomaly:
    where = ""
    if issue.src_ip is not None:
        where = f" ({issue.src_ip}:{issue.src_port} -> {issue.dst_ip}:{issue.dst_port})"
    return Anomaly.of(
        issue.code,
        conn_id=0,
        direction=None,
        stream_offset=None,
        detail=issue.detail + where,
        packet=issue.number,
        ts=issue.ts,
    )
