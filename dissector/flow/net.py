"""Link, IP and TCP headers of one raw packet -> a TCP segment (pure: no I/O).

Input: a `RawPacket` (link type + captured bytes + length on the wire).
Output: `parse_packet` returns a `Segment` for TCP over IPv4 or IPv6, `None` for anything
else (ARP, UDP, ICMP, non-IP link payloads), or a `NetIssue` for a fault (`.anomaly()`: its row).
Rules:
- Link types: Ethernet (1) with any stack of 802.1Q/802.1ad/QinQ tags; Linux cooked SLL (113)
  and SLL2 (276); BSD NULL (0, family in the capturing host's byte order) and LOOP (108);
  raw IP (101, 12, 14; 228 = IPv4 only, 229 = IPv6 only). Others: `net.unsupported_linktype`.
- IPv4 options are skipped by IHL; IPv6 extension headers (hop-by-hop, routing, fragment,
  destination options, AH) are walked to reach TCP. TCP options are skipped by data offset.
- The IP length fields bound the payload: Ethernet padding is trimmed, and payload bytes on
  the wire but beyond the captured bytes (snap length) are counted in `Segment.missing`,
  never zero-filled. A zero IP length (TSO/GSO, IPv6 jumbogram) means "up to the wire length".
- Fragments are reported (`net.ip_fragment`), not reassembled; an IPv6 atomic fragment
  (offset 0, no more fragments) is a whole packet. Non-TCP fragments are ignored (`None`).
- Captured bytes too short for a header: `net.truncated_header`; a header that contradicts
  itself (IP version, IHL < 5, data offset < 5, lengths): `net.bad_header`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from socket import AF_INET, AF_INET6, inet_ntop

from dissector.events import NetIssue, RawPacket, Segment

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
VLAN_TYPES = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
PROTO_TCP = 6
#: IPv6 extension headers walked to find the upper-layer protocol.
IPV6_HOP, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_AH, IPV6_DSTOPTS = 0, 43, 44, 51, 60
_IPV6_EXT = frozenset({IPV6_HOP, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_AH, IPV6_DSTOPTS})
#: BSD NULL/LOOP address families that carry IPv6 (OpenBSD/NetBSD, FreeBSD, macOS).
_BSD_IPV6 = frozenset({24, 28, 30})

#: Distinct addresses whose text form is cached; the cache is emptied when full, which bounds
#: its memory on captures of scans or of very many peers.
ADDRESS_CACHE_SIZE = 65536

_U16 = struct.Struct("!H")
_U32_LE = struct.Struct("<I")
_U32_BE = struct.Struct("!I")
_IPV4 = struct.Struct("!BxHxxHxB2x4s4s")  # ver/ihl, total length, flags/frag, proto, src, dst
_IPV6 = struct.Struct("!BxxxHBx16s16s")  # version byte, payload length, next header, src, dst
_IPV6_FRAG = struct.Struct("!BxH")  # next header, offset/flags
_TCP = struct.Struct("!HHIIBBH")  # ports, seq, ack, data offset, flags, window
#: `tuple.__new__(Segment, fields)` builds a Segment 4x faster than its keyword-aware __new__.
_new_tuple = tuple.__new__


class _Fault(Exception):
    """A fault found below IP, before any address is known (internal)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _short(what: str, need: int, have: int) -> _Fault:
    return _Fault("net.truncated_header", f"{what} needs {need} bytes, {have} captured")


# --- link layers: captured bytes -> (ethertype of the payload, offset of the payload) ---


def _vlan_walk(data: bytes, etype: int, off: int) -> tuple[int, int]:
    """Skip 802.1Q/802.1ad tags; `off` points just after the ethertype `etype`."""
    while etype in VLAN_TYPES:
        if len(data) < off + 4:
            raise _short("VLAN tag", off + 4, len(data))
        etype = _U16.unpack_from(data, off + 2)[0]
        off += 4
    return etype, off


def _ethernet(data: bytes) -> tuple[int, int]:
    if len(data) < 14:
        raise _short("Ethernet header", 14, len(data))
    etype = _U16.unpack_from(data, 12)[0]
    if etype in VLAN_TYPES:
        return _vlan_walk(data, etype, 14)
    return etype, 14


def _sll(data: bytes) -> tuple[int, int]:
    if len(data) < 16:
        raise _short("Linux cooked (SLL) header", 16, len(data))
    return _vlan_walk(data, _U16.unpack_from(data, 14)[0], 16)


def _sll2(data: bytes) -> tuple[int, int]:
    if len(data) < 20:
        raise _short("Linux cooked v2 (SLL2) header", 20, len(data))
    return _vlan_walk(data, _U16.unpack_from(data, 0)[0], 20)


def _bsd_family(family: int) -> tuple[int, int]:
    if family == 2:
        return ETH_IPV4, 4
    if family in _BSD_IPV6:
        return ETH_IPV6, 4
    return 0, 4


def _null(data: bytes) -> tuple[int, int]:
    if len(data) < 4:
        raise _short("loopback (NULL) header", 4, len(data))
    family = _U32_LE.unpack_from(data)[0]
    if family > 0xFFFF:  # written by a big-endian host
        family = _U32_BE.unpack_from(data)[0]
    return _bsd_family(family)


def _loop(data: bytes) -> tuple[int, int]:
    if len(data) < 4:
        raise _short("loopback (LOOP) header", 4, len(data))
    return _bsd_family(_U32_BE.unpack_from(data)[0])


