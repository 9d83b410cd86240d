"""Crafted captures: TCP conversations carrying encoded Pulsar frames, written with scapy.

Input: a `Conn` (endpoints and initial sequence numbers), frames encoded with
`dissector.pulsar.encoder` (`Msg`), and a `Session` that turns them into TCP segments (`Seg`) with a
correct handshake, sequence and acknowledgement numbers. Tests may then drop, reorder,
duplicate or alter segments before writing them.
Output: pcap files (any link type the dissector reads, gzip, snap length, cut short) and
pcapng files (several interfaces), plus the expected values tests compare with.
Rule: every expected value here comes from what was put in (the encoded frames, the sizes
the stream was cut into, the position of each packet in the file), never from the dissector.
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import PcapWriter

from dissector.events import Direction
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
MASK = 0xFFFFFFFF

#: Time of the first packet of every crafted capture (microseconds since the epoch).
T0_US = 1_700_000_000_000_000
#: Time between two consecutive packets of a crafted capture.
STEP_US = 1_000

TOPIC = "persistent://public/default/crafted"
SUBSCRIBED = "persistent://public/default/crafted-in"

#: Link type name -> pcap LINKTYPE_* number.
LINKTYPES: dict[str, int] = {
    "ether": 1,
    "vlan": 1,
    "qinq": 1,
    "sll": 113,
    "sll2": 276,
    "null": 0,
    "raw": 101,
}
_MAC_CLIENT = "02:00:00:00:00:01"
_MAC_BROKER = "02:00:00:00:00:02"


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Msg:
    """One encoded Pulsar frame and what a correct dissector must report about it."""

    direction: Direction
    name: str
    data: bytes
    fields: Mapping[str, Any] = field(default_factory=dict)
    payload: bytes | None = None
    checksum: str | None = None  # expected `checksum` column: None for simple commands


def msg(
    direction: Direction,
    name: str,
    *,
    payload: bytes | None = None,
    checksum: bool | int = True,
    metadata: MessageMetadata | None = None,
    **fields: Any,
) -> Msg:
    """Encode command `name` with `fields`; SEND/MESSAGE get metadata and `payload`.

    checksum: True (valid CRC32C), False (no checksum, as brokers send MESSAGE) or an int
    written as a wrong checksum.
    """
    cmd = command(name, **fields)
    if payload is None:
        return Msg(direction, name, encode_frame(cmd), dict(fields))
    if metadata is None:
        metadata = MessageMetadata(
            producer_name="crafted-producer",
            sequence_id=fields.get("sequence_id", 0),
            publish_time=T0_US // 1000,
        )
    data = encode_frame(cmd, metadata=metadata, payload=payload, checksum=checksum)
    status = "valid" if checksum is True else "absent" if checksum is False else "invalid"
    return Msg(direction, name, data, dict(fields), payload, status)


def baseline_msgs(*, auth_data: bytes | None = None) -> list[Msg]:
    """A producer and a consumer session in both directions, in the order they are sent."""
    connect: dict[str, Any] = {"client_version": "crafted-client", "protocol_version": 21}
    if auth_data is not None:
        connect.update(auth_method_name="token", auth_data=auth_data)
    mid = {"ledgerId": 7, "entryId": 3}
    return [
        msg(C2B, "CONNECT", **connect),
        msg(B2C, "CONNECTED", server_version="crafted-broker", protocol_version=21),
        msg(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1),
        msg(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="crafted-producer"),
        msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=b"hello pulsar"),
        msg(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=0, message_id=mid),
        msg(
            C2B,
            "SUBSCRIBE",
            topic=SUBSCRIBED,
            subscription="sub",
            subType=0,
            consumer_id=2,
            request_id=2,
        ),
        msg(B2C, "SUCCESS", request_id=2),
        msg(C2B, "FLOW", consumer_id=2, messagePermits=1000),
        msg(B2C, "MESSAGE", consumer_id=2, message_id=mid, payload=b"hello pulsar", checksum=False),
        msg(C2B, "ACK", consumer_id=2, ack_type=0, message_id=[mid]),
        msg(B2C, "PING"),
        msg(C2B, "PONG"),
    ]


def stream_of(msgs: Iterable[Msg]) -> bytes:
    """The encoded frames one after the other."""
    return b"".join(m.data for m in msgs)


def cut(data: bytes, sizes: Iterable[int]) -> list[bytes]:
    """`data` cut into pieces of the given sizes; what is left over is one last piece."""
    pieces, at = [], 0
    for size in sizes:
        if at >= len(data):
            break
        pieces.append(data[at : at + size])
        at += size
    if at < len(data):
        pieces.append(data[at:])
    return pieces


def chunks(data: bytes, size: int) -> list[bytes]:
    """`data` cut into pieces of `size` bytes (the last one may be shorter)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


