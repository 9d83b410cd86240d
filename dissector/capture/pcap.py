"""Classic pcap records -> RawPacket.

Input: a `ByteWindow` positioned at the 24-byte file header.
Output: `RawPacket`s numbered from 1; a `CaptureIssue` appended to `issues` if the records
end in damage.
Rules:
- The magic gives byte order and resolution: 0xa1b2c3d4 microseconds, 0xa1b23c4d nanoseconds,
  either byte order. Timestamps become integer microseconds, rounded down.
- The link type is the low 16 bits of the header's link field (the high bits carry FCS
  information). The header's `thiszone` is ignored: writers set it to 0.
- A record cut off by the end of the file gives `capture.truncated`; a record longer than
  `MAX_RECORD_SIZE` gives `capture.corrupt_record`. Either ends the reading.
- `fast` (the compiled stage, dissector._core): walks the complete records it can take from
  a position, giving each packet as it would be parsed; this loop then takes the one record
  the walk stopped at (incomplete in the buffer, or damaged) and calls it again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar, overload

from dissector.capture._source import MAX_RECORD_SIZE, ByteWindow, CaptureIssue
from dissector.events import RawPacket

HEADER_SIZE = 24
RECORD_HEADER_SIZE = 16

#: First four file bytes -> (struct byte order, nanosecond resolution).
MAGICS: dict[bytes, tuple[str, bool]] = {
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}

_HEADERS = {order: struct.Struct(order + "4xHHiIII") for order in "<>"}
_RECORDS = {order: struct.Struct(order + "IIII") for order in "<>"}

T = TypeVar("T")
#: A compiled walk: (buf, pos, number) -> (pos, number, packets walked).
PcapWalk = Callable[[bytes, int, int], tuple[int, int, list[T]]]


class PcapHeader(NamedTuple):
    order: str  # "<" or ">"
    nanosecond: bool
    version: tuple[int, int]
    snaplen: int
    linktype: int


def parse_header(head: bytes) -> PcapHeader:
    """Decode the file header; `head` holds at least HEADER_SIZE bytes and a known magic."""
    order, nano = MAGICS[head[:4]]
    major, minor, _zone, _sigfigs, snaplen, link = _HEADERS[order].unpack_from(head)
    return PcapHeader(order, nano, (major, minor), snaplen, link & 0xFFFF)


@overload
def packets(
    window: ByteWindow, header: PcapHeader, issues: list[CaptureIssue]
) -> Iterator[RawPacket]: ...


@overload
def packets(
    window: ByteWindow, header: PcapHeader, issues: list[CaptureIssue], fast: PcapWalk[T]
) -> Iterator[RawPacket | T]: ...


def packets(
    window: ByteWindow,
    header: PcapHeader,
    issues: list[CaptureIssue],
    fast: PcapWalk[T] | None = None,
) -> Iterator[RawPacket | T]:
    """Yield the records after the file header (the window is already past it)."""
    unpack = _RECORDS[header.order].unpack_from
    frac_div = 1000 if header.nanosecond else 1
    linktype = header.linktype
    new = tuple.__new__  # 4x faster than RawPacket's keyword-aware constructor
    number = 0
    buf, pos, end = window.buf, window.pos, len(window.buf)
    while True:
        if end - pos < RECORD_HEADER_SIZE:
            window.pos = pos
            buf = b""  # the window's chunk is let go once read (see ByteWindow.fill)
            if not window.fill(RECORD_HEADER_SIZE):
                if not window.at_clean_end():
                    issues.append(window.cut_short("a record header", 16, number))
                return
            buf, pos, end = window.buf, window.pos, len(window.buf)
        if fast is not None:
            pos, number, walked = fast(buf, pos, number)
            yield from walked
            if end - pos < RECORD_HEADER_SIZE:
                continue
        sec, frac, incl_len, orig_len = unpack(buf, pos)
        if incl_len > MAX_RECORD_SIZE:
            detail = f"record length {incl_len} exceeds {MAX_RECORD_SIZE}"
            issues.append(window.corrupt(detail, number, pos))
            return
        stop = pos + RECORD_HEADER_SIZE + incl_len
        if stop > end:
            window.pos = pos
            buf = b""
            if not window.fill(RECORD_HEADER_SIZE + incl_len):
                issues.append(window.cut_short("a record", RECORD_HEADER_SIZE + incl_len, number))
                return
            buf, pos, end = window.buf, window.pos, len(window.buf)
            if fast is not None:
                continue  # the completed record is the compiled walk's as any other
            stop = pos + RECORD_HEADER_SIZE + incl_len
        number += 1
        ts = sec * 1_000_000 + frac // frac_div
        yield new(
            RawPacket, (number, ts, linktype, buf[pos + RECORD_HEADER_SIZE : stop], orig_len, 0)
        )
        pos = stop
