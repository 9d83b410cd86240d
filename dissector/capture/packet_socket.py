"""EDGE: a Linux packet socket on one interface, filtered in the kernel.

Input: an interface name, a function choosing the filter once the link type is known (a
`BpfProgram`, or None for every packet), and a receive buffer size.
Output: batches of (µs since the epoch, packet bytes) as the interface carried them, at
most SNAPLEN bytes of each, and the kernel's drop count.
Rules:
- The filter is attached before the socket is bound to receive anything, so no packet
  outside the filter is ever queued (libpcap attaches a drop-all filter first instead).
- Packets arrive through a TPACKET_V3 memory-mapped ring (`ring` is True): blocks of
  1 MiB, as many as the buffer size holds (at least 2). The kernel hands a block over
  when it is full or RETIRE_MS after its first packet, so a quiet link still delivers
  promptly, and the fd is readable (select/poll) once a block is handed over. `read`
  copies packets out, remembers where it stopped in a block when `limit` is reached, and
  gives each block back once all of its packets are copied. Without a ring (kernel
  refuses it, or loopback without PACKET_IGNORE_OUTGOING) packets are read one at a time
  with recvmsg from a socket buffer of that size (`ring` is False).
- VLAN tags the kernel moved out of the frame (the ring's tp_vlan_tci / tp_vlan_tpid, or
  PACKET_AUXDATA) are put back, as libpcap does; timestamps are the kernel's (the ring's
  tp_sec/tp_nsec, or SO_TIMESTAMPNS).
- Loopback: the kernel hands every packet over twice, outgoing then incoming. The outgoing
  copy is dropped in the kernel (PACKET_IGNORE_OUTGOING, Linux 4.20+), or here on older
  kernels, as libpcap does. Other interfaces keep both directions.
- Drops come from PACKET_STATISTICS, which the kernel resets at every read: they are summed.
- Fan-out (`fanout`: a group id): several sockets of one interface share its packets by flow
  (PACKET_FANOUT_HASH, with DEFRAG so that every fragment of a datagram goes where its
  first does). The kernel's flow hash is symmetric (addresses and ports sorted), so both
  directions of a TCP connection reach the same socket (tests/frontends/test_live_fanout).
  A socket joins the group with a drop-all filter, then takes its own: before it joins it
  would get a copy of every packet the members already share. The kernel hands a group
  loopback's outgoing copies whatever PACKET_IGNORE_OUTGOING says (that option is the
  socket's, the group has its own hook), so on loopback the filter drops them itself
  (`without_outgoing`: the packet type, a BPF ancillary load, is PACKET_OUTGOING).
No libpcap and no scapy: the standard socket, mmap and select modules do all of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import select
import socket
import struct
import sys
import time
from collections.abc import Callable

from dissector.capture.bpf import LINKTYPE_ETHERNET, LINKTYPE_RAW, SNAPLEN, BpfProgram
from dissector.errors import InputError

_ETH_P_ALL = 0x0003
_BPF_RET_K, _BPF_LD_W_ABS, _BPF_JEQ_K = 0x06, 0x20, 0x15  # BPF_RET|BPF_K, BPF_LD|BPF_W|BPF_ABS
_SKF_AD_PKTTYPE = 0xFFFFF000 + 4  # SKF_AD_OFF + SKF_AD_PKTTYPE: the ancillary packet type
_SOL_PACKET = 263
_PACKET_AUXDATA, _PACKET_STATISTICS, _PACKET_IGNORE_OUTGOING = 8, 6, 23
_PACKET_OUTGOING = 4
_SO_ATTACH_FILTER, _SO_DETACH_FILTER, _SO_RCVBUFFORCE = 26, 27, 33
_PACKET_FANOUT, _PACKET_FANOUT_HASH, _PACKET_FANOUT_FLAG_DEFRAG = 18, 0, 0x8000
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TP_STATUS_VLAN_VALID, _TP_STATUS_VLAN_TPID_VALID = 0x10, 0x40
_AUXDATA = struct.Struct("=IIIHHHH")  # struct tpacket_auxdata
_TIMESPEC = struct.Struct("=qq")
_VLAN_TAG = struct.Struct("!HH")
_ANCILLARY = socket.CMSG_SPACE(_AUXDATA.size) + socket.CMSG_SPACE(_TIMESPEC.size)

# TPACKET_V3 ring (linux/if_packet.h)
_PACKET_RX_RING, _PACKET_VERSION = 5, 10
_TPACKET_V1, _TPACKET_V3 = 0, 2
_TP_STATUS_KERNEL, _TP_STATUS_USER = 0, 1
_REQ3 = struct.Struct("=7I")  # struct tpacket_req3
_BLOCK_STATUS = struct.Struct("=I")  # tpacket_block_desc.hdr.bh1.block_status, at 8
_BLOCK_HEAD = struct.Struct("=III")  # block_status, num_pkts, offset_to_first_pkt, at 8
_PKT_HEAD = struct.Struct("=IIIIIIHHIIH")  # struct tpacket3_hdr up to hv1.tp_vlan_tpid
_STATS_V3 = struct.Struct("=III")  # struct tpacket_stats_v3
BLOCK_SIZE = 1 << 20  # more than SNAPLEN plus headers: no packet is cut short by the ring
FRAME_SIZE = 2048  # only a hint for TPACKET_V3 (packets are packed in a block)
RETIRE_MS = 50  # a block with packets is handed over at the latest this long after opening

ARPHRD_LOOPBACK = 772
LINKTYPES = {1: LINKTYPE_ETHERNET, ARPHRD_LOOPBACK: LINKTYPE_ETHERNET, 65534: LINKTYPE_RAW}
LINKTYPE_NAMES = {LINKTYPE_ETHERNET: "EN10MB (Ethernet)", LINKTYPE_RAW: "RAW (raw IP)"}

#: A filter that takes no packet (`ret #0`): a fan-out member's until it joins.
DROP_ALL = BpfProgram(((_BPF_RET_K, 0, 0, 0),), "none (joining the fan-out group)", "built in")

ChooseFilter = Callable[[int, str], BpfProgram | None]  # (link type, interface) -> filter


class PacketSocket:
    """Packets of one interface through an AF_PACKET socket (the live `Source`)."""

    def __init__(
        self,
        interface: str | None,
        choose: ChooseFilter,
        buffer_bytes: int,
        *,
        ring: bool = True,
        fanout: int | None = None,
    ) -> None:
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
            self._setup(choose, buffer_bytes, ring, fanout)
        except BaseException:
            self.close()
            raise

    def _setup(
        self, choose: ChooseFilter, buffer_bytes: int, ring: bool, fanout: int | None
    ) -> None:
        sock = self._sock
        self.ring = False
        self._map: mmap.mmap | None = None
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
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
        if fanout is not None:
            attach_filter(sock, DROP_ALL)  # until it is a member of the group
        elif self.filter is not None:
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
                self._drop_outgoing = False
        if ring and not self._drop_outgoing:  # the ring has no packet direction to filter on
            self._setup_ring(buffer_bytes)
        sock.bind((self.name, _ETH_P_ALL))  # from here on, filtered packets are queued
        if fanout is not None:
            mode = (_PACKET_FANOUT_HASH | _PACKET_FANOUT_FLAG_DEFRAG) << 16
            try:
                value = struct.pack("=I", (fanout & 0xFFFF) | mode)  # above a C int's range
                sock.setsockopt(_SOL_PACKET, _PACKET_FANOUT, value)
            except OSError as exc:
                raise InputError(
                    f"{self.name}: packet fan-out refused: {exc.strerror or exc}"
                ) from None
            program = without_outgoing(self.filter) if self.loopback else self.filter
            if program is None:
                sock.setsockopt(socket.SOL_SOCKET, _SO_DETACH_FILTER, 0)
            else:
                attach_filter(sock, program)
        sock.setblocking(False)
        self._dropped = 0
        self.drops()  # start counting from zero

    def _setup_ring(self, buffer_bytes: int) -> None:
        """A TPACKET_V3 ring of `buffer_bytes` (whole blocks, at least 2); on any refusal
        the socket stays as it was (recvmsg reading)."""
        sock, blocks = self._sock, max(2, buffer_bytes // BLOCK_SIZE)
        frames = BLOCK_SIZE // FRAME_SIZE * blocks
        try:
            sock.setsockopt(_SOL_PACKET, _PACKET_VERSION, _TPACKET_V3)
            req = _REQ3.pack(BLOCK_SIZE, blocks, FRAME_SIZE, frames, RETIRE_MS, 0, 0)
            sock.setsockopt(_SOL_PACKET, _PACKET_RX_RING, req)
            self._map = mmap.mmap(
                sock.fileno(),
                BLOCK_SIZE * blocks,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except OSError:  # no ring: back to TPACKET_V1 (and its 8-byte statistics)
            with contextlib.suppress(OSError):
                sock.setsockopt(_SOL_PACKET, _PACKET_RX_RING, bytes(_REQ3.size))
            with contextlib.suppress(OSError):
                sock.setsockopt(_SOL_PACKET, _PACKET_VERSION, _TPACKET_V1)
            return
        self.ring = True
        self.buffer_bytes = BLOCK_SIZE * blocks
        self._blocks = blocks
        self._block = 0  # the next block to read: the kernel hands them over in order
        self._left = 0  # packets of that block not yet copied out (0: block not started)
        self._offset = 0  # where the next of them starts in the map

    def fileno(self) -> int:
        return self._sock.fileno()

    def read(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` waiting packets as (µs since the epoch, bytes); [] when none.

        Does not block, except that with a ring, when no block is ready but the kernel is
        filling one, it waits for that block (at most about RETIRE_MS): what arrived before
        a stop is then read, not left behind."""
        if self.ring:
            batch = self._read_ring(limit)
            if not batch and self._filling():
                self._poll.poll(2 * RETIRE_MS)
                batch = self._read_ring(limit)
            return batch
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

    def _read_ring(self, limit: int) -> list[tuple[int, bytes]]:
        """Packets of the ready blocks in order, up to `limit`; each block goes back to the
        kernel once all of its packets are copied out."""
        out: list[tuple[int, bytes]] = []
        ring = self._map
        assert ring is not None
        unpack, ethernet = _PKT_HEAD.unpack_from, self.linktype == LINKTYPE_ETHERNET
        append = out.append
        while len(out) < limit:
            start = self._block * BLOCK_SIZE
            if not self._left:  # a block not started: is it ours yet?
                status, count, first = _BLOCK_HEAD.unpack_from(ring, start + 8)
                if not status & _TP_STATUS_USER:
                    break
                if not count:  # nothing in it (should not happen): give it back
                    self._release(start)
                    continue
                self._left, self._offset = count, start + first
            left, offset = self._left, self._offset
            take = min(left, limit - len(out))
            for _ in range(take):
                (nxt, sec, nsec, caplen, _, status, mac, _, _, tci, tpid) = unpack(ring, offset)
                at = offset + mac
                data = ring[at : at + min(caplen, SNAPLEN)]
                if ethernet and (status & _TP_STATUS_VLAN_VALID or tci):
                    data = _with_vlan(data, status, tci, tpid)
                append((sec * 1_000_000 + nsec // 1000, data))
                offset += nxt
            self._left, self._offset = left - take, offset
            if not self._left:
                self._release(start)
        return out

    def _release(self, start: int) -> None:
        """The block at `start` back to the kernel (its count cleared first, so a block
        the kernel has not reopened yet does not look as if it were being filled)."""
        ring = self._map
        assert ring is not None
        _BLOCK_STATUS.pack_into(ring, start + 12, 0)  # num_pkts
        _BLOCK_STATUS.pack_into(ring, start + 8, _TP_STATUS_KERNEL)  # last: the kernel's now
        self._block = (self._block + 1) % self._blocks
        self._left = 0

    def _filling(self) -> bool:
        """Whether the next block holds packets the kernel has not handed over yet."""
        assert self._map is not None
        status, count, _ = _BLOCK_HEAD.unpack_from(self._map, self._block * BLOCK_SIZE + 8)
        return not status & _TP_STATUS_USER and count > 0

    def drops(self) -> int | None:
        """Packets the kernel dropped so far, or None when it does not say."""
        try:  # struct tpacket_stats{,_v3} { tp_packets; tp_drops; ... }, reset by every read
            size = _STATS_V3.size if self.ring else 8
            stats = self._sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, size)
            _, dropped = struct.unpack_from("=II", stats)
        except OSError:
            return None
        self._dropped += dropped
        return self._dropped

    def close(self) -> None:
        ring, self._map = getattr(self, "_map", None), None
        if ring is not None:
            ring.close()
        self._sock.close()


def without_outgoing(program: BpfProgram | None) -> BpfProgram:
    """`program` (None: every packet) behind two instructions that drop outgoing packets."""
    head = (
        (_BPF_LD_W_ABS, 0, 0, _SKF_AD_PKTTYPE),  # A = the packet's type
        (_BPF_JEQ_K, 0, 1, _PACKET_OUTGOING),  # outgoing: the next, else skip it
        (_BPF_RET_K, 0, 0, 0),  # drop
    )
    rest = ((_BPF_RET_K, 0, 0, SNAPLEN),) if program is None else program.instructions
    text = "every packet" if program is None else program.text
    compiled_by = "built in" if program is None else program.compiled_by
    return BpfProgram(head + rest, text, compiled_by)


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
    return _with_vlan(data, status, tci, tpid)


def _with_vlan(data: bytes, status: int, tci: int, tpid: int) -> bytes:
    """The frame with the tag (tci, and tpid when the status says it is valid) put back."""
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