# --------------------------------------------------------------------------- TCP


@dataclass(frozen=True)
class Conn:
    """One TCP connection: the client and broker endpoints and their initial sequence numbers."""

    client_ip: str = "10.0.0.1"
    client_port: int = 40000
    broker_ip: str = "10.0.0.2"
    broker_port: int = 6650
    client_isn: int = 1_000
    broker_isn: int = 900_000

    @property
    def ipv6(self) -> bool:
        return ":" in self.client_ip

    def endpoints(self, direction: Direction) -> tuple[str, int, str, int]:
        """(src ip, src port, dst ip, dst port) of a packet going `direction`."""
        if direction is C2B:
            return self.client_ip, self.client_port, self.broker_ip, self.broker_port
        return self.broker_ip, self.broker_port, self.client_ip, self.client_port


@dataclass(frozen=True)
class Seg:
    """One TCP segment to write."""

    conn: Conn
    direction: Direction
    seq: int
    ack: int
    flags: str  # scapy TCP flags, e.g. "S", "SA", "PA", "FA"
    payload: bytes = b""
    offset: int = 0  # stream offset of payload[0] in its direction
    ts_us: int | None = None  # None: given by the packet's position in the file

    def replace(self, **changes: Any) -> Seg:
        return dataclasses.replace(self, **changes)

    def l3(self, **ip_fields: Any) -> bytes:
        """The IP packet (IPv4 or IPv6 by the connection's addresses)."""
        src, sport, dst, dport = self.conn.endpoints(self.direction)
        ip: Any
        if self.conn.ipv6:
            ip = IPv6(src=src, dst=dst, **ip_fields)
        else:
            ip = IP(src=src, dst=dst, **{"flags": "DF", **ip_fields})
        tcp = TCP(
            sport=sport,
            dport=dport,
            seq=self.seq,
            ack=self.ack if "A" in self.flags else 0,
            flags=self.flags,
            window=65535,
        )
        pkt = ip / tcp
        if self.payload:
            pkt = pkt / Raw(self.payload)
        return bytes(pkt)


@dataclass(frozen=True)
class Placed:
    """Where a frame was put: its direction's stream offset (PROXY header included)."""

    msg: Msg
    offset: int


