"""Tunnel and shim headers between a link layer and IP: where the packet inside starts.

Input: a packet's captured bytes and the offset of one encapsulation header (the caller knows
which from an ethertype, an IP protocol number or a UDP port).
Output: (ethertype of what the header carries, offset where that starts). Ethertype 0 means
nothing this dissector decodes (another payload, an unknown version); ETH_BRIDGED (0x6558,
"transparent Ethernet bridging") means an Ethernet frame follows.
Rules (layouts from the RFCs and the ERSPAN draft, checked against Wireshark's dissectors):
- VXLAN (RFC 7348): UDP destination port 4789 (IANA), also 8472 (the Linux default, used by
  flannel and Cilium); an 8-byte header, then Ethernet. Flags are not checked (as Wireshark).
- Geneve (RFC 8926): UDP destination port 6081; 8 bytes plus options (their length in 4-byte
  words), then what the protocol type (an ethertype) names.
- GRE (RFC 2784, 2890; routing of RFC 1701): version 0 only (1 is PPTP's); the checksum and
  offset (C or R bit), key (K), sequence number (S) and routing entries (R) are skipped; the
  protocol type is an ethertype. ERSPAN (draft-foschiano-erspan): type 0x88BE without the S
  bit is type I (no ERSPAN header, Ethernet follows); otherwise, and for 0x22EB, the header's
  version nibble tells type II (8 bytes) from type III (12 bytes, plus an 8-byte platform
  sub-header when its O bit is set). A type III frame type of 2 is an IP packet, any other
  an Ethernet frame.
- MPLS (RFC 3032): label stack entries up to the bottom of stack (at most MAX_LABELS), then
  the first nibble of the payload: 4 IPv4, 6 IPv6, 0 a pseudowire control word (RFC 4385)
  before an Ethernet frame (RFC 4448); any other: nothing.
- PPPoE session stage (RFC 2516): version and type 1, code 0, then the PPP protocol (0x0021
  IPv4, 0x0057 IPv6; also compressed to one byte, RFC 1661 PFC).
- Bytes missing for a header once it is known to be a tunnel raise
  `HeaderFault(AnomalyCode.NET_TRUNCATED_HEADER)`; a UDP datagram too short for a tunnel header (or
  its ports not captured) is not a tunnel.
"""

from __future__ import annotations

import struct

from dissector.anomalies import AnomalyCode

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
ETH_BRIDGED = 0x6558
ETH_MPLS, ETH_MPLS_MULTICAST = 0x8847, 0x8848
ETH_PPPOE_SESSION = 0x8864
GRE_ERSPAN_II, GRE_ERSPAN_III = 0x88BE, 0x22EB

VXLAN_PORTS = frozenset({4789, 8472})
GENEVE_PORT = 6081
#: MPLS label stack entries walked before giving up on a packet.
MAX_LABELS = 16

_U16 = struct.Struct("!H")
_GRE = struct.Struct("!HH")  # flags and version, protocol type
_GRE_C, _GRE_R, _GRE_K, _GRE_S, _GRE_VERSION = 0x8000, 0x4000, 0x2000, 0x1000, 0x0007
_PPP_IPV4, _PPP_IPV6 = 0x0021, 0x0057


class HeaderFault(Exception):
    """A header cut short or contradicting itself, found before any address is known."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def short(what: str, need: int, have: int) -> HeaderFault:
    return HeaderFault(
        AnomalyCode.NET_TRUNCATED_HEADER, f"{what} needs {need} bytes, {have} captured"
    )


def _need(data: bytes, end: int, what: str) -> None:
    if len(data) < end:
        raise short(what, end, len(data))


def ip_by_version(data: bytes, off: int, what: str) -> tuple[int, int]:
    """An IP packet at `off` whose family only its version nibble tells."""
    _need(data, off + 1, what)
    version = data[off] >> 4
    if version == 4:
        return ETH_IPV4, off
    if version == 6:
        return ETH_IPV6, off
    return 0, off


def udp(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The UDP header at `at` of a datagram ending at `end`: VXLAN or Geneve by destination
    port, else nothing (also when the datagram is too short for their header)."""
    if len(data) < at + 8 or end < at + 16:
        return 0, 0
    port = data[at + 2] << 8 | data[at + 3]
    if port in VXLAN_PORTS:
        _need(data, at + 16, "VXLAN header")
        return ETH_BRIDGED, at + 16
    if port == GENEVE_PORT:
        _need(data, at + 16, "Geneve header")
        first = data[at + 8]
        if first >> 6:  # version 0 only
            return 0, 0
        start = at + 16 + (first & 0x3F) * 4
        _need(data, start, "Geneve options")
        return _U16.unpack_from(data, at + 10)[0], start
    return 0, 0


