"""The built-in live filter (`dissector.capture.bpf`) against libpcap, packet by packet.

For each port set and link type, libpcap compiles the expression the program claims to
implement (`tcp port P or ... or (vlan and (tcp port P or ...))` on Ethernet, without the
VLAN part on raw IP), and libpcap's own interpreter (`pcap_offline_filter`) runs both
programs on every packet of the bundled captures and on crafted packets (IPv4 with options
and fragments, IPv6 with and without extension headers, one and two VLAN tags, UDP on the
ports, other ports, ARP), each also cut at every length. The verdicts must be equal.
libpcap is bound here with ctypes, apart from the product's own binding. It is a test
dependency (`make test` installs it): without it these tests skip, except under CI=true.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.packet import Packet, Raw

from dissector.capture import open_capture
from dissector.capture.bpf import (
    LINKTYPE_ETHERNET,
    LINKTYPE_RAW,
    SNAPLEN,
    BpfProgram,
    broker_port_filter,
    default_filter_text,
)

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
_DLT = {LINKTYPE_ETHERNET: 1, LINKTYPE_RAW: 12}  # libpcap's names on Linux


class _Insn(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("bf_len", ctypes.c_uint), ("bf_insns", ctypes.POINTER(_Insn))]


class _Header(ctypes.Structure):
    _fields_ = [
        ("sec", ctypes.c_long),
        ("usec", ctypes.c_long),
        ("caplen", ctypes.c_uint32),
        ("len", ctypes.c_uint32),
    ]


class Libpcap:
    """The few libpcap calls these tests need."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("pcap")
        if name is None:
            raise OSError("libpcap not found")
        lib = ctypes.CDLL(name)
        lib.pcap_open_dead.restype = ctypes.c_void_p
        lib.pcap_open_dead.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.pcap_compile.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(_Program),
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_uint32,
        ]
        lib.pcap_geterr.restype = ctypes.c_char_p
        lib.pcap_geterr.argtypes = [ctypes.c_void_p]
        lib.pcap_close.argtypes = [ctypes.c_void_p]
        lib.pcap_offline_filter.argtypes = [
            ctypes.POINTER(_Program),
            ctypes.POINTER(_Header),
            ctypes.c_char_p,
        ]
        self.lib = lib

    def compile(self, expression: str, linktype: int) -> _Program:
        handle = self.lib.pcap_open_dead(_DLT[linktype], SNAPLEN)
        program = _Program()
        try:
            rc = self.lib.pcap_compile(handle, program, expression.encode(), 1, 0xFFFFFFFF)
            assert rc == 0, self.lib.pcap_geterr(handle)
        finally:
            self.lib.pcap_close(handle)
        return program  # freed with the process: a handful per test run

    def accepts(self, program: _Program, packet: bytes, wire_length: int) -> bool:
        header = _Header(0, 0, len(packet), wire_length)
        return bool(self.lib.pcap_offline_filter(program, header, packet))


def ours(program: BpfProgram) -> _Program:
    insns = (_Insn * len(program.instructions))(*(_Insn(*i) for i in program.instructions))
    out = _Program(len(program.instructions), insns)
    out._keep = insns  # the array lives as long as the program
    return out


@pytest.fixture(scope="module")
def libpcap() -> Libpcap:
    try:
        return Libpcap()
    except OSError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, but libpcap cannot be loaded ({exc}): make test installs it")
        pytest.skip(f"libpcap cannot be loaded: {exc}")


def reference_expression(ports: list[int], linktype: int) -> str:
    plain = default_filter_text(ports)
    return plain if linktype == LINKTYPE_RAW else f"{plain} or (vlan and ({plain}))"


def crafted(ports: list[int]) -> Iterator[Packet]:
    """IP packets that each test one rule, on and off the ports."""
    port, other = ports[0], 40000
    for sport, dport in ((port, other), (other, port), (other, other + 1), (ports[-1], other)):
        tcp = TCP(sport=sport, dport=dport, flags="PA") / Raw(b"\x00\x00\x00\x08pulsar")
        yield IP(src="10.0.0.1", dst="10.0.0.2") / tcp
        yield IP(src="10.0.0.1", dst="10.0.0.2", options=b"\x01\x01\x01\x00") / tcp
        yield IP(src="10.0.0.1", dst="10.0.0.2", flags="MF") / tcp  # first fragment
        yield IP(src="10.0.0.1", dst="10.0.0.2", frag=185) / tcp  # a later fragment
        yield IP(src="10.0.0.1", dst="10.0.0.2", frag=4096) / tcp  # offset's top bit only
        yield IPv6(src="fd00::1", dst="fd00::2") / tcp
        yield IPv6(src="fd00::1", dst="fd00::2") / IPv6ExtHdrHopByHop() / tcp
        yield IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=sport, dport=dport) / Raw(b"x")
        yield IPv6(src="fd00::1", dst="fd00::2") / UDP(sport=sport, dport=dport)
    yield IP(src="10.0.0.1", dst="10.0.0.2") / ICMP()


