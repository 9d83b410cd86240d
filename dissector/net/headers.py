"""IP and TCP headers of one raw packet, and the layers around them -> a TCP segment.

Input: a `RawPacket` (link type + captured bytes + length on the wire).
Output: `parse_layers` returns a `Segment` for TCP over IPv4 or IPv6, a `Fragment` for a
fragment of an IP datagram that may carry TCP (`fragments` reassembles them, then
`parse_datagram` continues with the whole datagram), `None` for anything else (ARP, UDP,
ICMP, non-IP link payloads), or a `NetIssue` for a fault (`.anomaly()`: its row).
`parse_packet` is the same for one packet on its own: a TCP fragment is a `net.ip_fragment`
issue, any other fragment `None`.
Rules (pure: no I/O):
- The link layer is read by `link` (its types, and `net.unsupported_linktype` for others).
- Encapsulations (header layouts in `decap`), at any depth up to MAX_LAYERS (deeper:
  `net.encapsulation_too_deep`): VXLAN and Geneve (UDP), GRE with ERSPAN types I/II/III,
  IP in IP (4, 41), MPLS label stacks (0x8847/0x8848, with Ethernet pseudowires behind a
  control word), PPPoE sessions (0x8864); inner Ethernet frames with their VLAN tags. Plain
  Ethernet/IPv4/TCP is tested first and costs nothing of this.
- IPv4 options are skipped by IHL; IPv6 extension headers (hop-by-hop, routing, fragment,
  destination options, AH) are walked to reach TCP. TCP options are skipped by data offset.
- The IP length fields bound the payload: Ethernet padding is trimmed, and payload bytes on
  the wire but beyond the captured bytes (snap length) are counted in `Segment.missing`,
  never zero-filled. A zero IP length (TSO/GSO, IPv6 jumbogram) means "up to the wire length".
- Fragments of TCP, UDP, GRE and IP in IP datagrams are `Fragment`s; an IPv6 atomic fragment
  (offset 0, no more fragments) is a whole packet. Other fragments are ignored (`None`).
- Captured bytes too short for a header: `net.truncated_header`; a header that contradicts
  itself (IP version, IHL < 5, data offset < 5, lengths): `net.bad_header`.
"""

from __future__ import annotations

import struct
from socket import AF_INET, AF_INET6, inet_ntop

from dissector.anomalies import AnomalyCode
from dissector.events import NetIssue, RawPacket, Segment
from dissector.net import decap
from dissector.net.decap import (
    ETH_BRIDGED,
    ETH_IPV4,
    ETH_IPV6,
    ETH_MPLS,
    ETH_MPLS_MULTICAST,
    ETH_PPPOE_SESSION,
    HeaderFault,
)
from dissector.net.decap import short as _short
from dissector.net.fragments import (
    CARRIED,
    PROTO_GRE,
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_TCP,
    PROTO_UDP,
    Datagram,
    Fragment,
)
from dissector.net.link import LINK_PARSERS, VLAN_TYPES, vlan_walk

#: Encapsulation layers (tunnel headers, label stacks, inner Ethernet frames, reassembled
#: datagrams) decoded around one TCP segment; a packet with more is hostile or broken.
MAX_LAYERS = 8
#: IPv6 extension headers walked to find the upper-layer protocol.
IPV6_HOP, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_AH, IPV6_DSTOPTS = 0, 43, 44, 51, 60
_IPV6_EXT = frozenset({IPV6_HOP, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_AH, IPV6_DSTOPTS})

#: Distinct addresses whose text form is cached; the cache is emptied when full, which bounds
#: its memory on captures of scans or of very many peers.
ADDRESS_CACHE_SIZE = 65536

_U16 = struct.Struct("!H")
_IPV4 = struct.Struct("!BxHxxHxB2x4s4s")  # ver/ihl, total length, flags/frag, proto, src, dst
_IPV6 = struct.Struct("!BxxxHBx16s16s")  # version byte, payload length, next header, src, dst
_IPV6_FRAG = struct.Struct("!BxHI")  # next header, offset/flags, identification
_TCP = struct.Struct("!HHIIBBH")  # ports, seq, ack, data offset, flags, window
#: `tuple.__new__(Segment, fields)` builds a Segment 4x faster than its keyword-aware __new__.
_new_tuple = tuple.__new__


Parsed = Segment | NetIssue | Fragment | None


# --- addresses ---