class Session:
    """Build the segments of one connection, in the order they are sent.

    Stream offsets count from the first byte after the SYN (as the dissector's do when it
    sees the SYN); `seq_at` turns them into sequence numbers, modulo 2**32.
    """

    def __init__(self, conn: Conn | None = None) -> None:
        self.conn = conn or Conn()
        self.segs: list[Seg] = []
        self.sent = {C2B: 0, B2C: 0}  # stream bytes sent per direction
        self.fin = {C2B: 0, B2C: 0}  # 1 once a FIN was sent (it takes one sequence number)
        self.placed: list[Placed] = []

    def isn(self, direction: Direction) -> int:
        return self.conn.client_isn if direction is C2B else self.conn.broker_isn

    def seq_at(self, direction: Direction, offset: int) -> int:
        return (self.isn(direction) + 1 + offset) & MASK

    def ack_for(self, direction: Direction) -> int:
        """Acknowledgement number of a segment going `direction`: all the peer has sent."""
        peer = B2C if direction is C2B else C2B
        return (self.seq_at(peer, self.sent[peer]) + self.fin[peer]) & MASK

    def _add(self, seg: Seg) -> Seg:
        self.segs.append(seg)
        return seg

    def handshake(self) -> list[Seg]:
        """SYN, SYN-ACK, ACK."""
        c = self.conn
        return [
            self._add(Seg(c, C2B, c.client_isn, 0, "S")),
            self._add(Seg(c, B2C, c.broker_isn, (c.client_isn + 1) & MASK, "SA")),
            self._add(Seg(c, C2B, self.seq_at(C2B, 0), self.seq_at(B2C, 0), "A")),
        ]

    def send(
        self, direction: Direction, data: bytes, *, at: int | None = None, flags: str = "PA"
    ) -> Seg:
        """One segment carrying `data` at stream offset `at` (default: the next byte)."""
        offset = self.sent[direction] if at is None else at
        seg = Seg(
            self.conn,
            direction,
            self.seq_at(direction, offset),
            self.ack_for(direction),
            flags,
            data,
            offset,
        )
        self.sent[direction] = max(self.sent[direction], offset + len(data))
        return self._add(seg)

    def send_pieces(self, direction: Direction, pieces: Iterable[bytes]) -> list[Seg]:
        return [self.send(direction, p) for p in pieces]

    def frames(
        self,
        msgs: Iterable[Msg],
        *,
        sizes: Iterable[int] | None = None,
        each: int | None = None,
        prefix: bytes = b"",
    ) -> list[Seg]:
        """Send frames (all in one direction) after `prefix` bytes (e.g. a PROXY header):
        one segment per frame (the prefix joins the first), or the whole stream cut into
        `sizes`, or into pieces of `each` bytes."""
        msgs = list(msgs)
        direction = msgs[0].direction
        assert all(m.direction is direction for m in msgs)
        at = self.sent[direction] + len(prefix)
        for m in msgs:
            self.placed.append(Placed(m, at))
            at += len(m.data)
        data = prefix + stream_of(msgs)
        if sizes is not None:
            pieces = cut(data, sizes)
        elif each is not None:
            pieces = chunks(data, each)
        else:
            pieces = [prefix + msgs[0].data] + [m.data for m in msgs[1:]]
        return self.send_pieces(direction, pieces)

    def exchange(self, msgs: Iterable[Msg]) -> list[Seg]:
        """Each frame in a segment of its own, in the given order."""
        return [seg for m in msgs for seg in self.frames([m])]

    def ack(self, direction: Direction) -> Seg:
        """A pure ACK going `direction`."""
        return self._add(
            Seg(
                self.conn,
                direction,
                self.seq_at(direction, self.sent[direction]),
                self.ack_for(direction),
                "A",
                b"",
                self.sent[direction],
            )
        )

    def close(self, first: Direction = C2B) -> list[Seg]:
        """FIN from the client, FIN-ACK from the broker, last ACK from the client (`first`
        B2C: the broker's FIN first, the client's FIN-ACK, the broker's last ACK)."""
        out = []
        for direction in (C2B, B2C) if first == C2B else (B2C, C2B):
            seg = Seg(
                self.conn,
                direction,
                self.seq_at(direction, self.sent[direction]),
                self.ack_for(direction),
                "FA",
                b"",
                self.sent[direction],
            )
            self.fin[direction] = 1
            out.append(self._add(seg))
        out.append(self.ack(first))
        return out


def baseline_session(conn: Conn | None = None, *, close: bool = True) -> Session:
    """Handshake, the baseline frames one per segment, then FIN both ways."""
    s = Session(conn)
    s.handshake()
    s.exchange(baseline_msgs())
    if close:
        s.close()
    return s


# --------------------------------------------------------------------------- expectations

