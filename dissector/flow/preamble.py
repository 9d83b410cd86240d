"""Classify the first bytes a client sends: Pulsar, TLS, or an HAProxy PROXY header first.

Input: the first bytes of a client->broker stream (as many as have arrived).
Output: None while more bytes are needed, else a `Preamble`: its kind, how many header bytes
precede the Pulsar frames, and for PROXY headers the original client and destination
(`anomaly()` gives the row of an invalid PROXY header).
Rule: pure and bounded: a PROXY v1 line is at most 107 bytes, a v2 header 16 bytes plus its
stated length; anything that is not TLS or PROXY is handed to the frame decoder untouched.
"""

from __future__ import annotations

import socket
import struct

from dissector.events import Preamble, PreambleKind

PROXY_V1 = b"PROXY "
PROXY_V2 = b"\r\n\r\n\x00\r\nQUIT\n"
_V1_MAX = 107  # the PROXY protocol's longest v1 line, CRLF included
_V2_HEADER = struct.Struct(">12sBBH")
_PORTS = struct.Struct(">HH")


PULSAR = Preamble(PreambleKind.PULSAR)


def sniff(head: bytes) -> Preamble | None:
    """Classify `head`, the first bytes of the client stream; None means "need more"."""
    if not head:
        return None
    if head[0] == 0x16:  # TLS handshake record: 16 03 0x
        if len(head) < 3:
            return None
        if head[1] == 0x03 and head[2] <= 0x04:
            return Preamble(PreambleKind.TLS)
        return PULSAR
    if head[0] == PROXY_V1[0] and PROXY_V1.startswith(head[:6]):
        return _proxy_v1(head) if len(head) >= 6 else None
    if head[0] == PROXY_V2[0] and PROXY_V2.startswith(head[:12]):
        return _proxy_v2(head) if len(head) >= 12 else None
    return PULSAR


def _proxy_v1(head: bytes) -> Preamble | None:
    end = head.find(b"\r\n", 0, _V1_MAX)
    if end < 0:
        if len(head) < _V1_MAX:
            return None
        return Preamble(
            PreambleKind.PROXY_INVALID, detail="PROXY v1 line without CRLF in 107 bytes"
        )
    words = head[:end].decode("ascii", "replace").split(" ")
    length = end + 2
    if words[1:2] == ["UNKNOWN"]:
        return Preamble(PreambleKind.PROXY, length)
    try:
        _, family, src, dst, sport, dport = words
        if family not in ("TCP4", "TCP6"):
            raise ValueError(family)
        socket.inet_pton(socket.AF_INET if family == "TCP4" else socket.AF_INET6, src)
        socket.inet_pton(socket.AF_INET if family == "TCP4" else socket.AF_INET6, dst)
        return Preamble(PreambleKind.PROXY, length, (src, int(sport)), (dst, int(dport)))
    except (ValueError, OSError):
        return Preamble(
            PreambleKind.PROXY_INVALID, length, detail=f"bad PROXY v1 line {head[:end]!r}"
        )


def _proxy_v2(head: bytes) -> Preamble | None:
    if len(head) < 16:
        return None
    _, ver_cmd, family, size = _V2_HEADER.unpack_from(head)
    length = 16 + size
    if ver_cmd >> 4 != 2:
        return Preamble(
            PreambleKind.PROXY_INVALID, 16, detail=f"PROXY v2 version byte 0x{ver_cmd:02x}"
        )
    if len(head) < length:
        return None
    if ver_cmd & 0x0F == 0:  # LOCAL: health check from the proxy itself, no address
        return Preamble(PreambleKind.PROXY, length)
    body = head[16:length]
    if family >> 4 == 1 and size >= 12:
        src, dst = (
            socket.inet_ntop(socket.AF_INET, body[:4]),
            socket.inet_ntop(socket.AF_INET, body[4:8]),
        )
        sport, dport = _PORTS.unpack_from(body, 8)
    elif family >> 4 == 2 and size >= 36:
        src = socket.inet_ntop(socket.AF_INET6, body[:16])
        dst = socket.inet_ntop(socket.AF_INET6, body[16:32])
        sport, dport = _PORTS.unpack_from(body, 32)
    else:
        return Preamble(PreambleKind.PROXY, length)  # UNSPEC or UNIX: no TCP address to record
    return Preamble(PreambleKind.PROXY, length, (src, sport), (dst, dport))