_ADDRESSES: dict[bytes, str] = {}


def _text(raw: bytes) -> str:
    """Text form of a 4- or 16-byte address, cached."""
    text = _ADDRESSES.get(raw)
    if text is None:
        if len(_ADDRESSES) >= ADDRESS_CACHE_SIZE:
            _ADDRESSES.clear()
        text = inet_ntop(AF_INET if len(raw) == 4 else AF_INET6, raw)
        _ADDRESSES[raw] = text
    return text


# --- IP and TCP ---


def _ipv4(pkt: RawPacket, data: bytes, off: int, depth: int) -> Parsed:
    if len(data) < off + 20:
        raise _short("IPv4 header", off + 20, len(data))
    vihl, total, frag, proto, src, dst = _IPV4.unpack_from(data, off)
    if vihl >> 4 != 4:
        raise HeaderFault(AnomalyCode.NET_BAD_HEADER, f"IP version {vihl >> 4} in an IPv4 packet")
    ihl = (vihl & 0x0F) * 4
    if ihl < 20:
        raise HeaderFault(AnomalyCode.NET_BAD_HEADER, f"IPv4 header length {ihl} < 20")
    if proto != PROTO_TCP:
        if proto in CARRIED:
            return _ipv4_carrier(pkt, data, off, ihl, total, frag, proto, src, dst, depth)
        return None
    if frag & 0x3FFF:
        return _ipv4_fragment(pkt, data, off, ihl, total, frag, proto, src, dst, depth)
    src_ip = _ADDRESSES.get(src) or _text(src)
    dst_ip = _ADDRESSES.get(dst) or _text(dst)
    if len(data) < off + ihl:
        return _issue(pkt, _short("IPv4 options", off + ihl, len(data)), src_ip, dst_ip)
    if total == 0:  # TCP segmentation offload: the header was never filled in
        total = pkt.orig_len - off
    elif total < ihl:
        detail = f"IPv4 total length {total} < header length {ihl}"
        return NetIssue(AnomalyCode.NET_BAD_HEADER, detail, pkt.number, pkt.ts, src_ip, dst_ip)
    return _tcp(pkt, data, off + ihl, off + total, src_ip, dst_ip)


def _ipv4_end(pkt: RawPacket, data: bytes, off: int, ihl: int, total: int) -> int:
    """Where an IPv4 packet (not the common TCP one) ends, its options present."""
    if len(data) < off + ihl:
        raise _short("IPv4 options", off + ihl, len(data))
    if total == 0:
        return pkt.orig_len
    if total < ihl:
        raise HeaderFault(
            AnomalyCode.NET_BAD_HEADER, f"IPv4 total length {total} < header length {ihl}"
        )
    return off + total


def _ipv4_carrier(
    pkt: RawPacket,
    data: bytes,
    off: int,
    ihl: int,
    total: int,
    frag: int,
    proto: int,
    src: bytes,
    dst: bytes,
    depth: int,
) -> Parsed:
    """IPv4 carrying a protocol that may carry TCP (UDP, GRE, IP in IP)."""
    if frag & 0x3FFF:
        return _ipv4_fragment(pkt, data, off, ihl, total, frag, proto, src, dst, depth)
    return _carried(pkt, data, off + ihl, _ipv4_end(pkt, data, off, ihl, total), proto, depth)


def _ipv4_fragment(
    pkt: RawPacket,
    data: bytes,
    off: int,
    ihl: int,
    total: int,
    frag: int,
    proto: int,
    src: bytes,
    dst: bytes,
    depth: int,
) -> Fragment:
    end = _ipv4_end(pkt, data, off, ihl, total)
    ident = _U16.unpack_from(data, off + 4)[0]
    more = bool(frag & 0x2000)
    return _fragment(
        pkt, data, off + ihl, end, src, dst, ident, proto, (frag & 0x1FFF) * 8, more, depth
    )


def _fragment(
    pkt: RawPacket,
    data: bytes,
    at: int,
    end: int,
    src: bytes,
    dst: bytes,
    ident: int,
    proto: int,
    offset: int,
    more: bool,
    depth: int,
) -> Fragment:
    """The fragment whose payload spans [at, end) on the wire."""
    captured = len(data)
    if at > end:
        raise HeaderFault(
            AnomalyCode.NET_BAD_HEADER, f"IP fragment payload starts at {at}, ends at {end}"
        )
    if captured >= end:
        chunk, lost = data[at:end], 0
    else:
        chunk, lost = data[at:], max(0, min(end, pkt.orig_len) - max(at, captured))
    number, ts = pkt.number, pkt.ts
    return Fragment(number, ts, src, dst, ident, proto, offset, more, chunk, lost, depth)


