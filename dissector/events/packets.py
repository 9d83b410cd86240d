"""The records below the Pulsar framing: packets, segments, stream bytes, TCP's events.

Input: nothing. Output: `RawPacket`, `Segment`, `NetIssue`, `Preamble`, `FlowKey`,
`ConnOpened`, `ConnClosed`, `StreamData`, `StreamGap` and `TcpEvent`, what capture, net and
flow hand on; `Dealt`, `DealtRaw` and `Skipped`, what a -j worker's compiled walk gives
(dissector.flow.shard).
Rule: NamedTuples (made per packet); timestamps in µs since the epoch, packet numbers from 1.
"""

from __future__ import annotations

from typing import NamedTuple

from dissector.anomalies import AnomalyCode
from dissector.events.decoded import Anomaly
from dissector.events.vocabulary import CloseReason, Direction, PreambleKind


class RawPacket(NamedTuple):
    """One record of a capture file or live source, before any header is parsed.

    A NamedTuple rather than a dataclass: one is made per packet, so creation cost matters.
    """

    number: int  # 1-based packet number within its capture source
    ts: int  # microseconds since the Unix epoch
    linktype: int  # pcap LINKTYPE_* of the interface that captured it
    data: bytes  # the captured bytes (may be shorter than orig_len: snaplen)
    orig_len: int  # length of the packet on the wire
    interface: int = 0  # pcapng interface index (0 for pcap)


class Segment(NamedTuple):
    """A TCP segment with its addresses, as parsed from a RawPacket (one per packet)."""

    number: int  # packet number (provenance)
    ts: int  # microseconds since the Unix epoch
    src_ip: str  # dotted IPv4 or compressed IPv6 text
    dst_ip: str
    src_port: int
    dst_port: int
    seq: int  # sequence number of the first payload byte (or of the SYN/FIN)
    ack: int  # acknowledgement number (valid when the ACK flag is set)
    flags: int  # TCP flags byte (FIN=0x01 SYN=0x02 RST=0x04 PSH=0x08 ACK=0x10 URG=0x20)
    window: int  # window field as on the wire (unscaled)
    payload: bytes  # TCP payload bytes present in the capture
    missing: int = 0  # payload bytes cut off by the snaplen (on the wire, not captured)


class Dealt(Segment):
    """A segment of this shard's connection, dealt by the compiled walk (-j workers)."""

    __slots__ = ()


class DealtRaw(RawPacket):
    """A packet of this shard's connection, told from its bytes by the compiled walk (-j
    workers): to parse."""

    __slots__ = ()


class Skipped(NamedTuple):
    """A run of other shards' packets the compiled walk skipped (-j workers)."""

    number: int  # the last one's packet number
    ts: int  # the last one's time (µs)
    top: int  # the latest time among them: the idle clock
    at: int  # the packet number of that time (its first; with the clock, the run's first)


class NetIssue(NamedTuple):
    """A packet whose headers could not be taken to a TCP segment."""

    code: str  # net.ip_fragment, net.truncated_header, net.bad_header, net.unsupported_linktype
    detail: str
    number: int  # packet number (provenance)
    ts: int  # microseconds since the Unix epoch
    src_ip: str | None = None
    dst_ip: str | None = None
    src_port: int | None = None
    dst_port: int | None = None

    def anomaly(self) -> Anomaly:
        """This issue as an anomaly row (conn_id 0: it belongs to no connection)."""
        where = ""
        if self.src_ip is not None:
            where = f" ({self.src_ip}:{self.src_port} -> {self.dst_ip}:{self.dst_port})"
        return Anomaly.of(
            self.code,
            conn_id=0,
            direction=None,
            stream_offset=None,
            detail=self.detail + where,
            packet=self.number,
            ts=self.ts,
        )


class Preamble(NamedTuple):
    kind: PreambleKind
    length: int = 0  # header bytes before the first Pulsar frame
    source: tuple[str, int] | None = None  # original client (PROXY header)
    destination: tuple[str, int] | None = None
    detail: str = ""

    def anomaly(self, conn_id: int, packet: int, ts: int) -> Anomaly:
        """A `proxy_invalid` preamble as an anomaly row (at the start of the client stream)."""
        return Anomaly.of(
            AnomalyCode.PROXY_HEADER_INVALID,
            conn_id=conn_id,
            direction=Direction.CLIENT_TO_BROKER,
            stream_offset=0,
            detail=self.detail,
            length=self.length,
            packet=packet,
            ts=ts,
        )


class FlowKey(NamedTuple):
    client_ip: str
    client_port: int
    broker_ip: str
    broker_port: int


class ConnOpened(NamedTuple):
    conn_id: int
    key: FlowKey
    ts: int
    packet: int
    syn_seen: bool  # the capture holds the connection's SYN
    guessed: bool  # neither a broker port nor a SYN told which side is the broker


class ConnClosed(NamedTuple):
    conn_id: int
    reason: CloseReason
    ts: int
    packet: int
    packets_c2b: int = 0  # packets seen per direction (retransmissions included)
    packets_b2c: int = 0
    bytes_c2b: int = 0  # TCP payload bytes on the wire per direction (retransmissions included)
    bytes_b2c: int = 0
    #: the side whose FIN or RST came first (None: neither seen), with that packet and time
    closed_by: Direction | None = None
    close_packet: int = 0
    close_ts: int = 0


class StreamData(NamedTuple):
    conn_id: int
    direction: Direction
    offset: int  # stream offset of data[0] (0 = first byte after the SYN or first seen)
    data: bytes
    packet: int
    ts: int


class StreamGap(NamedTuple):
    conn_id: int
    direction: Direction
    offset: int
    length: int
    packet: int
    ts: int


TcpEvent = ConnOpened | StreamData | StreamGap | ConnClosed | Anomaly