def _raw(data: bytes) -> tuple[int, int]:
    if not data:
        raise _short("IP header", 1, 0)
    version = data[0] >> 4
    if version == 4:
        return ETH_IPV4, 0
    if version == 6:
        return ETH_IPV6, 0
    raise _Fault("net.bad_header", f"raw IP packet with IP version {version}")


def _raw4(data: bytes) -> tuple[int, int]:
    return ETH_IPV4, 0


def _raw6(data: bytes) -> tuple[int, int]:
    return ETH_IPV6, 0


LINK_PARSERS: dict[int, Callable[[bytes], tuple[int, int]]] = {
    0: _null,
    1: _ethernet,
    12: _raw,
    14: _raw,
    101: _raw,
    108: _loop,
    113: _sll,
    228: _raw4,
    229: _raw6,
    276: _sll2,
}

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


def _ipv4(pkt: RawPacket, data: bytes, off: int) -> Segment | NetIssue | None:
    if len(data) < off + 20:
        raise _short("IPv4 header", off + 20, len(data))
    vihl, total, frag, proto, src, dst = _IPV4.unpack_from(data, off)
    if vihl >> 4 != 4:
        raise _Fault("net.bad_header", f"IP version {vihl >> 4} in an IPv4 packet")
    ihl = (vihl & 0x0F) * 4
    if ihl < 20:
        raise _Fault("net.bad_header", f"IPv4 header length {ihl} < 20")
    if proto != PROTO_TCP:
        return None
    src_ip = _ADDRESSES.get(src) or _text(src)
    dst_ip = _ADDRESSES.get(dst) or _text(dst)
    if frag & 0x3FFF:
        detail = f"IPv4 fragment (offset {(frag & 0x1FFF) * 8}, more={frag >> 13 & 1})"
        return NetIssue("net.ip_fragment", detail, pkt.number, pkt.ts, src_ip, dst_ip)
    if len(data) < off + ihl:
        return _issue(pkt, _short("IPv4 options", off + ihl, len(data)), src_ip, dst_ip)
    if total == 0:  # TCP segmentation offload: the header was never filled in
        total = pkt.orig_len - off
    elif total < ihl:
        detail = f"IPv4 total length {total} < header length {ihl}"
        return NetIssue("net.bad_header", detail, pkt.number, pkt.ts, src_ip, dst_ip)
    return _tcp(pkt, data, off + ihl, off + total, src_ip, dst_ip)


def _ipv6(pkt: RawPacket, data: bytes, off: int) -> Segment | NetIssue | None:
    if len(data) < off + 40:
        raise _short("IPv6 header", off + 40, len(data))
    vbyte, plen, nxt, src, dst = _IPV6.unpack_from(data, off)
    if vbyte >> 4 != 6:
        raise _Fault("net.bad_header", f"IP version {vbyte >> 4} in an IPv6 packet")
    at = off + 40
    while nxt in _IPV6_EXT:
        if len(data) < at + 8:
            src_ip, dst_ip = _text(src), _text(dst)
            fault = _short(f"IPv6 extension header {nxt}", at + 8, len(data))
            return _issue(pkt, fault, src_ip, dst_ip)
        if nxt == IPV6_FRAGMENT:
            after, offset_flags = _IPV6_FRAG.unpack_from(data, at)
            if offset_flags & 0xFFF9 and (after == PROTO_TCP or after in _IPV6_EXT):
                detail = f"IPv6 fragment (offset {offset_flags & 0xFFF8}, more={offset_flags & 1})"
                return NetIssue(
                    "net.ip_fragment", detail, pkt.number, pkt.ts, _text(src), _text(dst)
                )
            length = 8
        elif nxt == IPV6_AH:
            after, units = data[at], data[at + 1]
            length = (units + 2) * 4
        else:
            after, units = data[at], data[at + 1]
            length = (units + 1) * 8
        nxt, at = after, at + length
    if nxt != PROTO_TCP:
        return None
    src_ip, dst_ip = _text(src), _text(dst)
    end = off + 40 + plen if plen else pkt.orig_len  # 0: jumbogram or segmentation offload
    if at > end:
        detail = f"IPv6 extension headers end at {at - off}, payload length is {plen}"
        return NetIssue("net.bad_header", detail, pkt.number, pkt.ts, src_ip, dst_ip)
    return _tcp(pkt, data, at, end, src_ip, dst_ip)


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
        return NetIssue("net.bad_header", detail, pkt.number, pkt.ts, src_ip, dst_ip, sport, dport)
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


def _issue(pkt: RawPacket, fault: _Fault, src_ip: str | None, dst_ip: str | None) -> NetIssue:
    return NetIssue(fault.code, fault.detail, pkt.number, pkt.ts, src_ip, dst_ip)


_IP_PARSERS = {ETH_IPV4: _ipv4, ETH_IPV6: _ipv6}
_ETHER_IPV4 = ETH_IPV4.to_bytes(2, "big")


def parse_packet(pkt: RawPacket) -> Segment | NetIssue | None:
    """Take one captured packet to a TCP segment, `None` (not TCP) or a `NetIssue`."""
    data = pkt.data
    try:
        if pkt.linktype == 1 and data[12:14] == _ETHER_IPV4:  # the common case, without calls
            return _ipv4(pkt, data, 14)
        link = LINK_PARSERS.get(pkt.linktype)
        if link is None:
            detail = f"link type {pkt.linktype} is not supported"
            return NetIssue("net.unsupported_linktype", detail, pkt.number, pkt.ts)
        etype, off = link(data)
        ip = _IP_PARSERS.get(etype)
        return None if ip is None else ip(pkt, data, off)
    except _Fault as fault:
        return _issue(pkt, fault, None, None)