def _ipv6(pkt: RawPacket, data: bytes, off: int, depth: int) -> Parsed:
    if len(data) < off + 40:
        raise _short("IPv6 header", off + 40, len(data))
    vbyte, plen, nxt, src, dst = _IPV6.unpack_from(data, off)
    if vbyte >> 4 != 6:
        raise HeaderFault(AnomalyCode.NET_BAD_HEADER, f"IP version {vbyte >> 4} in an IPv6 packet")
    end = off + 40 + plen if plen else pkt.orig_len  # 0: jumbogram or segmentation offload
    return _ipv6_upper(pkt, data, off + 40, end, nxt, src, dst, depth)


def _ipv6_upper(
    pkt: RawPacket, data: bytes, at: int, end: int, nxt: int, src: bytes, dst: bytes, depth: int
) -> Parsed:
    """Walk IPv6 extension headers from `at` (header `nxt`) to the upper layer."""
    while nxt in _IPV6_EXT:
        if len(data) < at + 8:
            fault = _short(f"IPv6 extension header {nxt}", at + 8, len(data))
            return _issue(pkt, fault, _text(src), _text(dst))
        if nxt == IPV6_FRAGMENT:
            after, offset_flags, ident = _IPV6_FRAG.unpack_from(data, at)
            if offset_flags & 0xFFF9:  # not an atomic fragment
                if after in CARRIED or after in _IPV6_EXT:
                    more = bool(offset_flags & 1)
                    offset = offset_flags & 0xFFF8
                    return _fragment(
                        pkt, data, at + 8, end, src, dst, ident, after, offset, more, depth
                    )
                return None
            length = 8
        elif nxt == IPV6_AH:
            after, units = data[at], data[at + 1]
            length = (units + 2) * 4
        else:
            after, units = data[at], data[at + 1]
            length = (units + 1) * 8
        nxt, at = after, at + length
    if nxt != PROTO_TCP and nxt not in CARRIED:
        return None
    if at > end:
        detail = f"IPv6 extension headers end at {at}, the packet at {end}"
        return NetIssue(
            AnomalyCode.NET_BAD_HEADER, detail, pkt.number, pkt.ts, _text(src), _text(dst)
        )
    if nxt == PROTO_TCP:
        return _tcp(pkt, data, at, end, _text(src), _text(dst))
    return _carried(pkt, data, at, end, nxt, depth)


def _carried(pkt: RawPacket, data: bytes, at: int, end: int, proto: int, depth: int) -> Parsed:
    """What a UDP, GRE or IP-in-IP payload at [at, end) carries."""
    depth += 1
    if depth > MAX_LAYERS:
        raise _too_deep()
    if len(data) > end:
        data = data[:end]  # what follows the IP packet is not the tunnel's
    if proto == PROTO_UDP:
        etype, inner = decap.udp(data, at, end)
    elif proto == PROTO_GRE:
        etype, inner = decap.gre(data, at)
    elif proto == PROTO_IPIP:
        etype, inner = ETH_IPV4, at
    elif proto == PROTO_IPV6:
        etype, inner = ETH_IPV6, at
    else:
        return None
    return _inner(pkt, data, etype, inner, depth)


def _inner(pkt: RawPacket, data: bytes, etype: int, off: int, depth: int) -> Parsed:
    """The payload of ethertype `etype` at `off`: IP, or more layers around it."""
    while True:
        if etype == ETH_IPV4:
            return _ipv4(pkt, data, off, depth)
        if etype == ETH_IPV6:
            return _ipv6(pkt, data, off, depth)
        depth += 1
        if depth > MAX_LAYERS:
            raise _too_deep()
        if etype == ETH_BRIDGED:
            if len(data) < off + 14:
                raise _short("inner Ethernet header", off + 14, len(data))
            etype, off = vlan_walk(data, _U16.unpack_from(data, off + 12)[0], off + 14)
        elif etype in (ETH_MPLS, ETH_MPLS_MULTICAST):
            etype, off = decap.mpls(data, off)
        elif etype == ETH_PPPOE_SESSION:
            etype, off = decap.pppoe(data, off)
        elif etype in VLAN_TYPES:  # a tag right after a tunnel header
            etype, off = vlan_walk(data, etype, off)
        else:
            return None


