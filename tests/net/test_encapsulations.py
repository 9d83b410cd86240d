"""Tunnels, label stacks and IP fragments around a Pulsar conversation, written with scapy.

- Each encapsulation (VXLAN, Geneve, GRE with ERSPAN types I/II/III, IP in IP, MPLS with
  and without a pseudowire, PPPoE, and some nested) carrying the baseline conversation
  gives the frames table of the same conversation captured plain; tshark, where installed,
  finds the inner TCP port 6650 in the same packets.
- IPv4 and IPv6 fragments, in order or not, give the frames of the unfragmented capture,
  stamped with the packet that completed each segment; a lost fragment gives
  `net.ip_fragment` anomalies and a TCP gap; overlapping fragments that differ give
  `net.ip_fragment_overlap` and keep the first copy.
- `-j 2` gives the rows of `-j 1` on a tunnelled, fragmented capture.
- The reassembler's bounds (datagrams, bytes, pieces, time) and the nesting bound hold.
Expected values come from what was crafted, never from the dissector.
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III, ERSPAN_PlatformSpecific
from scapy.contrib.geneve import GENEVE, GeneveOptions
from scapy.contrib.mpls import MPLS, EoMCW
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, CookedLinux, Dot1Q, Ether
from scapy.layers.ppp import PPP, PPPoE
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw

from dissector.anomalies import REGISTRY
from dissector.events import NetIssue, RawPacket, Segment
from dissector.net.fragments import Datagram, Fragment, FragmentReassembler
from dissector.net.headers import MAX_LAYERS, parse_layers, parse_packet
from dissector.read import read_tables
from tests.support.cli import cli
from tests.support.crafted import (
    B2C,
    C2B,
    FRAME_COLUMNS,
    Conn,
    Seg,
    Session,
    baseline_session,
    expected_rows,
    fragment_l3,
    write_frames,
)

V6 = Conn(client_ip="2001:db8::1", broker_ip="2001:db8::2")
OUTER: dict[str, Any] = {"src": "192.0.2.1", "dst": "192.0.2.2"}
OUTER6: dict[str, Any] = {"src": "2001:db8:ffff::1", "dst": "2001:db8:ffff::2"}
_MACS: dict[str, Any] = {"src": "02:00:00:00:00:0a", "dst": "02:00:00:00:00:0b"}

# --------------------------------------------------------------------------- builders


def etype_of(l3: bytes) -> int:
    return 0x86DD if l3[0] >> 4 == 6 else 0x0800


def ether(etype: int) -> Packet:
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=etype)


def inner_eth(l3: bytes) -> Packet:
    """The mirrored or bridged Ethernet frame around the conversation's IP packet."""
    return Ether(**_MACS, type=etype_of(l3)) / Raw(l3)


def vxlan(l3: bytes, port: int = 4789) -> bytes:
    udp = UDP(sport=50123, dport=port)
    return bytes(ether(0x0800) / IP(**OUTER) / udp / VXLAN(vni=42) / inner_eth(l3))


def vxlan_vlans(l3: bytes) -> bytes:
    """VXLAN over a tagged underlay, carrying a tagged frame."""
    outer = ether(0x8100) / Dot1Q(vlan=5, type=0x0800) / IP(**OUTER)
    tagged = Ether(**_MACS, type=0x8100) / Dot1Q(vlan=7, type=etype_of(l3)) / Raw(l3)
    return bytes(outer / UDP(sport=50123, dport=4789) / VXLAN(vni=42) / tagged)


def geneve(l3: bytes) -> bytes:
    option = GeneveOptions(classid=0x0102, type=0x80, data=b"\0" * 4)
    tunnel = GENEVE(vni=5, proto=0x6558, options=[option])
    return bytes(
        ether(0x0800) / IP(**OUTER) / UDP(sport=50123, dport=6081) / tunnel / inner_eth(l3)
    )


def gre_eth(l3: bytes) -> bytes:
    return bytes(ether(0x0800) / IP(**OUTER) / GRE(proto=0x6558) / inner_eth(l3))