Item = Seg | bytes  # a segment, or a ready IP packet (UDP, fragments, ...)

FRAME_COLUMNS = (
    "direction",
    "command",
    "request_id",
    "producer_id",
    "consumer_id",
    "sequence_id",
    "ledger_id",
    "entry_id",
    "topic",
    "checksum",
    "payload_size",
    "stream_offset",
    "frame_size",
    "first_packet",
    "last_packet",
    "complete",
)


def packet_number(items: Sequence[Item], conn: Conn, direction: Direction, offset: int) -> int:
    """Number (1-based position in the file) of the first packet carrying stream byte
    `offset` of `direction` on `conn`."""
    for number, item in enumerate(items, start=1):
        if (
            isinstance(item, Seg)
            and item.conn == conn
            and item.direction is direction
            and item.offset <= offset < item.offset + len(item.payload)
        ):
            return number
    raise AssertionError(f"no packet carries byte {offset} of {direction}")


def expected_row(
    placed: Placed,
    topic: str | None,
    items: Sequence[Item] | None = None,
    conn: Conn | None = None,
) -> dict[str, Any]:
    """The frames-table row a frame must give (packet numbers only when `items` given)."""
    m, f = placed.msg, placed.msg.fields
    mid = f.get("message_id")
    if isinstance(mid, list):
        mid = mid[0] if mid else None
    row: dict[str, Any] = {
        "direction": m.direction.value,
        "command": m.name,
        "request_id": f.get("request_id"),
        "producer_id": f.get("producer_id"),
        "consumer_id": f.get("consumer_id"),
        "sequence_id": f.get("sequence_id"),
        "ledger_id": None if mid is None else mid["ledgerId"],
        "entry_id": None if mid is None else mid["entryId"],
        "topic": topic,
        "checksum": m.checksum,
        "payload_size": None if m.payload is None else len(m.payload),
        "stream_offset": placed.offset,
        "frame_size": len(m.data),
        "complete": True,
    }
    if items is not None:
        c = conn if conn is not None else next(i.conn for i in items if isinstance(i, Seg))
        end = placed.offset + len(m.data) - 1
        row["first_packet"] = packet_number(items, c, m.direction, placed.offset)
        row["last_packet"] = packet_number(items, c, m.direction, end)
    return row


def expected_rows(
    placed: Iterable[Placed], items: Sequence[Item] | None = None, conn: Conn | None = None
) -> list[dict[str, Any]]:
    """Rows of frames in the order given (the order they were sent on one connection).

    topic: the one a frame names, else the topic of its producer_id / consumer_id as set by
    an earlier PRODUCER / SUBSCRIBE in `placed` (None when not set before).
    """
    producers: dict[int, str] = {}
    consumers: dict[int, str] = {}
    out = []
    for p in placed:
        f = p.msg.fields
        topic = f.get("topic")
        if p.msg.name == "PRODUCER":
            producers[f["producer_id"]] = f["topic"]
        elif p.msg.name == "SUBSCRIBE":
            consumers[f["consumer_id"]] = f["topic"]
        elif topic is None and "producer_id" in f:
            topic = producers.get(f["producer_id"])
        elif topic is None and "consumer_id" in f:
            topic = consumers.get(f["consumer_id"])
        out.append(expected_row(p, topic, items, conn))
    return out


def wire_counts(items: Sequence[Item], conn: Conn) -> dict[str, int]:
    """packets_c2b/b2c and bytes_c2b/b2c (TCP payload on the wire) of `conn`'s segments."""
    out = {"packets_c2b": 0, "packets_b2c": 0, "bytes_c2b": 0, "bytes_b2c": 0}
    for item in items:
        if isinstance(item, Seg) and item.conn == conn:
            d = "c2b" if item.direction is C2B else "b2c"
            out[f"packets_{d}"] += 1
            out[f"bytes_{d}"] += len(item.payload)
    return out


def ts_of(number: int) -> int:
    """Timestamp (µs) the writers give packet `number` (1-based) unless overridden."""
    return T0_US + (number - 1) * STEP_US


