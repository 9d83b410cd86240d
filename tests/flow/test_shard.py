"""Sharding connections among workers (dissector.flow.shard.Sharder).

- Connections are dealt in turn in the order they first appear: 8 connections give 4 and 4
  to two shards, 3 to each of three shards get 1 each.
- Both directions of a connection, and every later packet of it, land in its shard; two
  sharders fed the same packets agree (each worker deals for itself).
- Packets without ports go to shard 0.
"""

from __future__ import annotations

from typing import Any

from dissector.events import NetIssue, Segment
from dissector.flow.shard import Sharder


def seg(src: tuple[str, int], dst: tuple[str, int]) -> Segment:
    return Segment(1, 0, src[0], dst[0], src[1], dst[1], 0, 0, 0x18, 65535, b"x")


BROKER = ("10.0.0.100", 6650)
CLIENTS = [(f"10.0.{i % 2}.{i + 1}", 40000 + i) for i in range(8)]


def test_connections_are_dealt_in_turn_and_keep_their_shard() -> None:
    one, other = Sharder(2), Sharder(2)
    first = [one.of(seg(c, BROKER)) for c in CLIENTS]
    assert first == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [other.of(seg(c, BROKER)) for c in CLIENTS] == first  # workers agree
    for client, shard in zip(reversed(CLIENTS), reversed(first), strict=True):
        assert one.of(seg(BROKER, client)) == shard  # the broker's side
        assert one.of(seg(client, BROKER)) == shard  # later packets
    three = Sharder(3)
    assert [three.of(seg(c, BROKER)) for c in CLIENTS[:3]] == [0, 1, 2]


def test_packets_without_ports_go_to_shard_zero() -> None:
    s = Sharder(4)
    s.of(seg(CLIENTS[0], BROKER))
    issue = NetIssue("net.ip_fragment", "later fragment", 2, 0, "10.0.0.1", "10.0.0.2")
    assert s.of(issue) == 0


def test_memory_is_bounded_by_the_flow_table_capacity() -> None:
    s = Sharder(2, capacity=3)
    for c in CLIENTS:
        s.of(seg(c, BROKER))
    assert len(s._flows) == 3


def _ether(l3: object) -> bytes:
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / l3)


def test_the_raw_bytes_give_the_shard_of_the_parsed_packet() -> None:
    """A worker tells another worker's packets from their bytes: the same shard as parsing
    them gives, for IPv4 and IPv6, both ways; anything else is left to the parser (-1)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether

    from dissector.events import RawPacket
    from dissector.net.headers import parse_packet

    raw, parsed = Sharder(3), Sharder(3)
    packets = []
    client: Any
    broker: Any
    for i in range(6):
        if i % 2:
            client, broker = IP(src=f"10.1.0.{i + 1}"), IP(src="10.1.0.100")
            client.dst, broker.dst = broker.src, client.src
        else:
            client, broker = IPv6(src=f"fd00::{i + 1}"), IPv6(src="fd00::100")
            client.dst, broker.dst = broker.src, client.src
        packets.append(_ether(client / TCP(sport=50000 + i, dport=6650, flags="PA") / b"x"))
        packets.append(_ether(broker / TCP(sport=6650, dport=50000 + i, flags="PA") / b"y"))
    for n, data in enumerate(packets, start=1):
        shard = raw.of_raw(1, data)
        seg = parse_packet(RawPacket(n, 0, 1, data, len(data)))
        assert isinstance(seg, Segment)
        assert shard == parsed.of(seg) >= 0
    vlan = bytes(Ether() / Dot1Q(vlan=7) / IP(src="10.1.0.1", dst="10.1.0.100") / TCP())
    fragment = _ether(IP(src="10.1.0.1", dst="10.1.0.100", flags="MF") / TCP())
    udp = _ether(IP(src="10.1.0.1", dst="10.1.0.100") / UDP())
    for data in (vlan, fragment, udp, packets[0][:40]):
        assert raw.of_raw(1, data) == -1
    assert raw.of_raw(113, packets[0]) == -1  # Linux cooked capture: parsed