def gre_ip(l3: bytes) -> bytes:
    """GRE with checksum, key and sequence number, the IP packet right after it."""
    gre = GRE(chksum_present=1, key_present=1, seqnum_present=1, key=7, sequence_number=9)
    gre.proto = etype_of(l3)
    return bytes(ether(0x0800) / IP(**OUTER) / gre / Raw(l3))


def gre_routing(l3: bytes) -> bytes:
    """GRE with RFC 1701 source routing: one entry, then the empty one that ends the list."""
    head = struct.pack("!HH", 0x4000, etype_of(l3)) + bytes(4)
    routes = struct.pack("!HBB", 0x0800, 0, 4) + bytes(4) + struct.pack("!HBB", 0, 0, 0)
    return bytes(ether(0x0800) / IP(**OUTER, proto=47) / Raw(head + routes + l3))


def gre_over_ipv6(l3: bytes) -> bytes:
    return bytes(ether(0x86DD) / IPv6(**OUTER6) / GRE(proto=0x6558) / inner_eth(l3))


def erspan_1(l3: bytes) -> bytes:
    return bytes(ether(0x0800) / IP(**OUTER) / GRE(proto=0x88BE) / inner_eth(l3))


def erspan_2(l3: bytes) -> bytes:
    gre = GRE(proto=0x88BE, seqnum_present=1, sequence_number=5)
    span = ERSPAN_II(vlan=10, session_id=3, index=9)
    return bytes(ether(0x0800) / IP(**OUTER) / gre / span / inner_eth(l3))


def erspan_3(l3: bytes) -> bytes:
    span = ERSPAN_III(vlan=10, session_id=3, timestamp=12345, o=0)
    return bytes(ether(0x0800) / IP(**OUTER) / GRE(proto=0x22EB) / span / inner_eth(l3))


def erspan_3_platform(l3: bytes) -> bytes:
    span = ERSPAN_III(session_id=3, o=1) / ERSPAN_PlatformSpecific(platf_id=3, info2=7)
    return bytes(ether(0x0800) / IP(**OUTER) / GRE(proto=0x22EB) / span / inner_eth(l3))


def erspan_3_ip(l3: bytes) -> bytes:
    """ERSPAN type III with frame type 2: the mirrored IP packet without its Ethernet."""
    span = ERSPAN_III(session_id=3, ft=2)
    return bytes(ether(0x0800) / IP(**OUTER) / GRE(proto=0x22EB) / span / Raw(l3))


def ip_in_ip(l3: bytes) -> bytes:
    return bytes(ether(0x0800) / IP(**OUTER, proto=4 if etype_of(l3) == 0x0800 else 41) / Raw(l3))


def mpls(l3: bytes) -> bytes:
    labels = MPLS(label=16, s=0, ttl=64) / MPLS(label=17, s=1, ttl=64)
    return bytes(ether(0x8847) / labels / Raw(l3))


def mpls_multicast(l3: bytes) -> bytes:
    return bytes(ether(0x8848) / MPLS(label=20, s=1, ttl=64) / Raw(l3))


def mpls_pseudowire(l3: bytes) -> bytes:
    return bytes(ether(0x8847) / MPLS(label=18, s=1, ttl=64) / EoMCW(seq=1) / inner_eth(l3))


def pppoe(l3: bytes) -> bytes:
    ppp = PPP(proto=0x0021 if etype_of(l3) == 0x0800 else 0x0057)
    return bytes(ether(0x8864) / PPPoE(sessionid=0x1234) / ppp / Raw(l3))


def pppoe_compressed(l3: bytes) -> bytes:
    """PPPoE with the PPP protocol field compressed to one byte."""
    body = bytes([0x21 if etype_of(l3) == 0x0800 else 0x57]) + l3
    head = struct.pack("!BBHH", 0x11, 0, 0x1234, len(body))
    return bytes(ether(0x8864) / Raw(head + body))


def nested(l3: bytes) -> bytes:
    """MPLS, IPv4, GRE, ERSPAN type II, a tagged Ethernet frame, then the conversation."""
    gre = GRE(proto=0x88BE, seqnum_present=1, sequence_number=5)
    tagged = Ether(**_MACS, type=0x8100) / Dot1Q(vlan=7, type=etype_of(l3)) / Raw(l3)
    outer = ether(0x8847) / MPLS(label=16, s=1, ttl=64) / IP(**OUTER)
    return bytes(outer / gre / ERSPAN_II(session_id=3) / tagged)


