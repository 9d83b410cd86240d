"""EDGE: a user's filter expression (`live -f EXPR`) compiled by libpcap.

Input: a filter expression in libpcap's language, the interface and its link type.
Output: a `BpfProgram` (compiled_by names libpcap's version).
Rules: libpcap is loaded through scapy's ctypes bindings, only when an expression is
given; the expression is compiled for the live interface as tcpdump does (so that `vlan`
uses the kernel's tag metadata), and for the link type alone when the interface cannot be
opened by libpcap. Without libpcap: one InputError saying how to get it, and that the
built-in filter on the broker ports needs none.
"""

from __future__ import annotations

import ctypes

from dissector.capture.bpf import LINKTYPE_RAW, SNAPLEN, BpfProgram
from dissector.errors import InputError

_DLT_RAW = 12  # libpcap on Linux names raw IP DLT_RAW (12); pcap files say 101
_NETMASK_UNKNOWN = 0xFFFFFFFF

NO_LIBPCAP = (
    "-f needs libpcap to compile filter expressions, and it is not installed "
    "(Debian/Ubuntu: apt-get install libpcap0.8); without -f, the built-in filter on the "
    "broker ports needs no libpcap"
)


def compile_expression(expression: str, interface: str, linktype: int) -> BpfProgram:
    """Compile `expression` with libpcap for `interface` (of pcap `linktype`)."""
    try:
        from scapy.libs import winpcapy as pcap
        from scapy.libs.structures import bpf_program
    except (OSError, ImportError):  # the library could not be loaded
        raise InputError(NO_LIBPCAP) from None
    errbuf = ctypes.create_string_buffer(pcap.PCAP_ERRBUF_SIZE)
    handle = pcap.pcap_open_live(interface.encode(), SNAPLEN, 0, 0, errbuf)
    if not handle:
        dlt = _DLT_RAW if linktype == LINKTYPE_RAW else linktype
        handle = pcap.pcap_open_dead(dlt, SNAPLEN)
    program = bpf_program()
    try:
        text = ctypes.create_string_buffer(expression.encode())
        if pcap.pcap_compile(handle, ctypes.byref(program), text, 1, _NETMASK_UNKNOWN) == -1:
            why = bytes(pcap.pcap_geterr(handle) or b"").decode(errors="replace")
            raise InputError(f"cannot use capture filter {expression!r}: {why}")
        insns = tuple(
            (i.code, i.jt, i.jf, i.k & 0xFFFFFFFF)  # k is signed there
            for i in (program.bf_insns[n] for n in range(program.bf_len))
        )
        pcap.pcap_freecode(ctypes.byref(program))
    finally:
        pcap.pcap_close(handle)
    version = bytes(pcap.pcap_lib_version() or b"libpcap").decode(errors="replace")
    return BpfProgram(insns, expression, f"compiled by {version}")
