"""EDGE: a Linux packet socket on one interface, filtered in the kernel.

Input: an interface name, a function choosing the filter once the link type is known (a
`BpfProgram`, or None for every packet), and a receive buffer size.
Output: batches of (µs since the epoch, packet bytes) as the interface carried them, and
the kernel's drop count.
Rules:
- The filter is attached before the socket is bound to receive anything, so no packet
  outside the filter is ever queued (libpcap attaches a drop-all filter first instead).
- VLAN tags the kernel moved out of the frame (PACKET_AUXDATA) are put back, as libpcap
  does; timestamps are the kernel's (SO_TIMESTAMPNS).
- Loopback: the kernel hands every packet over twice, outgoing then incoming. The outgoing
  copy is dropped in the kernel (PACKET_IGNORE_OUTGOING, Linux 4.20+), or here on older
  kernels, as libpcap does. Other interfaces keep both directions.
- Drops come from PACKET_STATISTICS, which the kernel resets at every read: they are summed.
No libpcap and no scapy: the standard socket module does all of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
import sys
import time
from collections.abc import Callable

from dissector.capture.bpf import LINKTYPE_ETHERNET, LINKTYPE_RAW, SNAPLEN, BpfProgram
from dissector.errors import InputError

_ETH_P_ALL = 0x0003
_SOL_PACKET = 263
_PACKET_AUXDATA, _PACKET_STATISTICS, _PACKET_IGNORE_OUTGOING = 8, 6, 23
_PACKET_OUTGOING = 4
_SO_ATTACH_FILTER, _SO_RCVBUFFORCE = 26, 33
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TP_STATUS_VLAN_VALID, _TP_STATUS_VLAN_TPID_VALID = 0x10, 0x40
_AUXDATA = struct.Struct("=IIIHHHH")  # struct tpacket_auxdata
_TIMESPEC = struct.Struct("=qq")
_VLAN_TAG = struct.Struct("!HH")
_ANCILLARY = socket.CMSG_SPACE(_AUXDATA.size) + socket.CMSG_SPACE(_TIMESPEC.size)

ARPHRD_LOOPBACK = 772
LINKTYPES = {1: LINKTYPE_ETHERNET, ARPHRD_LOOPBACK: LINKTYPE_ETHERNET, 65534: LINKTYPE_RAW}
LINKTYPE_NAMES = {LINKTYPE_ETHERNET: "EN10MB (Ethernet)", LINKTYPE_RAW: "RAW (raw IP)"}

ChooseFilter = Callable[[int, str], BpfProgram | None]  # (link type, interface) -> filter


class PacketSocket:
    """Packets of one interface through an AF_PACKET socket (the live `Source`)."""

    def __init__(self, interface: str | None, choose: ChooseFilter, buffer_bytes: int) -> None:
        if not sys.platform.startswith("linux"):
            raise InputError("live capture needs Linux (AF_PACKET sockets)")
        self.name = interface or default_interface()
        known = sorted(n for _, n in socket.if_nameindex())
        if self.name not in known:
            hint = " (capture one interface at a time)" if self.name == "any" else ""
            raise InputError(
                f"no such interface: {self.name}{hint}; interfaces: {', '.join(known)}"
            )
        try:
            self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # receives nothing
        except PermissionError:
            raise InputError(
                f"cannot capture on {self.name}: permission denied; capturing needs root or the "
                "CAP_NET_RAW capability (sudo, or setcap cap_net_raw+eip on the interpreter)"
            ) from None
        try:
            self._setup(choose, buffer_bytes)
        except BaseException:
            self._sock.close()
            raise

    def _setup(self, choose: ChooseFilter, buffer_bytes: int) -> None:
        sock = self._sock
        try:
            sock.bind((self.name, 0))
        except OSError as exc:
            raise InputError(f"cannot capture on {self.name}: {exc.strerror or exc}") from None
        hatype = sock.getsockname()[3]
        linktype = LINKTYPES.get(hatype)
        if linktype is None:
            raise InputError(f"{self.name}: link layer (ARPHRD {hatype}) not supported")
        self.linktype = linktype
        self.loopback = hatype == ARPHRD_LOOPBACK
        self.filter = choose(linktype, self.name)
        if self.filter is not None:
            attach_filter(sock, self.filter)
        for option in (_SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE passes rmem_max (root)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, option, buffer_bytes)
                break
        self.buffer_bytes = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
        sock.setsockopt(_SOL_PACKET, _PACKET_AUXDATA, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self._drop_outgoing = self.loopback
        if self.loopback:
            with contextlib.suppress(OSError):  # older kernels: dropped in read()
                sock.setsockopt(_SOL_PACKET, _PACKET_IGNORE_OUTGOING, 1)
        sock.bind((self.name, _ETH_P_ALL))  # from here on, filtered packets are queued
        sock.setblocking(False)
        self._dropped = 0
        self.drops()  # start counting from zero

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` waiting packets as (µs since the epoch, bytes); [] when none."""
        out: list[tuple[int, bytes]] = []
        recvmsg, ethernet = self._sock.recvmsg, self.linktype == LINKTYPE_ETHERNET
        while len(out) < limit:
            try:
                data, ancillary, _, address = recvmsg(SNAPLEN, _ANCILLARY)
            except BlockingIOError:
                break
            except OSError as exc:
                raise InputError(f"{self.name}: capture failed: {exc.strerror or exc}") from None
            if self._drop_outgoing and address[2] == _PACKET_OUTGOING:
                continue  # seen again as incoming
            ts = 0
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                    seconds, nanos = _TIMESPEC.unpack_from(value)
                    ts = seconds * 1_000_000 + nanos // 1000
                elif level == _SOL_PACKET and kind == _PACKET_AUXDATA and ethernet:
                    data = _restore_vlan(data, value)
            out.append((ts or time.time_ns() // 1000, data))
        return out

    def drops(self) -> int | None:
        """Packets the kernel dropped so far, or None when it does not say."""
        try:  # struct tpacket_stats { tp_packets; tp_drops; }, reset by every read
            _, dropped = struct.unpack(
                "II", self._sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
            )
        except OSError:
            return None
        self._dropped += dropped
        return self._dropped

    def close(self) -> None:
        self._sock.close()


def attach_filter(sock: socket.socket, program: BpfProgram) -> None:
    """SO_ATTACH_FILTER: the kernel copies the program, so the buffer may go afterwards."""
    code = ctypes.create_string_buffer(program.pack())
    fprog = struct.pack("@HP", len(program.instructions), ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        raise InputError(f"the kernel refused filter {program.text!r}: {exc.strerror}") from None


def _restore_vlan(data: bytes, auxdata: bytes) -> bytes:
    """The frame with the VLAN tag the kernel took out of it put back after the MACs."""
    status, _, _, _, _, tci, tpid = _AUXDATA.unpack_from(auxdata)
    if not (status & _TP_STATUS_VLAN_VALID or tci):
        return data
    tpid = tpid if status & _TP_STATUS_VLAN_TPID_VALID else 0x8100
    return data[:12] + _VLAN_TAG.pack(tpid, tci) + data[12:]


def default_interface() -> str:
    """The interface of the default route (IPv4 first, then IPv6), else the first that is
    not loopback. Read from /proc/net/route and /proc/net/ipv6_route."""
    for device in _default_route_devices():
        return device
    names = [n for _, n in socket.if_nameindex() if n != "lo"]
    if not names:
        raise InputError("no interface to capture on: give one with -i")
    return names[0]


def _default_route_devices() -> list[str]:
    found: list[str] = []
    with contextlib.suppress(OSError), open("/proc/net/route") as routes:
        next(routes, None)  # Iface Destination Gateway Flags RefCnt Use Metric Mask ...
        for line in routes:
            f = line.split()
            if len(f) > 7 and f[1] == "00000000" and f[7] == "00000000":
                found.append(f[0])
    with contextlib.suppress(OSError), open("/proc/net/ipv6_route") as routes:
        for line in routes:  # destination prefix-length source ... flags device
            f = line.split()
            if len(f) == 10 and f[0] == "0" * 32 and f[1] == "00" and f[9] != "lo":
                found.append(f[9])
    return found