def _too_deep() -> HeaderFault:
    return HeaderFault(
        AnomalyCode.NET_ENCAPSULATION_TOO_DEEP, f"more than {MAX_LAYERS} encapsulation layers"
    )


def _tcp(
    pkt: RawPacket, data: bytes, off: int, ip_end: int, src_ip: str, dst_ip: str
) -> Segment | NetIssue:
    """The TCP header at `off`; the IP packet ends at `ip_end` on the wire."""
    captured = len(data)
    if captured < off + 20:
        return _issue(pkt, _short("TCP header", off + 20, captured), src_ip, dst_ip)
    sport, dport, seq, ack, doff, flags, window = _TCP.unpack_from(data, off)
    start = off + (doff >> 4) * 4
    if start < off + 20 or start > ip_end:
        detail = f"TCP data offset {(doff >> 4) * 4} outside 20..{ip_end - off}"
        return NetIssue(
            AnomalyCode.NET_BAD_HEADER, detail, pkt.number, pkt.ts, src_ip, dst_ip, sport, dport
        )
    if captured < start:
        fault = _short("TCP options", start, captured)
        return NetIssue(fault.code, fault.detail, pkt.number, pkt.ts, src_ip, dst_ip, sport, dport)
    if captured >= ip_end:
        payload, missing = data[start:ip_end], 0
    else:
        payload, missing = data[start:], max(0, min(ip_end, pkt.orig_len) - captured)
    fields = (pkt.number, pkt.ts, src_ip, dst_ip, sport, dport, seq, ack, flags, window,
              payload, missing)  # fmt: skip
    return _new_tuple(Segment, fields)


def _issue(pkt: RawPacket, fault: HeaderFault, src_ip: str | None, dst_ip: str | None) -> NetIssue:
    return NetIssue(fault.code, fault.detail, pkt.number, pkt.ts, src_ip, dst_ip)


_ETHER_IPV4 = ETH_IPV4.to_bytes(2, "big")


def parse_layers(pkt: RawPacket) -> Parsed:
    """Take one captured packet to a TCP segment, an IP fragment, `None` (not TCP) or a
    `NetIssue`."""
    data = pkt.data
    try:
        if pkt.linktype == 1 and data[12:14] == _ETHER_IPV4:  # the common case, without calls
            return _ipv4(pkt, data, 14, 0)
        link = LINK_PARSERS.get(pkt.linktype)
        if link is None:
            detail = f"link type {pkt.linktype} is not supported"
            return NetIssue(AnomalyCode.NET_UNSUPPORTED_LINKTYPE, detail, pkt.number, pkt.ts)
        etype, off = link(data)
        return _inner(pkt, data, etype, off, 0)
    except HeaderFault as fault:
        return _issue(pkt, fault, None, None)


def parse_datagram(dgram: Datagram) -> Parsed:
    """Continue with a datagram `fragments` reassembled: its TCP segment, another
    fragment (of a packet it tunnels), `None` or a `NetIssue`."""
    data, end = dgram.data, dgram.length
    pkt = RawPacket(dgram.number, dgram.ts, 0, data, end)
    try:
        if dgram.depth > MAX_LAYERS:
            raise _too_deep()
        if len(dgram.src) == 16:
            return _ipv6_upper(pkt, data, 0, end, dgram.proto, dgram.src, dgram.dst, dgram.depth)
        if dgram.proto == PROTO_TCP:
            return _tcp(pkt, data, 0, end, _text(dgram.src), _text(dgram.dst))
        return _carried(pkt, data, 0, end, dgram.proto, dgram.depth)
    except HeaderFault as fault:
        return _issue(pkt, fault, _text(dgram.src), _text(dgram.dst))


def parse_packet(pkt: RawPacket) -> Segment | NetIssue | None:
    """One packet on its own: a TCP fragment is reported (`net.ip_fragment`), any other
    fragment is `None` (the pipeline reassembles them instead)."""
    parsed = parse_layers(pkt)
    if isinstance(parsed, Fragment):
        proto = parsed.proto
        if proto == PROTO_TCP or (len(parsed.src) == 16 and proto in _IPV6_EXT):
            return parsed.issue()
        return None
    return parsed
