"""pcapng blocks -> RawPacket.

Input: a `ByteWindow` positioned at the first Section Header Block.
Output: `RawPacket`s numbered from 1 across all sections; a `CaptureIssue` appended to
`issues` if the blocks end in damage.
Rules:
- Each Section Header Block sets the byte order (from its byte-order magic) and starts a new
  interface list. `RawPacket.interface` counts Interface Description Blocks over the whole
  file (as Wireshark does), so interfaces of different sections stay distinct.
- Interface Description Blocks give the link type, the snap length and the timestamp rule:
  `if_tsresol` (10^-n, or 2^-n when the high bit is set; default microseconds) and
  `if_tsoffset` (seconds added). Timestamps become integer microseconds, rounded down.
- Enhanced, Simple and obsolete Packet Blocks give packets. A Simple Packet Block has no
  timestamp: it takes the previous packet's (0 if none); its captured length is the smallest
  of its original length, interface 0's snap length (0 = unlimited) and its body.
- Other block types (name resolution, statistics, secrets, custom, ...) are skipped by length.
- A block cut off by the end of the file gives `capture.truncated`; a block with an
  impossible length, mismatched trailing length, unknown interface or unsupported version
  gives `capture.corrupt_record`. Either ends the reading.
- A timestamp before 1970 or after 9999 gives `capture.bad_timestamp`; the packet keeps the
  previous packet's time.
- `fast` (the compiled stage, dissector._core): walks the Enhanced Packet Blocks it can take
  from a position; this loop takes the block it stopped at, then calls it again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple, TypeVar, overload

from dissector.capture._source import (
    MAX_RECORD_SIZE,
    MAX_TS_US,
    ByteWindow,
    CaptureIssue,
    bad_timestamp,
)
from dissector.events import RawPacket

SHB_MAGIC = b"\x0a\x0d\x0d\x0a"
#: Byte-order magic 0x1A2B3C4D as stored -> struct byte order.
BYTE_ORDERS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}

SHB, IDB, OPB, SPB, EPB = 0x0A0D0D0A, 1, 2, 3, 6
OPT_END, IF_TSRESOL, IF_TSOFFSET = 0, 9, 14
MIN_SHB_SIZE = 28  # header 8 + magic 4 + versions 4 + section length 8 + trailer 4
_TIMESTAMPED = frozenset({EPB, OPB})  # packet blocks with interface and timestamp fields
MIN_BLOCK_SIZE = {SHB: MIN_SHB_SIZE, IDB: 20, OPB: 32, SPB: 16, EPB: 32}


class _Structs:
    """The block layouts in one byte order, compiled once."""

    def __init__(self, order: str) -> None:
        self.head = struct.Struct(order + "II")  # block type, total length
        self.u32 = struct.Struct(order + "I")
        self.version = struct.Struct(order + "HH")
        self.idb = struct.Struct(order + "HxxI")  # link type, snap length
        self.epb = struct.Struct(order + "IIIII")  # interface, ts high, ts low, caplen, len
        self.opb = struct.Struct(order + "HxxIIII")  # interface, (drops), ts hi/lo, caplen, len
        self.option = struct.Struct(order + "HH")  # code, length
        self.i64 = struct.Struct(order + "q")


_STRUCTS = {order: _Structs(order) for order in "<>"}
_LITTLE = _STRUCTS["<"]


class Interface(NamedTuple):
    position: int  # position among all the file's interfaces (RawPacket.interface)
    linktype: int
    snaplen: int
    ts_mul: int  # microseconds = raw * ts_mul // ts_div + ts_offset
    ts_div: int
    ts_offset: int  # if_tsoffset, in microseconds


def start_problem(head: bytes) -> str | None:
    """Why `head` (the file's first bytes, SHB magic included) cannot start a pcapng file."""
    if len(head) < 16:
        return f"pcapng section header cut short ({len(head)} of {MIN_SHB_SIZE} bytes)"
    order = BYTE_ORDERS.get(head[8:12])
    if order is None:
        return f"pcapng byte-order magic is {head[8:12].hex(' ')}, not 1a 2b 3c 4d"
    s = _STRUCTS[order]
    length = s.head.unpack_from(head)[1]
    major, minor = s.version.unpack_from(head, 12)
    if major != 1:
        return f"unsupported pcapng version {major}.{minor}"
    if length < MIN_SHB_SIZE or length % 4 or length > MAX_RECORD_SIZE:
        return f"impossible pcapng section header length {length}"
    return None


def _timestamp_rule(resol: int) -> tuple[int, int]:
    """(multiplier, divisor) turning `if_tsresol` units into microseconds."""
    if resol & 0x80:
        return 1_000_000, 1 << (resol & 0x7F)
    if resol >= 6:
        return 1, 10 ** (resol - 6)
    return 10 ** (6 - resol), 1


def _interface(buf: bytes, pos: int, length: int, s: _Structs, index: int) -> Interface:
    """Decode the Interface Description Block at `pos`; bad options end the option list."""
    linktype, snaplen = s.idb.unpack_from(buf, pos + 8)
    mul, div, offset = 1, 1, 0
    at, stop = pos + 16, pos + length - 4
    while at + 4 <= stop:
        code, size = s.option.unpack_from(buf, at)
        value = at + 4
        if code == OPT_END or value + size > stop:
            break
        if code == IF_TSRESOL and size >= 1:
            mul, div = _timestamp_rule(buf[value])
        elif code == IF_TSOFFSET and size >= 8:
            offset = s.i64.unpack_from(buf, value)[0] * 1_000_000
        at = value + size + (-size % 4)
    return Interface(index, linktype, snaplen, mul, div, offset)


T = TypeVar("T")
#: A compiled walk: (buf, pos, little endian, interfaces, number, last_ts) ->
#: (pos, number, last_ts, packets walked).
PcapngWalk = Callable[
    [bytes, int, bool, Sequence[tuple[int, ...]], int, int], tuple[int, int, int, list[T]]
]


@overload
def packets(window: ByteWindow, issues: list[CaptureIssue]) -> Iterator[RawPacket]: ...


@overload
def packets(
    window: ByteWindow, issues: list[CaptureIssue], fast: PcapngWalk[T]
) -> Iterator[RawPacket | T]: ...


def packets(
    window: ByteWindow, issues: list[CaptureIssue], fast: PcapngWalk[T] | None = None
) -> Iterator[RawPacket | T]:
    """Yield the packets of every section, from the first Section Header Block on."""
    number = 0
    last_ts = 0
    interfaces: list[Interface] = []
    earlier = 0  # interfaces declared by previous sections
    s = _STRUCTS["<"]
    new = tuple.__new__  # 4x faster than RawPacket's keyword-aware constructor
    buf, pos, end = window.buf, window.pos, len(window.buf)
    while True:
        if end - pos < 12:
            window.pos = pos
            buf = b""  # the window's chunk is let go once read (see ByteWindow.fill)
            if not window.fill(12):
                if not window.at_clean_end():
                    issues.append(window.cut_short("a block header", 12, number))
                return
            buf, pos, end = window.buf, window.pos, len(window.buf)
        if fast is not None and interfaces:
            little = s is _LITTLE
            pos, number, last_ts, walked = fast(buf, pos, little, interfaces, number, last_ts)
            yield from walked
            if end - pos < 12:
                continue
        btype, length = s.head.unpack_from(buf, pos)
        if btype == SHB:  # a palindrome: the same in both byte orders
            order = BYTE_ORDERS.get(buf[pos + 8 : pos + 12])
            if order is None:
                detail = f"section byte-order magic is {buf[pos + 8 : pos + 12].hex(' ')}"
                issues.append(window.corrupt(detail, number, pos))
                return
            s = _STRUCTS[order]
            length = s.head.unpack_from(buf, pos)[1]
        if length < MIN_BLOCK_SIZE.get(btype, 12) or length % 4 or length > MAX_RECORD_SIZE:
            detail = f"block type {btype:#x} has length {length}"
            issues.append(window.corrupt(detail, number, pos))
            return
        if end - pos < length:
            window.pos = pos
            buf = b""
            if not window.fill(length):
                issues.append(window.cut_short(f"a block of type {btype:#x}", length, number))
                return
            buf, pos, end = window.buf, window.pos, len(window.buf)
            if fast is not None and interfaces:
                continue  # the completed block is the compiled walk's as any other
        trailer = s.u32.unpack_from(buf, pos + length - 4)[0]
        if trailer != length:
            detail = f"block type {btype:#x}: trailing length {trailer} differs from {length}"
            issues.append(window.corrupt(detail, number, pos))
            return
        if btype in _TIMESTAMPED:
            if btype == EPB:
                ifid, high, low, caplen, orig_len = s.epb.unpack_from(buf, pos + 8)
            else:
                ifid, high, low, caplen, orig_len = s.opb.unpack_from(buf, pos + 8)
            if caplen > length - 32 or ifid >= len(interfaces):
                issues.append(window.corrupt(_packet_problem(caplen, length, ifid, interfaces),
                                             number, pos))  # fmt: skip
                return
            index, linktype, _snap, mul, div, offset = interfaces[ifid]
            number += 1
            ts = ((high << 32 | low) * mul) // div + offset
            if not 0 <= ts <= MAX_TS_US:  # (if_tsoffset may make it negative)
                issues.append(bad_timestamp(ts, number, window.base + pos))
            else:
                last_ts = ts
            data = buf[pos + 28 : pos + 28 + caplen]
            yield new(RawPacket, (number, last_ts, linktype, data, orig_len, index))
        elif btype == SPB:
            if not interfaces:
                detail = "simple packet block before any interface"
                issues.append(window.corrupt(detail, number, pos))
                return
            first = interfaces[0]
            orig_len = s.u32.unpack_from(buf, pos + 8)[0]
            caplen = min(orig_len, length - 16)
            if first.snaplen:
                caplen = min(caplen, first.snaplen)
            number += 1
            data = buf[pos + 12 : pos + 12 + caplen]
            yield new(RawPacket, (number, last_ts, first.linktype, data, orig_len, first.position))
        elif btype == IDB:
            interfaces.append(_interface(buf, pos, length, s, earlier + len(interfaces)))
        elif btype == SHB:
            major, minor = s.version.unpack_from(buf, pos + 12)
            if major != 1:
                detail = f"section with unsupported pcapng version {major}.{minor}"
                issues.append(window.corrupt(detail, number, pos))
                return
            earlier += len(interfaces)
            interfaces = []
        pos += length


def _packet_problem(caplen: int, length: int, ifid: int, interfaces: list[Interface]) -> str:
    if caplen > length - 32:
        return f"captured length {caplen} exceeds its block ({length} bytes)"
    return f"packet on interface {ifid}, section declares {len(interfaces)}"
