"""parse_packet on packets built with scapy: expected values are what we put in them."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.ipsec import AH
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.packet import Packet, Padding, Raw

from dissector.events import NetIssue, RawPacket, Segment
from dissector.net.headers import parse_packet
from dissector.net.link import LINK_PARSERS

TS = 1_700_000_000_123_456
V4 = IP(src="192.0.2.10", dst="198.51.100.7")
V6 = IPv6(src="2001:db8::1", dst="2001:db8:0:0:1::20")
BODY = b"pulsar-frame-bytes"


def eth(**kw: Any) -> Packet:
    """Ethernet with explicit addresses (scapy would otherwise look up routes and ARP)."""
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", **kw)


def tcp(**kw: Any) -> Packet:
    fields: dict[str, Any] = {
        "sport": 41234,
        "dport": 6650,
        "seq": 0xFFFF_FFF0,
        "ack": 77,
        "flags": "PA",
    }
    fields.update(kw)
    return TCP(window=1234, **fields) / Raw(BODY)


def parse(data: bytes | Packet, linktype: int = 1, orig_len: int | None = None):
    raw = bytes(data)
    return parse_packet(RawPacket(9, TS, linktype, raw, len(raw) if orig_len is None else orig_len))


def assert_segment(result, src="192.0.2.10", dst="198.51.100.7", payload=BODY, missing=0):
    assert isinstance(result, Segment), result
    assert (result.number, result.ts) == (9, TS)
    assert (result.src_ip, result.dst_ip, result.src_port, result.dst_port) == (
        src, dst, 41234, 6650
    )  # fmt: skip
    assert (result.seq, result.ack, result.flags, result.window) == (0xFFFF_FFF0, 77, 0x18, 1234)
    assert (result.payload, result.missing) == (payload, missing)


def assert_issue(result, code, src=None, dst=None, ports=(None, None)):
    assert isinstance(result, NetIssue), result
    assert result.code == code
    assert (result.number, result.ts) == (9, TS)
    assert (result.src_ip, result.dst_ip) == (src, dst)
    assert (result.src_port, result.dst_port) == ports
    assert result.detail


# --- link layers ---


def test_ethernet_ipv4_tcp():
    assert_segment(parse(eth() / V4 / tcp()))


def test_ethernet_padding_is_trimmed():
    frame = eth() / V4 / TCP(sport=41234, dport=6650, seq=0xFFFF_FFF0, ack=77, flags="PA",
                               window=1234) / Raw(b"ab") / Padding(b"\0" * 4)  # fmt: skip
    assert len(bytes(frame)) == 60
    assert_segment(parse(frame), payload=b"ab")


def test_ethernet_fcs_after_ipv6_is_trimmed():
    assert_segment(parse(bytes(eth() / V6 / tcp()) + b"\xde\xad\xbe\xef"),
                   src="2001:db8::1", dst="2001:db8::1:0:0:20")  # fmt: skip


@pytest.mark.parametrize(
    "tags",
    [
        [Dot1Q(vlan=5)],
        [Dot1AD(vlan=3), Dot1Q(vlan=4)],
        [Dot1Q(vlan=3, type=0x8100), Dot1Q(vlan=4)],
        [Dot1Q(vlan=3, type=0x8100), Dot1Q(vlan=4, type=0x8100), Dot1Q(vlan=9)],
    ],
)
def test_vlan_stacks(tags):
    pkt = eth()
    for tag in tags:
        pkt = pkt / tag
    assert_segment(parse(pkt / V4 / tcp()))


def test_vlan_9100_outer_tag():
    inner = bytes(Dot1Q(vlan=4) / V4 / tcp())
    frame = b"\xff" * 12 + b"\x91\x00" + b"\x00\x03" + b"\x81\x00" + inner
    assert_segment(parse(frame))


def test_linux_cooked_v1_and_v2():
    assert_segment(parse(CookedLinux(proto=0x0800) / V4 / tcp(), linktype=113))
    assert_segment(parse(CookedLinuxV2(proto=0x86DD) / V6 / tcp(), linktype=276),
                   src="2001:db8::1", dst="2001:db8::1:0:0:20")  # fmt: skip


@pytest.mark.parametrize(
    ("header", "linktype", "ip"),
    [
        (struct.pack("<I", 2), 0, V4),  # NULL, written by a little-endian host
        (struct.pack(">I", 2), 0, V4),  # NULL, written by a big-endian host
        (struct.pack("<I", 24), 0, V6),
        (struct.pack(">I", 28), 0, V6),
        (struct.pack("<I", 30), 0, V6),
        (struct.pack(">I", 2), 108, V4),  # LOOP: always network order
        (struct.pack(">I", 30), 108, V6),
        (b"", 101, V4),
        (b"", 101, V6),
        (b"", 12, V4),
        (b"", 14, V6),
        (b"", 228, V4),
        (b"", 229, V6),
    ],
)
def test_loopback_and_raw(header, linktype, ip):
    result = parse(header + bytes(ip / tcp()), linktype=linktype)
    if ip is V4:
        assert_segment(result)
    else:
        assert_segment(result, src="2001:db8::1", dst="2001:db8::1:0:0:20")


def test_raw_ipv4_linktype_rejects_ipv6():
    assert_issue(parse(V6 / tcp(), linktype=228), "net.bad_header")


def test_unsupported_linktype():
    result = parse(b"\x00" * 40, linktype=147)
    assert_issue(result, "net.unsupported_linktype")
    assert "147" in result.detail


# --- IP ---


def test_ipv4_options():
    pkt = eth() / IP(src="192.0.2.10", dst="198.51.100.7",
                       options=[IPOption_RR(routers=["10.1.1.1", "10.2.2.2"])]) / tcp()  # fmt: skip
    assert bytes(pkt)[14] & 0x0F > 5
    assert_segment(parse(pkt))


def test_tcp_options_skipped():
    opts = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 2)), ("NOP", None), ("WScale", 7)]
    assert_segment(parse(eth() / V4 / tcp(options=opts)))


@pytest.mark.parametrize(
    "exts",
    [
        [IPv6ExtHdrHopByHop()],
        [IPv6ExtHdrHopByHop(), IPv6ExtHdrRouting(), IPv6ExtHdrDestOpt()],
        [IPv6ExtHdrDestOpt(), AH(nh=6, payloadlen=4, icv=b"\0" * 12)],
        [IPv6ExtHdrFragment(offset=0, m=0)],  # atomic fragment: a whole packet (RFC 6946)
    ],
)
def test_ipv6_extension_headers(exts):
    pkt = V6
    for ext in exts:
        pkt = pkt / ext
    assert_segment(parse(eth() / pkt / tcp()), src="2001:db8::1", dst="2001:db8::1:0:0:20")


def test_ipv4_fragments_reported():
    first = eth() / IP(src="192.0.2.10", dst="198.51.100.7", flags="MF") / tcp()
    later = eth() / IP(src="192.0.2.10", dst="198.51.100.7", frag=100, proto=6) / Raw(b"x" * 8)
    for pkt in (first, later):
        assert_issue(parse(pkt), "net.ip_fragment", "192.0.2.10", "198.51.100.7")


def test_ipv6_fragments_reported():
    for frag in (IPv6ExtHdrFragment(offset=0, m=1), IPv6ExtHdrFragment(offset=5, m=0, nh=6)):
        result = parse(eth() / V6 / frag / tcp())
        assert_issue(result, "net.ip_fragment", "2001:db8::1", "2001:db8::1:0:0:20")


def test_non_tcp_fragments_ignored():
    assert parse(eth() / V4.copy() / IP(flags="MF") / UDP()) is None
    assert parse(eth() / IP(frag=10, proto=17) / Raw(b"x" * 8)) is None
    assert parse(eth() / V6 / IPv6ExtHdrFragment(offset=0, m=1) / UDP()) is None


@pytest.mark.parametrize(
    "pkt",
    [
        eth() / ARP(),
        eth() / V4 / UDP(sport=1, dport=2) / Raw(b"x"),
        eth() / V4 / ICMP(),
        eth() / V6 / UDP(),
        eth() / V6 / ICMPv6EchoRequest(),
        eth() / V6 / IPv6ExtHdrHopByHop() / UDP(),
        eth(type=0x88CC) / Raw(b"\0" * 40),  # LLDP
        eth(type=0x0100) / Raw(b"\0" * 40),  # 802.3 length field
    ],
)
def test_not_tcp_is_none(pkt):
    assert parse(pkt) is None


def test_bsd_unknown_family_is_none():
    assert parse(struct.pack("<I", 17) + bytes(V4 / tcp()), linktype=0) is None


# --- snap length, offload and malformed headers ---


def test_snaplen_cut_payload_counts_missing():
    whole = bytes(eth() / V4 / tcp() / Raw(b"z" * 1000))
    result = parse(whole[:100], orig_len=len(whole))
    headers = 14 + 20 + 20
    assert_segment(result, payload=whole[headers:100], missing=len(whole) - 100)
    assert len(result.payload) + result.missing == len(BODY) + 1000


def test_snaplen_cut_padded_frame_counts_only_ip_bytes():
    whole = bytes(eth() / V4 / tcp(flags="PA") / Raw(b"q") / Padding(b"\0" * 20))
    result = parse(whole[:60], orig_len=len(whole))
    assert isinstance(result, Segment)
    assert len(result.payload) + result.missing == len(BODY) + 1


def test_ip_length_beyond_frame_is_not_missing():
    whole = bytearray(bytes(eth() / V4 / tcp()))
    struct.pack_into("!H", whole, 16, len(whole))  # IP total length claims 14 more bytes
    assert_segment(parse(bytes(whole)), missing=0)


def test_segmentation_offload_zero_lengths():
    v4 = bytearray(bytes(eth() / V4 / tcp()))
    struct.pack_into("!H", v4, 16, 0)
    assert_segment(parse(bytes(v4)))
    v6 = bytearray(bytes(eth() / V6 / tcp()))
    struct.pack_into("!H", v6, 18, 0)
    assert_segment(parse(bytes(v6)), src="2001:db8::1", dst="2001:db8::1:0:0:20")


@pytest.mark.parametrize(("cut", "addresses"), [(10, False), (16, False), (33, False), (40, True),
                                                 (53, True)])  # fmt: skip
def test_truncated_headers(cut, addresses):
    whole = bytes(eth() / V4 / tcp())
    result = parse(whole[:cut], orig_len=len(whole))
    src, dst = ("192.0.2.10", "198.51.100.7") if addresses else (None, None)
    assert_issue(result, "net.truncated_header", src, dst)


def test_headers_only_captured():
    whole = bytes(eth() / V4 / tcp())
    assert_segment(parse(whole[:54], orig_len=len(whole)), payload=b"", missing=len(BODY))


def test_truncated_tcp_options_knows_ports():
    data = bytes(eth() / V4 / tcp(options=[("Timestamp", (1, 2))]))[:60]
    assert_issue(parse(data, orig_len=200), "net.truncated_header", "192.0.2.10",
                 "198.51.100.7", (41234, 6650))  # fmt: skip


def test_truncated_inside_ipv6_extension_header():
    data = bytes(eth() / V6 / IPv6ExtHdrHopByHop() / tcp())[: 14 + 40 + 4]
    assert_issue(parse(data, orig_len=200), "net.truncated_header",
                 "2001:db8::1", "2001:db8::1:0:0:20")  # fmt: skip


@pytest.mark.parametrize(
    ("offset", "value"),
    [
        (14, 0x55),  # IP version 5 under ethertype IPv4
        (14, 0x44),  # IHL 4
        (14 + 20 + 12, 0x40),  # TCP data offset 4 words
        (14 + 20 + 12, 0xF0),  # TCP data offset beyond the IP packet
    ],
)
def test_bad_headers(offset, value):
    data = bytearray(bytes(eth() / V4 / tcp()))
    data[offset] = value
    assert parse(bytes(data)).code == "net.bad_header"


def test_ipv4_total_length_below_header():
    data = bytearray(bytes(eth() / V4 / tcp()))
    struct.pack_into("!H", data, 16, 12)
    assert_issue(parse(bytes(data)), "net.bad_header", "192.0.2.10", "198.51.100.7")


def test_ipv6_version_mismatch():
    assert parse(bytes(eth(type=0x86DD) / V4 / tcp())).code == "net.bad_header"


# --- properties ---

LINKTYPES = [*LINK_PARSERS, 147, 65535]


@given(
    linktype=st.sampled_from(LINKTYPES),
    data=st.binary(max_size=120),
    orig_len=st.integers(0, 2**32 - 1),
)
def test_random_bytes_never_raise(linktype, data, orig_len):
    result = parse_packet(RawPacket(1, 0, linktype, data, orig_len))
    assert result is None or isinstance(result, (Segment, NetIssue))


IP_PREFIX = [bytes(eth() / V4)[:34], bytes(eth() / V6)[:54]]


@given(prefix=st.sampled_from(IP_PREFIX), tail=st.binary(max_size=100), orig=st.integers(0, 500))
def test_random_bytes_after_ip_header_never_raise(prefix, tail, orig):
    result = parse_packet(RawPacket(1, 0, 1, prefix + tail, orig))
    assert result is None or isinstance(result, (Segment, NetIssue))


WHOLE = bytes(eth() / V6 / IPv6ExtHdrDestOpt() / tcp(options=[("NOP", None)] * 4) / Raw(b"w" * 50))


@given(cut=st.integers(0, len(WHOLE)))
def test_any_snaplen_gives_segment_or_truncated_header(cut):
    result = parse_packet(RawPacket(1, 0, 1, WHOLE[:cut], len(WHOLE)))
    headers = 14 + 40 + 8 + 24
    if cut < headers:
        assert isinstance(result, NetIssue)
        assert result.code == "net.truncated_header"
    else:
        assert isinstance(result, Segment)
        assert result.payload == WHOLE[headers:cut]
        assert result.missing == len(WHOLE) - cut
