"""Floods of overlapping TCP data: the shape of fuzzing finding F12, built fast with struct.

Input: a number of segments (or datagrams), a segment size and a seed.
Output: Ethernet frames (IPv4, TCP 10.1.0.1:1234 -> 10.1.0.2:6650, no handshake) as
`crafted.write_frames` writes them, or the TCP `Segment`s a parser would make of them.
Rule: segment k starts one byte after segment k-1 and carries `size` bytes (random, or all
equal with `same=True`, so that every overlap matches what was delivered): each one
overlaps the previous `size - 1` bytes and delivers a single new byte, which is what
made the retransmission window hold one entry per byte. `teardrop_frames` carries each
such segment in two IPv4 fragments that overlap by 8 bytes (the "teardrop" shape), so it
reaches TCP only after IP fragment reassembly.
"""

from __future__ import annotations

import random
import struct

from dissector.events import Segment

CLIENT, BROKER = ("10.1.0.1", 1234), ("10.1.0.2", 6650)
_MACS = bytes.fromhex("020000000001020000000002") + b"\x08\x00"
_SRC, _DST = bytes([10, 1, 0, 1]), bytes([10, 1, 0, 2])
FIRST_SEQ = 1000
PSH_ACK = 0x18


def payloads(n: int, size: int = 52, *, seed: int = 12, same: bool = False) -> list[bytes]:
    """The payload of each of `n` segments (`same`: the bytes a stream of one repeated
    pattern has at each offset, so that every overlapping copy matches)."""
    if same:
        pattern = bytes(range(251)) * (size // 251 + 2)
        return [pattern[k % 251 : k % 251 + size] for k in range(n)]
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


def segments(n: int, size: int = 52, *, seed: int = 12, same: bool = False) -> list[Segment]:
    """The flood as parsed segments (timestamps one µs apart)."""
    (src, sport), (dst, dport) = CLIENT, BROKER
    out = []
    for k, data in enumerate(payloads(n, size, seed=seed, same=same)):
        out.append(Segment(k + 1, k, src, dst, sport, dport, FIRST_SEQ + k, 0, PSH_ACK, 1000, data))
    return out


def _tcp(seq: int, data: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", CLIENT[1], BROKER[1], seq, 0, 5 << 4, PSH_ACK, 1000, 0, 0) + (
        data
    )


def _ipv4(ident: int, body: bytes, *, offset: int = 0, more: bool = False) -> bytes:
    flags = (offset // 8) | (0x2000 if more else 0)
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), ident, flags, 64, 6, 0, _SRC, _DST)
    return _MACS + head + body


def flood_frames(n: int, size: int = 52, *, seed: int = 12, same: bool = False) -> list[bytes]:
    """The flood as Ethernet frames, one segment each."""
    return [
        _ipv4(k & 0xFFFF, _tcp(FIRST_SEQ + k, data))
        for k, data in enumerate(payloads(n, size, seed=seed, same=same))
    ]


def teardrop_frames(n: int, size: int = 52, *, seed: int = 12, same: bool = False) -> list[bytes]:
    """The flood's `n` segments, each as two IPv4 fragments: bytes 0..24 of the TCP
    segment, then bytes 16.. (8 bytes again, the same ones: the datagram is whole)."""
    out = []
    for k, data in enumerate(payloads(n, size, seed=seed, same=same)):
        tcp = _tcp(FIRST_SEQ + k, data)
        ident = k & 0xFFFF
        out.append(_ipv4(ident, tcp[:24], more=True))
        out.append(_ipv4(ident, tcp[16:], offset=16))
    return out