def gre(data: bytes, at: int) -> tuple[int, int]:
    """The GRE header at `at` (and the ERSPAN header after it, if any)."""
    _need(data, at + 4, "GRE header")
    flags, ptype = _GRE.unpack_from(data, at)
    if flags & _GRE_VERSION:
        return 0, 0
    off = at + 4
    if flags & (_GRE_C | _GRE_R):
        off += 4
    if flags & _GRE_K:
        off += 4
    if flags & _GRE_S:
        off += 4
    _need(data, off, "GRE optional fields")
    if flags & _GRE_R:
        off = _gre_routing(data, off)
    if ptype == GRE_ERSPAN_II and not flags & _GRE_S:
        return ETH_BRIDGED, off  # ERSPAN type I: the mirrored frame right after GRE
    if ptype in (GRE_ERSPAN_II, GRE_ERSPAN_III):
        return _erspan(data, off)
    return ptype, off


def _gre_routing(data: bytes, off: int) -> int:
    """Skip RFC 1701 source route entries, up to the empty one that ends them."""
    while True:
        _need(data, off + 4, "GRE source route entry")
        family = _U16.unpack_from(data, off)[0]
        length = data[off + 3]
        off += 4 + length
        if family == 0 and length == 0:
            return off


def _erspan(data: bytes, off: int) -> tuple[int, int]:
    _need(data, off + 2, "ERSPAN header")
    version = data[off] >> 4
    if version == 1:  # type II
        _need(data, off + 8, "ERSPAN type II header")
        return ETH_BRIDGED, off + 8
    if version == 2:  # type III
        _need(data, off + 12, "ERSPAN type III header")
        last = _U16.unpack_from(data, off + 10)[0]
        start = off + 12 + (8 if last & 0x0001 else 0)  # O: platform-specific sub-header
        _need(data, start, "ERSPAN platform sub-header")
        if (last >> 10) & 0x1F == 2:  # frame type: IP packet
            return ip_by_version(data, start, "ERSPAN IP frame")
        return ETH_BRIDGED, start
    return 0, 0


def mpls(data: bytes, off: int) -> tuple[int, int]:
    """The MPLS label stack at `off`, then what the bottom label carries."""
    for _ in range(MAX_LABELS):
        _need(data, off + 4, "MPLS label stack entry")
        bottom = data[off + 2] & 0x01
        off += 4
        if bottom:
            _need(data, off + 1, "MPLS payload")
            if data[off] >> 4 == 0:  # pseudowire control word, then Ethernet
                _need(data, off + 4, "MPLS pseudowire control word")
                return ETH_BRIDGED, off + 4
            return ip_by_version(data, off, "MPLS payload")
    return 0, 0


def pppoe(data: bytes, off: int) -> tuple[int, int]:
    """The PPPoE session header at `off` and the PPP protocol field after it."""
    _need(data, off + 8, "PPPoE session header")
    if data[off] != 0x11 or data[off + 1] != 0:
        return 0, 0
    if data[off + 6] & 0x01:  # protocol field compressed to one byte
        protocol, start = data[off + 6], off + 7
    else:
        protocol, start = _U16.unpack_from(data, off + 6)[0], off + 8
    if protocol == _PPP_IPV4:
        return ETH_IPV4, start
    if protocol == _PPP_IPV6:
        return ETH_IPV6, start
    return 0, 0
