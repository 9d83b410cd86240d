"""Packets made from scratch: TCP connections, IP fragments, plain pcap files.

Input: addresses, ports and the bytes each side sends (or segments placed at will).
Output: `Pkt`s (direction and Ethernet/IPv4/TCP bytes), stamped into `Rec`s (fuzz.mutators'
packet records) by `stamp`, and pcap file bytes (`pcap`).
Rules: nothing here reads the dissector: the bytes are what RFC 791 / RFC 9293 say (checksums
left 0, as captures of offloaded traffic show them). Acknowledgement numbers follow the order
the packets are *made* in: whoever reorders packets afterwards decides what the capture shows.
Used by the levels that build inputs rather than damage the samples (tls, multi) and by
fuzz.growth.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from fuzz.mutators import ACK, ETHER, FIN, PSH, SYN, Rec

C2B, B2C = 0, 1  # the directions of a Pkt: client to broker, broker to client
_ETH = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
_MASK32 = 0xFFFFFFFF


class Pkt(NamedTuple):
    """One packet before it is stamped: its direction (C2B, B2C) and link-layer bytes."""

    direction: int
    data: bytes


def ip4(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def ipv4(
    src: bytes, dst: bytes, proto: int, payload: bytes, ident: int = 0, frag: int = 0
) -> bytes:
    """An IPv4 header (no options) and `payload`; frag: flags and offset field (MF 0x2000)."""
    head = struct.pack(
        ">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident & 0xFFFF, frag, 64, proto, 0, src, dst
    )
    return head + payload


def tcp(sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    """A TCP header (no options) and `payload`."""
    head = struct.pack(
        ">HHIIBBHHH", sport, dport, seq & _MASK32, ack & _MASK32, 5 << 4, flags, 65535, 0, 0
    )
    return head + payload


def ether(l3: bytes) -> bytes:
    return _ETH + l3


class Conn:
    """One TCP connection between a client and a broker; packets are made in send order."""

    def __init__(
        self,
        client: str = "10.0.0.1",
        server: str = "10.0.0.2",
        client_port: int = 40000,
        server_port: int = 6650,
        isn: tuple[int, int] = (1000, 5000),
    ) -> None:
        self.addr = (ip4(client), ip4(server))
        self.port = (client_port, server_port)
        self.next = [isn[0], isn[1]]  # next sequence number of each direction
        self.isn = isn

    def packet(
        self, direction: int, flags: int, payload: bytes = b"", seq: int | None = None
    ) -> Pkt:
        """A segment of `direction` at `seq` (default: the next one), acknowledging all the
        peer has sent; the next sequence number moves past it only when seq is None."""
        d, o = direction, 1 - direction
        at = self.next[d] if seq is None else seq
        segment = tcp(self.port[d], self.port[o], at, self.next[o], flags, payload)
        if seq is None:
            self.next[d] = (at + len(payload) + (1 if flags & (SYN | FIN) else 0)) & _MASK32
        return Pkt(d, ether(ipv4(self.addr[d], self.addr[o], 6, segment)))

    def handshake(self) -> list[Pkt]:
        self.next = [self.isn[0], self.isn[1]]
        return [
            self.packet(C2B, SYN),
            self.packet(B2C, SYN | ACK),
            self.packet(C2B, ACK),
        ]

    def send(self, direction: int, data: bytes, mss: int = 1400) -> list[Pkt]:
        """`data` in segments of at most `mss` bytes (none when it is empty)."""
        return [
            self.packet(direction, PSH | ACK, data[i : i + mss]) for i in range(0, len(data), mss)
        ]

    def close(self) -> list[Pkt]:
        return [
            self.packet(C2B, FIN | ACK),
            self.packet(B2C, FIN | ACK),
            self.packet(C2B, ACK),
        ]


def stamp(pkts: Iterable[Pkt], start: int = 1_700_000_000_000_000, step: int = 100) -> list[Rec]:
    """Packet records, `step` µs apart from `start`."""
    return [Rec(start + i * step, ETHER, p.data, len(p.data)) for i, p in enumerate(pkts)]


def fragments(l3: bytes, size: int, overlap: int = 0) -> list[bytes]:
    """An IPv4 datagram as fragments carrying `size` bytes (a multiple of 8) of its payload
    each; each fragment after the first starts `overlap` bytes (a multiple of 8) early,
    repeating the end of the previous one (teardrop-style overlaps)."""
    head, body = l3[:20], l3[20:]
    out = []
    at = 0
    while at < len(body):
        start = max(at - overlap, 0) if at else 0
        end = min(at + size, len(body))
        more = 0x2000 if end < len(body) else 0
        part = body[start:end]
        fields = bytearray(head)
        struct.pack_into(">H", fields, 2, 20 + len(part))
        struct.pack_into(">H", fields, 6, more | (start // 8))
        out.append(bytes(fields) + part)
        at = end
    return out


def pcap(recs: Sequence[Rec], linktype: int = ETHER) -> bytes:
    """A little-endian microsecond pcap file of the records."""
    parts = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)]
    for r in recs:
        sec, usec = divmod(r.ts, 1_000_000)
        parts.append(struct.pack("<IIII", sec & _MASK32, usec, len(r.data), r.orig_len) + r.data)
    return b"".join(parts)
