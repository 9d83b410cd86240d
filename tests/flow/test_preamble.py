"""PROXY protocol v1/v2 and TLS detection at the start of a client stream."""

from __future__ import annotations

import socket
import struct

from dissector.events import Preamble, PreambleKind
from dissector.flow.preamble import PROXY_V2, sniff

CONNECT_START = b"\x00\x00\x00\x2d\x00\x00\x00\x29\x08\x02"


def v2(family: int, addresses: bytes, command: int = 0x21) -> bytes:
    return PROXY_V2 + struct.pack(">BBH", command, family, len(addresses)) + addresses


def test_plain_pulsar() -> None:
    assert sniff(CONNECT_START) == Preamble(PreambleKind.PULSAR)


def test_tls_client_hello() -> None:
    assert sniff(b"\x16\x03\x01\x02\x00") == Preamble(PreambleKind.TLS)
    assert sniff(b"\x16") is None  # need more


def test_proxy_v1_tcp4_and_tcp6() -> None:
    line = b"PROXY TCP4 192.0.2.7 10.0.0.2 51234 6650\r\n"
    got = sniff(line + CONNECT_START)
    assert got == Preamble(PreambleKind.PROXY, len(line), ("192.0.2.7", 51234), ("10.0.0.2", 6650))
    line6 = b"PROXY TCP6 2001:db8::7 2001:db8::2 4000 6650\r\n"
    assert sniff(line6)[2] == ("2001:db8::7", 4000)  # type: ignore[index]
    assert sniff(b"PROXY UNKNOWN\r\n") == Preamble(PreambleKind.PROXY, 15)


def test_proxy_v1_incomplete_and_invalid() -> None:
    assert sniff(b"PROXY TCP4 192.0.2.7") is None
    assert sniff(b"PRO") is None
    bad = sniff(b"PROXY TCP4 nonsense here 1 2\r\n")
    assert bad is not None and bad.kind == "proxy_invalid"
    assert sniff(b"PROXY " + b"x" * 200).kind == "proxy_invalid"  # type: ignore[union-attr]


def test_proxy_v2_ipv4_ipv6_local() -> None:
    addr4 = (
        socket.inet_aton("198.51.100.9")
        + socket.inet_aton("10.0.0.2")
        + struct.pack(">HH", 5555, 6650)
    )
    header = v2(0x11, addr4)
    assert sniff(header + CONNECT_START) == Preamble(
        PreambleKind.PROXY, len(header), ("198.51.100.9", 5555), ("10.0.0.2", 6650)
    )
    assert sniff(header[:20]) is None
    addr6 = (
        socket.inet_pton(socket.AF_INET6, "2001:db8::9")
        + socket.inet_pton(socket.AF_INET6, "2001:db8::2")
        + struct.pack(">HH", 7, 6650)
    )
    assert sniff(v2(0x21, addr6))[2] == ("2001:db8::9", 7)  # type: ignore[index]
    local = v2(0x00, b"", command=0x20)
    assert sniff(local) == Preamble(PreambleKind.PROXY, 16)
    tlv = v2(0x11, addr4 + b"\x04\x00\x02ab")  # addresses followed by a TLV
    assert sniff(tlv).length == len(tlv)  # type: ignore[union-attr]