def cooked_gre(l3: bytes) -> bytes:
    """GRE in a Linux cooked capture (tcpdump -i any on the collector)."""
    mac = bytes.fromhex("020000000001") + b"\0\0"
    sll = CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=mac, proto=0x0800)
    return bytes(sll / IP(**OUTER) / GRE(proto=0x6558) / inner_eth(l3))


Wrap = Callable[[bytes], bytes]
_DEFAULT: list[str] = []
#: name -> (wrapper, pcap link type, the tshark options that decode it; None: tshark cannot)
WRAPS: dict[str, tuple[Wrap, int, list[str] | None]] = {
    "vxlan": (vxlan, 1, _DEFAULT),
    "vxlan_8472": (lambda l3: vxlan(l3, 8472), 1, ["-d", "udp.port==8472,vxlan"]),
    "vxlan_vlans": (vxlan_vlans, 1, _DEFAULT),
    "geneve": (geneve, 1, _DEFAULT),
    "gre_eth": (gre_eth, 1, _DEFAULT),
    "gre_ip": (gre_ip, 1, _DEFAULT),
    "gre_routing": (gre_routing, 1, _DEFAULT),
    "gre_over_ipv6": (gre_over_ipv6, 1, _DEFAULT),
    "erspan_1": (erspan_1, 1, _DEFAULT),
    "erspan_2": (erspan_2, 1, _DEFAULT),
    "erspan_3": (erspan_3, 1, _DEFAULT),
    "erspan_3_platform": (erspan_3_platform, 1, _DEFAULT),
    "erspan_3_ip": (erspan_3_ip, 1, None),  # Wireshark takes every ERSPAN frame for Ethernet
    "ip_in_ip": (ip_in_ip, 1, _DEFAULT),
    "mpls": (mpls, 1, _DEFAULT),
    "mpls_multicast": (mpls_multicast, 1, _DEFAULT),
    "mpls_pseudowire": (mpls_pseudowire, 1, ["-d", "mpls.label==18,pwethcw"]),
    "pppoe": (pppoe, 1, _DEFAULT),
    "pppoe_compressed": (pppoe_compressed, 1, _DEFAULT),
    "nested": (nested, 1, _DEFAULT),
    "cooked_gre": (cooked_gre, 113, _DEFAULT),
}


def plain(l3: bytes) -> bytes:
    return bytes(ether(etype_of(l3)) / Raw(l3))


def rows(path: Path, columns: Sequence[str] = FRAME_COLUMNS) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = read_tables(path)["frames"].select(list(columns)).to_pylist()
    return out


