"""Link layers: one captured packet's first header -> the ethertype after it, and where.

Input: the captured bytes of a packet of one link type (`LINK_PARSERS`: link type -> its
parser), or bytes at an ethertype that may be a VLAN tag (`vlan_walk`).
Output: (ethertype of the payload, offset of the payload); `HeaderFault` when the bytes are
too short for the header or contradict it.
Rules:
- Link types: Ethernet (1) with any stack of 802.1Q/802.1ad/QinQ tags; Linux cooked SLL (113)
  and SLL2 (276); BSD NULL (0, family in the capturing host's byte order) and LOOP (108);
  raw IP (101, 12, 14; 228 = IPv4 only, 229 = IPv6 only). Another link type has no parser
  here (`headers` reports it: `net.unsupported_linktype`).
- A BSD family that is neither IPv4 nor IPv6 gives ethertype 0 (not IP: nothing follows).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from dissector.anomalies import AnomalyCode
from dissector.net.decap import ETH_IPV4, ETH_IPV6, HeaderFault
from dissector.net.decap import short as _short

VLAN_TYPES = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
#: BSD NULL/LOOP address families that carry IPv6 (OpenBSD/NetBSD, FreeBSD, macOS).
_BSD_IPV6 = frozenset({24, 28, 30})

_U16 = struct.Struct("!H")
_U32_LE = struct.Struct("<I")
_U32_BE = struct.Struct("!I")


def vlan_walk(data: bytes, etype: int, off: int) -> tuple[int, int]:
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
        return vlan_walk(data, etype, 14)
    return etype, 14


def _sll(data: bytes) -> tuple[int, int]:
    if len(data) < 16:
        raise _short("Linux cooked (SLL) header", 16, len(data))
    return vlan_walk(data, _U16.unpack_from(data, 14)[0], 16)


def _sll2(data: bytes) -> tuple[int, int]:
    if len(data) < 20:
        raise _short("Linux cooked v2 (SLL2) header", 20, len(data))
    return vlan_walk(data, _U16.unpack_from(data, 0)[0], 20)


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
    raise HeaderFault(AnomalyCode.NET_BAD_HEADER, f"raw IP packet with IP version {version}")


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