def framed(ip: Packet) -> Iterator[bytes]:
    """The IP packet in Ethernet: untagged, one tag of each kind, two tags."""
    src, dst = "00:00:00:00:00:01", "00:00:00:00:00:02"
    yield bytes(Ether(src=src, dst=dst) / ip)
    yield bytes(Ether(src=src, dst=dst) / Dot1Q(vlan=7) / ip)
    yield bytes(Ether(src=src, dst=dst) / Dot1AD(vlan=7) / ip)
    yield bytes(Ether(src=src, dst=dst, type=0x9100) / Dot1Q(vlan=7) / ip)
    yield bytes(Ether(src=src, dst=dst) / Dot1AD(vlan=7) / Dot1Q(vlan=8) / ip)


def sample_packets() -> list[bytes]:
    out: list[bytes] = []
    for path in sorted(PCAPS.glob("*.pcap*")):
        with open_capture(path) as reader:
            out += [p.data for p in reader if p.linktype == LINKTYPE_ETHERNET]
    return out


def sample_ports() -> list[int]:
    return sorted({json.loads(m.read_text())["broker_port"] for m in PCAPS.glob("*.manifest.json")})


@pytest.mark.parametrize("linktype", [LINKTYPE_ETHERNET, LINKTYPE_RAW])
@pytest.mark.parametrize("ports", ["6650", "6650,6651", "samples"])
def test_verdicts_equal_libpcaps_packet_by_packet(
    libpcap: Libpcap, linktype: int, ports: str
) -> None:
    wanted = (
        sample_ports()[:3] + [6650] if ports == "samples" else [int(p) for p in ports.split(",")]
    )
    program = broker_port_filter(wanted, linktype)
    assert program.text == default_filter_text(wanted)
    reference = libpcap.compile(reference_expression(wanted, linktype), linktype)
    mine = ours(program)
    packets: list[bytes] = []
    for ip in crafted(sorted(wanted)):
        whole = list(framed(ip)) if linktype == LINKTYPE_ETHERNET else [bytes(ip)]
        for data in whole:
            packets += [data[:n] for n in range(len(data) + 1)]  # cut at every length
    packets += [bytes(Ether() / ARP())] if linktype == LINKTYPE_ETHERNET else [b"\x45"]
    if linktype == LINKTYPE_ETHERNET:
        packets += sample_packets()
    verdicts = {True: 0, False: 0}
    for data in packets:
        want = libpcap.accepts(reference, data, len(data))
        assert libpcap.accepts(mine, data, len(data)) == want, (wanted, data.hex())
        verdicts[want] += 1
    assert verdicts[True] > 50 and verdicts[False] > 50, verdicts  # both sides exercised


def test_sample_traffic_on_its_broker_port_is_accepted(libpcap: Libpcap) -> None:
    """Every packet of a bundled capture is on its broker's port (tcpdump captured it with
    `tcp port BROKERPORT`): the built-in filter for that port keeps them all."""
    manifest = json.loads((PCAPS / "produce_consume.manifest.json").read_text())
    program = ours(broker_port_filter([manifest["broker_port"]], LINKTYPE_ETHERNET))
    with open_capture(PCAPS / "produce_consume.pcap") as reader:
        data = [p.data for p in reader]
    assert data and all(libpcap.accepts(program, d, len(d)) for d in data)
    other = ours(broker_port_filter([manifest["broker_port"] + 1], LINKTYPE_ETHERNET))
    assert not any(libpcap.accepts(other, d, len(d)) for d in data)


def test_many_ports_fit_and_too_many_are_refused() -> None:
    assert len(broker_port_filter(range(1000, 1030), LINKTYPE_ETHERNET).instructions) < 300
    with pytest.raises(ValueError, match="too many ports"):
        broker_port_filter(range(1000, 1200), LINKTYPE_ETHERNET)
    with pytest.raises(ValueError, match="link type"):
        broker_port_filter([6650], 113)


def test_pack_is_the_kernels_sock_filter_layout() -> None:
    program = broker_port_filter([6650], LINKTYPE_RAW)
    packed = program.pack()
    assert len(packed) == 8 * len(program.instructions)
    # the first instruction, by hand: ldb [0] = code 0x30, jt 0, jf 0, k 0
    assert packed[:8] == (0x30).to_bytes(2, "little") + b"\x00\x00" + (0).to_bytes(4, "little")