def anomalies(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = read_tables(path)["anomalies"].to_pylist()
    return out


# --------------------------------------------------------------------------- tunnels


@pytest.mark.parametrize("family", ["v4", "v6"])
@pytest.mark.parametrize("name", list(WRAPS))
def test_a_tunnelled_conversation_gives_the_plain_frames(
    tmp_path: Path, name: str, family: str
) -> None:
    s = baseline_session(V6 if family == "v6" else None)
    wrap, linktype, _ = WRAPS[name]
    path = write_frames(
        tmp_path / f"{name}.pcap", [wrap(seg.l3()) for seg in s.segs], linktype=linktype
    )
    tables = read_tables(path)
    assert rows(path) == expected_rows(s.placed, s.segs)
    assert tables["anomalies"].num_rows == 0
    (conv,) = tables["conversations"].to_pylist()
    assert (conv["client_ip"], conv["broker_ip"]) == (s.conn.client_ip, s.conn.broker_ip)
    plain_path = write_frames(tmp_path / "plain.pcap", [plain(seg.l3()) for seg in s.segs])
    assert tables["frames"].equals(read_tables(plain_path)["frames"])


TSHARK = shutil.which("tshark")


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
@pytest.mark.parametrize("name", [n for n, (_, _, options) in WRAPS.items() if options is not None])
def test_tshark_finds_the_inner_connection_in_the_same_packets(tmp_path: Path, name: str) -> None:
    s = baseline_session()
    wrap, linktype, options = WRAPS[name]
    assert options is not None
    frames = [wrap(seg.l3()) for seg in s.segs]
    frames.insert(3, bytes(ether(0x0800) / IP(**OUTER) / UDP(sport=1, dport=4789) / b"x"))
    path = write_frames(tmp_path / f"{name}.pcap", frames, linktype=linktype)
    assert TSHARK is not None
    done = subprocess.run(
        [
            TSHARK,
            "-r",
            str(path),
            *options,
            "-Y",
            "tcp.port==6650",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    packets = [int(n) for n in done.stdout.split()]
    ours = read_tables(path)["frames"]
    carrying = set(ours.column("first_packet").to_pylist()) | set(
        ours.column("last_packet").to_pylist()
    )
    assert packets == [n for n in range(1, len(frames) + 1) if n != 4]
    assert carrying <= set(packets)


def test_tunnels_of_other_traffic_are_ignored(tmp_path: Path) -> None:
    s = baseline_session()
    other = [
        vxlan(bytes(IP(src="10.9.0.1", dst="10.9.0.2") / UDP(sport=53, dport=53) / b"q")),
        bytes(ether(0x0800) / IP(**OUTER) / UDP(sport=1, dport=4789) / b"short"),
        bytes(ether(0x0800) / IP(**OUTER) / GRE(proto=0x880B, version=1) / b"pptp"),
        bytes(ether(0x8847) / MPLS(label=16, s=1) / Raw(b"\x10garbage")),
        bytes(ether(0x8864) / PPPoE(sessionid=1) / PPP(proto=0xC021) / b"lcp"),
        bytes(
            ether(0x0800) / IP(**OUTER) / GRE(proto=0x88BE, seqnum_present=1) / Raw(b"\x70" * 20)
        ),
    ]
    frames = [vxlan(seg.l3()) for seg in s.segs[:3]] + other
    frames += [vxlan(seg.l3()) for seg in s.segs[3:]]
    path = write_frames(tmp_path / "other.pcap", frames)
    expected = expected_rows(s.placed, s.segs)
    for row in expected:
        for column in ("first_packet", "last_packet"):
            row[column] += len(other) if row[column] > 3 else 0
    assert rows(path) == expected
    assert anomalies(path) == []


def test_a_truncated_tunnel_header_is_reported() -> None:
    frame = vxlan(bytes(IP(src="10.0.0.1", dst="10.0.0.2") / b"x"))
    cut = frame[: 14 + 20 + 8 + 4]
    result = parse_layers(RawPacket(1, 0, 1, cut, len(frame)))
    assert isinstance(result, NetIssue) and result.code == "net.truncated_header"
    assert "VXLAN" in result.detail


def _ip_in_ip(l3: bytes, layers: int) -> bytes:
    for _ in range(layers):
        l3 = bytes(IP(**OUTER, proto=4) / Raw(l3))
    return bytes(ether(0x0800) / Raw(l3))


def test_nesting_is_bounded() -> None:
    inner = Session().handshake()[0].l3()
    deepest = _ip_in_ip(inner, MAX_LAYERS)
    assert isinstance(parse_layers(RawPacket(1, 0, 1, deepest, len(deepest))), Segment)
    hostile = _ip_in_ip(inner, 1000)
    result = parse_layers(RawPacket(1, 0, 1, hostile, len(hostile)))
    assert isinstance(result, NetIssue) and result.code == "net.encapsulation_too_deep"
    assert result.code in REGISTRY


# --------------------------------------------------------------------------- fragments


def fragmented(
    segs: Sequence[Seg],
    size: int,
    order: str = "in_order",
    wrap: Wrap = plain,
) -> tuple[list[bytes], dict[int, int]]:
    """Every segment's IP packet cut into fragments of `size` bytes, sent in `order`; and
    the number of the packet that completes each segment (1-based, both)."""
    rng = random.Random(7)
    frames: list[bytes] = []
    completes: dict[int, int] = {}
    for number, seg in enumerate(segs, start=1):
        parts = fragment_l3(seg.l3(), size, ident=number)
        if order == "reversed":
            parts.reverse()
        elif order == "shuffled":
            rng.shuffle(parts)
        frames += [wrap(p) for p in parts]
        completes[number] = len(frames)
    return frames, completes


def renumbered(expected: list[dict[str, Any]], completes: dict[int, int]) -> list[dict[str, Any]]:
    return [
        {
            **row,
            "first_packet": completes[row["first_packet"]],
            "last_packet": completes[row["last_packet"]],
        }
        for row in expected
    ]


@pytest.mark.parametrize("order", ["in_order", "reversed", "shuffled"])
@pytest.mark.parametrize("family", ["v4", "v6"])
def test_fragments_give_the_frames_of_whole_packets(
    tmp_path: Path, family: str, order: str
) -> None:
    s = baseline_session(V6 if family == "v6" else None)
    frames, completes = fragmented(s.segs, 16, order)
    path = write_frames(tmp_path / "frag.pcap", frames)
    assert len(frames) > 3 * len(s.segs)
    assert rows(path) == renumbered(expected_rows(s.placed, s.segs), completes)
    assert anomalies(path) == []


def test_fragments_interleaved_across_datagrams(tmp_path: Path) -> None:
    """Two datagrams at a time, their fragments alternating; each completes in turn (a
    datagram completed early would carry an acknowledgement of bytes not yet seen)."""
    s = baseline_session()
    frames: list[bytes] = []
    completes: dict[int, int] = {}
    for first in range(1, len(s.segs) + 1, 2):
        pair = [n for n in (first, first + 1) if n <= len(s.segs)]
        parts = {n: [plain(p) for p in fragment_l3(s.segs[n - 1].l3(), 16, ident=n)] for n in pair}
        for k in range(max(len(p) for p in parts.values()) - 1):
            frames += [parts[n][k] for n in pair if k < len(parts[n]) - 1]
        for n in pair:
            frames.append(parts[n][-1])
            completes[n] = len(frames)
    path = write_frames(tmp_path / "interleaved.pcap", frames)
    assert rows(path) == renumbered(expected_rows(s.placed, s.segs), completes)
    assert anomalies(path) == []


def test_a_lost_fragment_is_reported_and_its_segment_is_a_gap(tmp_path: Path) -> None:
    s = baseline_session()
    flow = next(p for p in s.placed if p.msg.name == "FLOW")
    lost = next(seg for seg in s.segs if seg.direction is C2B and seg.offset == flow.offset)
    frames: list[bytes] = []
    completes: dict[int, int] = {}
    kept: list[int] = []
    for number, seg in enumerate(s.segs, start=1):
        parts = fragment_l3(seg.l3(), 16, ident=number)
        if seg is lost:
            del parts[1]
            kept = list(range(len(frames) + 1, len(frames) + 1 + len(parts)))
        frames += [plain(p) for p in parts]
        completes[number] = len(frames)
    path = write_frames(tmp_path / "lost.pcap", frames)
    placed = [p for p in s.placed if p is not flow]
    assert rows(path) == renumbered(expected_rows(placed, s.segs), completes)
    found = anomalies(path)
    frags = [a for a in found if a["code"] == "net.ip_fragment"]
    assert [a["packet"] for a in frags] == kept
    assert all("(10.0.0.1:40000 -> 10.0.0.2:6650)" in a["detail"] for a in frags)
    gaps = [a for a in found if a["code"] == "tcp.gap"]
    assert [(g["stream_offset"], g["length"]) for g in gaps] == [(lost.offset, len(lost.payload))]
    assert {a["code"] for a in found} == {"net.ip_fragment", "tcp.gap"}


def test_overlapping_fragments(tmp_path: Path) -> None:
    s = baseline_session()
    frames: list[bytes] = []
    completes: dict[int, int] = {}
    overlap_at = 0
    for number, seg in enumerate(s.segs, start=1):
        parts = fragment_l3(seg.l3(), 16, ident=number)
        if seg.direction is B2C and seg.payload and not overlap_at:
            # the second fragment again, identical (silent), then with other bytes (reported)
            again = bytearray(parts[1])
            again[-1] ^= 0xFF
            parts = [parts[0], parts[1], parts[1], bytes(again), *parts[2:]]
            overlap_at = len(frames) + 4
        frames += [plain(p) for p in parts]
        completes[number] = len(frames)
    path = write_frames(tmp_path / "overlap.pcap", frames)
    assert rows(path) == renumbered(expected_rows(s.placed, s.segs), completes)
    found = anomalies(path)
    assert [(a["code"], a["packet"]) for a in found] == [("net.ip_fragment_overlap", overlap_at)]
    assert REGISTRY["net.ip_fragment_overlap"].severity == "warning"


def test_a_fragmented_tunnel_and_fragments_in_a_tunnel(tmp_path: Path) -> None:
    s = baseline_session()
    frames: list[bytes] = []
    completes: dict[int, int] = {}
    for number, seg in enumerate(s.segs, start=1):
        if number % 2:  # the tunnel's packet fragmented (outer IPv4)
            outer = vxlan(seg.l3())[14:]
            frames += [plain(p) for p in fragment_l3(outer, 32, ident=number)]
        else:  # the conversation's packet fragmented inside the tunnel
            frames += [vxlan(p) for p in fragment_l3(seg.l3(), 16, ident=number)]
        completes[number] = len(frames)
    path = write_frames(tmp_path / "both.pcap", frames)
    assert rows(path) == renumbered(expected_rows(s.placed, s.segs), completes)
    assert anomalies(path) == []


def test_two_workers_give_the_rows_of_one(tmp_path: Path) -> None:
    sessions = [
        baseline_session(Conn(client_ip=f"10.0.0.{i + 10}", client_port=41000 + i))
        for i in range(5)
    ]
    frames: list[bytes] = []
    for k in range(max(len(s.segs) for s in sessions)):
        for i, s in enumerate(sessions):
            if k < len(s.segs):
                l3 = s.segs[k].l3()
                if i % 2:
                    parts = fragment_l3(l3, 24, ident=k)
                    if i == 1 and k == 6:  # one fragment lost: anomalies and a gap
                        del parts[1]
                    frames += [erspan_2(p) for p in parts]
                else:
                    frames.append(vxlan(l3))
    path = write_frames(tmp_path / "tunnels.pcap", frames)
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli("read", str(path), "-o", str(one), "-j", "1").returncode == 0
    done = cli("read", str(path), "-o", str(two), "-j", "2")
    assert done.returncode == 0, done.stderr
    for name in ("frames", "conversations", "anomalies"):
        order = ["conn_id", "packet"] if name == "anomalies" else ["conn_id"]
        a = pq.read_table(one / f"{name}.parquet").to_pandas()
        b = pq.read_table(two / f"{name}.parquet").to_pandas()
        a = a.sort_values(order, kind="stable").reset_index(drop=True)
        b = b.sort_values(order, kind="stable").reset_index(drop=True)
        assert a.equals(b), name
    assert pq.read_table(one / "conversations.parquet").num_rows == 5
    assert pq.read_table(one / "frames.parquet").num_rows == 5 * len(sessions[0].placed) - 1
    found = pq.read_table(one / "anomalies.parquet").column("code").to_pylist()
    assert "net.ip_fragment" in found and "tcp.gap" in found


# --------------------------------------------------------------------------- the reassembler


def frag(
    offset: int,
    data: bytes,
    more: bool = True,
    *,
    number: int = 1,
    ts: int = 0,
    ident: int = 1,
    proto: int = 6,
    lost: int = 0,
) -> Fragment:
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    return Fragment(number, ts, src, dst, ident, proto, offset, more, data, lost, 0)


def test_reassembly_of_pieces_in_any_order() -> None:
    r = FragmentReassembler()
    assert r.feed(frag(16, b"c" * 4, False, number=1)) == []
    assert r.feed(frag(0, b"a" * 8, number=2)) == []
    (dgram,) = r.feed(frag(8, b"b" * 8, number=3))
    assert isinstance(dgram, Datagram)
    assert (dgram.number, dgram.data, dgram.length) == (3, b"a" * 8 + b"b" * 8 + b"cccc", 20)
    assert len(r) == 0 and r.buffered == 0


def test_snap_length_losses_end_the_captured_bytes() -> None:
    r = FragmentReassembler()
    r.feed(frag(0, b"a" * 4, lost=4))
    (dgram,) = r.feed(frag(8, b"b" * 8, False))
    assert isinstance(dgram, Datagram) and (dgram.data, dgram.length) == (b"aaaa", 16)


def test_contradicting_ends_are_overlaps() -> None:
    r = FragmentReassembler()
    r.feed(frag(8, b"b" * 8, False, number=1))
    (issue,) = r.feed(frag(8, b"b" * 16, False, number=2))
    assert isinstance(issue, NetIssue) and issue.code == "net.ip_fragment_overlap"
    assert "ends at 24" in issue.detail and issue.number == 2
    (issue,) = r.feed(frag(16, b"x" * 8, True, number=3))
    assert isinstance(issue, NetIssue) and "past the datagram's end 16" in issue.detail
    (dgram,) = r.feed(frag(0, b"a" * 8, number=4))
    assert isinstance(dgram, Datagram) and dgram.data == b"a" * 8 + b"b" * 8


def test_incomplete_datagrams_time_out_with_their_ports() -> None:
    r = FragmentReassembler(timeout=1_000)
    head = struct.pack("!HH", 40000, 6650) + bytes(4)
    r.feed(frag(0, head, number=1, ts=0))
    r.feed(frag(16, b"z" * 8, False, number=2, ts=500))
    out = r.feed(frag(8, b"q" * 8, number=3, ts=1_000, ident=2))
    issues = [i for i in out if isinstance(i, NetIssue)]
    assert len(issues) == len(out)
    assert [(i.code, i.number, i.src_port, i.dst_port) for i in issues] == [
        ("net.ip_fragment", 1, 40000, 6650),
        ("net.ip_fragment", 2, 40000, 6650),
    ]
    assert "(timed out after 0.001 s; 16 of 24 bytes)" in str(issues[0])
    (issue,) = r.close()
    assert issue.number == 3 and "the capture ended" in issue.detail and issue.src_port is None


def test_datagrams_and_bytes_in_progress_are_bounded() -> None:
    r = FragmentReassembler(max_datagrams=3, max_bytes=1 << 20)
    for ident in range(5):
        out = r.feed(frag(0, b"a" * 8, ident=ident, number=ident + 1))
        assert [i.number for i in out if isinstance(i, NetIssue)] == (
            [ident - 2] if ident >= 3 else []
        )
    assert len(r) == 3
    r = FragmentReassembler(max_bytes=100)
    r.feed(frag(0, b"a" * 64, ident=1))
    (issue,) = r.feed(frag(0, b"b" * 64, ident=2, number=2))
    assert isinstance(issue, NetIssue) and issue.number == 1 and "dropped" in issue.detail
    assert r.buffered == 64


def test_fragments_per_datagram_are_bounded() -> None:
    r = FragmentReassembler()
    out: list[Datagram | NetIssue] = []
    for k in range(300):
        out += r.feed(frag(16 * k, b"x" * 8, number=k + 1))
    assert [i[0] for i in out] == ["net.ip_fragment"] * 257  # dropped at its 257th fragment
    assert "more than 256 fragments" in str(out[0])
    assert len(r) == 1 and r.buffered == 8 * (300 - 257)
    r = FragmentReassembler()
    out = []
    for k in range(300):  # the same fragment again and again
        out += r.feed(frag(0, b"x" * 8, number=k + 1))
    assert [i[0] for i in out] == ["net.ip_fragment"] * 257 and r.buffered == 8


def test_fragments_of_other_protocols_are_not_reported() -> None:
    r = FragmentReassembler()
    r.feed(frag(0, struct.pack("!HH", 5353, 53) + bytes(4), proto=17))  # UDP, to DNS
    r.feed(frag(0, struct.pack("!HH", 5353, 4789) + bytes(4), proto=17, ident=2, number=2))  # VXLAN
    assert [i.number for i in r.close()] == [2]


def test_parse_packet_alone_reports_tcp_fragments() -> None:
    l3 = Session().handshake()[0].l3()
    first = plain(fragment_l3(l3, 8, ident=5)[0])
    result = parse_packet(RawPacket(1, 0, 1, first, len(first)))
    assert isinstance(result, NetIssue) and result.code == "net.ip_fragment"
    parsed = parse_layers(RawPacket(1, 0, 1, first, len(first)))
    assert isinstance(parsed, Fragment) and (parsed.ident, parsed.offset, parsed.more) == (
        5,
        0,
        True,
    )