# --------------------------------------------------------------------------- link layers


def link_frame(l3: bytes, link: str) -> bytes:
    """Wrap an IP packet in the link header of `link` (a key of LINKTYPES)."""
    v6 = l3[0] >> 4 == 6
    etype = 0x86DD if v6 else 0x0800
    if link == "ether":
        frame = bytes(Ether(dst=_MAC_BROKER, src=_MAC_CLIENT, type=etype)) + l3
        return frame.ljust(60, b"\0")  # minimum Ethernet frame: padding the IP length excludes
    if link == "vlan":
        return (
            bytes(Ether(dst=_MAC_BROKER, src=_MAC_CLIENT, type=0x8100) / Dot1Q(vlan=10, type=etype))
            + l3
        )
    if link == "qinq":
        return (
            bytes(
                Ether(dst=_MAC_BROKER, src=_MAC_CLIENT, type=0x88A8)
                / Dot1AD(vlan=100, type=0x8100)
                / Dot1Q(vlan=10, type=etype)
            )
            + l3
        )
    if link == "sll":
        mac = bytes.fromhex(_MAC_CLIENT.replace(":", "")) + b"\0\0"
        return bytes(CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=mac, proto=etype)) + l3
    if link == "sll2":
        # protocol, reserved, interface index, ARPHRD, packet type, address length, address
        mac = bytes.fromhex(_MAC_CLIENT.replace(":", "")) + b"\0\0"
        return struct.pack("!HHIHBB8s", etype, 0, 2, 1, 0, 6, mac) + l3
    if link == "null":
        # BSD loopback: address family in the capturing host's (here: little-endian) order.
        return struct.pack("<I", 30 if v6 else 2) + l3
    if link == "raw":
        return l3
    raise ValueError(f"unknown link type {link!r}")


def l3_of(item: Item) -> bytes:
    return item.l3() if isinstance(item, Seg) else item


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Written:
    """A written capture and the file offset of each record (for cutting it short)."""

    path: Path
    record_offsets: list[int]


