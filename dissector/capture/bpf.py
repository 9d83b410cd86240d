"""Classic BPF programs for the default live filter, built without libpcap.

Input: the broker ports and the link type of the interface (Ethernet, loopback, raw IP).
Output: a `BpfProgram`: its instructions as Linux's `struct sock_filter` array (ready for
SO_ATTACH_FILTER), the filter text it stands for, and who compiled it.
Rule: a packet is accepted exactly when libpcap accepts it for
`tcp port P1 or ... or (vlan and (tcp port P1 or ...))` on that link type (raw IP: without
the VLAN part): IPv4 carrying TCP that is not a later fragment, or IPv6 whose fixed header
says TCP, with a source or destination port among the ports; on Ethernet, with no tag or
with one VLAN tag in the frame (TPID 0x8100, 0x88a8 or 0x9100). Loads are made in the
same order as libpcap's, so a packet cut short is rejected where libpcap rejects it.
Accepted packets keep SNAPLEN bytes.

Written by hand: libpcap is the only compiler of filter expressions, and the point of this
module is that live capture on the broker ports does not need it. The program is a few
dozen instructions; tests run it and libpcap's program side by side, packet by packet.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

SNAPLEN = 262144  # bytes kept of an accepted packet, as tcpdump (more than any 64 KiB GSO)

LINKTYPE_ETHERNET = 1  # pcap link types (also Linux loopback, which has Ethernet headers)
LINKTYPE_RAW = 101  # raw IPv4 / IPv6, no link header (tun devices)

_VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)  # the tags libpcap's `vlan` recognises
_ETH_IPV4, _ETH_IPV6 = 0x0800, 0x86DD
_TCP = 6

# Instruction codes (linux/filter.h, the same values as pcap-bpf.h).
_LDH_ABS, _LDB_ABS, _LDH_IND = 0x28, 0x30, 0x48
_LDXB_MSH = 0xB1  # X = 4 * (P[k] & 0xf): the IPv4 header length
_AND_K = 0x54
_JEQ_K, _JSET_K = 0x15, 0x45
_RET_K = 0x06

_INSN = struct.Struct("=HBBI")  # struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }

Instruction = tuple[int, int, int, int]  # code, jt, jf, k


@dataclass(frozen=True, slots=True)
class BpfProgram:
    """A classic BPF program and what it means."""

    instructions: tuple[Instruction, ...]
    text: str  # the filter expression it implements
    compiled_by: str  # "built in" or "libpcap ..."

    def pack(self) -> bytes:
        """The instructions as an array of `struct sock_filter` (native byte order)."""
        return b"".join(_INSN.pack(*insn) for insn in self.instructions)


def default_filter_text(ports: Iterable[int]) -> str:
    """The filter's text: `tcp port 6650 or tcp port 6651 ...` (sorted, once each)."""
    return " or ".join(f"tcp port {p}" for p in sorted(set(ports)))


def broker_port_filter(ports: Iterable[int], linktype: int) -> BpfProgram:
    """The program accepting TCP on any of `ports` for packets of `linktype`."""
    wanted = sorted(set(ports))
    if not wanted or not all(0 < p < 65536 for p in wanted):
        raise ValueError(f"ports must be 1..65535, at least one: {wanted}")
    asm = _Assembler()
    if linktype == LINKTYPE_ETHERNET:
        asm.op(_LDH_ABS, k=12)  # ethertype, or a VLAN tag's TPID
        for tpid in _VLAN_TPIDS:
            asm.jump(_JEQ_K, tpid, "tagged", None)
        _dispatch_ethertype(asm, 14)
        asm.label("tagged")
        asm.op(_LDH_ABS, k=16)  # the ethertype after one tag
        _dispatch_ethertype(asm, 18)
        nets: tuple[int, ...] = (14, 18)
    elif linktype == LINKTYPE_RAW:
        asm.op(_LDB_ABS, k=0)  # IP version
        asm.op(_AND_K, k=0xF0)
        asm.jump(_JEQ_K, 0x60, "ip6@0", None)
        asm.jump(_JEQ_K, 0x40, "ip4@0", "reject")
        nets = (0,)
    else:
        raise ValueError(f"no built-in filter for link type {linktype}")
    asm.label("reject")
    asm.op(_RET_K, k=0)
    for net in nets:
        _ip_blocks(asm, net, wanted)
    return BpfProgram(asm.resolve(), default_filter_text(wanted), "built in")


def _dispatch_ethertype(asm: _Assembler, net: int) -> None:
    """A holds the ethertype: on to the IPv6 or IPv4 block at offset `net`, else reject."""
    asm.jump(_JEQ_K, _ETH_IPV6, f"ip6@{net}", None)
    asm.jump(_JEQ_K, _ETH_IPV4, f"ip4@{net}", "reject")


def _ip_blocks(asm: _Assembler, net: int, ports: list[int]) -> None:
    """The IPv6 and IPv4 checks for a network header at offset `net`, each ending in its
    own reject and accept so that every jump stays short."""
    asm.label(f"ip6@{net}")
    asm.op(_LDB_ABS, k=net + 6)  # next header
    asm.jump(_JEQ_K, _TCP, None, f"no6@{net}")
    _port_checks(asm, _LDH_ABS, net + 40, ports, f"6@{net}")
    asm.label(f"ip4@{net}")
    asm.op(_LDB_ABS, k=net + 9)  # protocol
    asm.jump(_JEQ_K, _TCP, None, f"no4@{net}")
    asm.op(_LDH_ABS, k=net + 6)  # flags and fragment offset
    asm.jump(_JSET_K, 0x1FFF, f"no4@{net}", None)  # a later fragment has no TCP header
    asm.op(_LDXB_MSH, k=net)  # X = IPv4 header length
    _port_checks(asm, _LDH_IND, net, ports, f"4@{net}")


def _port_checks(asm: _Assembler, load: int, offset: int, ports: list[int], tag: str) -> None:
    """Source port, then destination port, each against every port; then this block's
    reject (`no{tag}`) and accept."""
    for k in (offset, offset + 2):
        asm.op(load, k=k)
        for port in ports:
            asm.jump(_JEQ_K, port, f"yes{tag}", None)
    asm.label(f"no{tag}")
    asm.op(_RET_K, k=0)
    asm.label(f"yes{tag}")
    asm.op(_RET_K, k=SNAPLEN)


class _Assembler:
    """Instructions with jumps to named labels (None: the next instruction)."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def op(self, code: int, *, k: int) -> None:
        self._code.append((code, None, None, k))

    def jump(self, code: int, k: int, jt: str | None, jf: str | None) -> None:
        self._code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def resolve(self) -> tuple[Instruction, ...]:
        out: list[Instruction] = []
        for pc, (code, jt, jf, k) in enumerate(self._code):
            out.append((code, self._offset(pc, jt), self._offset(pc, jf), k))
        return tuple(out)

    def _offset(self, pc: int, label: str | None) -> int:
        if label is None:
            return 0
        offset = self._labels[label] - pc - 1
        if not 0 <= offset <= 255:  # cBPF jumps are forward, 8 bits
            raise ValueError(f"too many ports for one filter program (jump of {offset})")
        return offset