def write_pcap(
    path: Path,
    items: Sequence[Item],
    *,
    link: str = "ether",
    snaplen: int | None = None,
    gz: bool = False,
    nano: bool = False,
    endianness: str = "<",
) -> Written:
    """Write `items` as a classic pcap with scapy; packet i gets `ts_of(i)` (or its ts_us).

    snaplen: records keep only that many bytes, the wire length stays the packet's.
    nano: nanosecond timestamps (magic a1b23c4d); endianness: "<" or ">".
    """
    writer = PcapWriter(
        str(path),
        linktype=LINKTYPES[link],
        gz=gz,
        snaplen=snaplen or 262144,
        nano=nano,
        endianness=endianness,
    )
    writer.linktype = LINKTYPES[link]  # scapy drops a falsy linktype (0, BSD NULL)
    writer.write_header(None)
    offsets, at = [], 24
    for number, item in enumerate(items, start=1):
        frame = link_frame(l3_of(item), link)
        kept = frame[:snaplen] if snaplen else frame
        ts = item.ts_us if isinstance(item, Seg) and item.ts_us is not None else ts_of(number)
        frac = ts % 1_000_000 * (1000 if nano else 1)
        writer.write_packet(kept, sec=ts // 1_000_000, usec=frac, wirelen=len(frame))
        offsets.append(at)
        at += 16 + len(kept)
    writer.close()
    return Written(path, offsets)


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    length = struct.pack("<I", 12 + len(body))
    return struct.pack("<I", btype) + length + body + length


def write_pcapng(
    path: Path,
    items: Sequence[Item],
    *,
    links: Sequence[str] = ("ether", "raw"),
    interface: Callable[[int, Item], int] | None = None,
    gz: bool = False,
) -> Path:
    """Write a pcapng file with one Interface Description Block per entry of `links`.

    interface(number, item) picks each packet's interface; by default client->broker
    packets are on interface 0 and broker->client ones on the last interface.
    """

    def default(_number: int, item: Item) -> int:
        return 0 if not isinstance(item, Seg) or item.direction is C2B else len(links) - 1

    pick = interface or default
    out = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    out += [_block(1, struct.pack("<HHI", LINKTYPES[link], 0, 0)) for link in links]
    for number, item in enumerate(items, start=1):
        ifid = pick(number, item)
        frame = link_frame(l3_of(item), links[ifid])
        ts = item.ts_us if isinstance(item, Seg) and item.ts_us is not None else ts_of(number)
        head = struct.pack("<IIIII", ifid, ts >> 32, ts & MASK, len(frame), len(frame))
        out.append(_block(6, head + frame))
    data = b"".join(out)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


# --------------------------------------------------------------------------- preambles


def proxy_v1(src: tuple[str, int], dst: tuple[str, int]) -> bytes:
    """An HAProxy PROXY protocol v1 line (TCP4 or TCP6 by the source address)."""
    family = "TCP6" if ":" in src[0] else "TCP4"
    return f"PROXY {family} {src[0]} {dst[0]} {src[1]} {dst[1]}\r\n".encode()


def proxy_v2(src: tuple[str, int], dst: tuple[str, int]) -> bytes:
    """A binary PROXY protocol v2 header (PROXY command, TCP over IPv4 or IPv6)."""
    import socket

    v6 = ":" in src[0]
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    body = (
        socket.inet_pton(fam, src[0])
        + socket.inet_pton(fam, dst[0])
        + struct.pack("!HH", src[1], dst[1])
    )
    return (
        b"\r\n\r\n\x00\r\nQUIT\n"
        + bytes([0x21, 0x21 if v6 else 0x11])
        + struct.pack("!H", len(body))
        + body
    )


#: A minimal TLS 1.2 ClientHello record (handshake record, version 3.1, type 1; one suite,
#: no extensions; record and message lengths consistent).
TLS_CLIENT_HELLO = (
    bytes.fromhex("160301002d010000290303") + bytes(32) + bytes.fromhex("00000213010100")
)


# --------------------------------------------------------------------------- encapsulations


def write_frames(path: Path, frames: Sequence[bytes], *, linktype: int = 1) -> Path:
    """Write ready link-layer frames (tunnels, fragments, ...) as a classic pcap; frame i
    (1-based) gets `ts_of(i)`."""
    writer = PcapWriter(str(path), linktype=linktype, snaplen=262144)
    writer.linktype = linktype
    writer.write_header(None)
    for number, frame in enumerate(frames, start=1):
        ts = ts_of(number)
        writer.write_packet(frame, sec=ts // 1_000_000, usec=ts % 1_000_000, wirelen=len(frame))
    writer.close()
    return path


def fragment_l3(l3: bytes, size: int, ident: int) -> list[bytes]:
    """An IP packet without options or extension headers (IPv4 or IPv6) cut into fragments of
    `size` payload bytes (a multiple of 8; the last one may be shorter), in order."""
    from scapy.layers.inet6 import IPv6ExtHdrFragment

    assert size % 8 == 0
    v6 = l3[0] >> 4 == 6
    head = 40 if v6 else 20
    payload = l3[head:]
    out = []
    for at in range(0, len(payload), size):
        piece = payload[at : at + size]
        more = at + size < len(payload)
        ip: Any
        if v6:
            src, dst = IPv6(l3).src, IPv6(l3).dst
            frag = IPv6ExtHdrFragment(nh=l3[6], offset=at // 8, m=int(more), id=ident)
            ip = IPv6(src=src, dst=dst) / frag / Raw(piece)
        else:
            src, dst = IP(l3).src, IP(l3).dst
            ip = IP(src=src, dst=dst, id=ident, proto=l3[9], flags="MF" if more else 0)
            ip.frag = at // 8
            ip = ip / Raw(piece)
        out.append(bytes(ip))
    return out
