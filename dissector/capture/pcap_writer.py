"""Capture files out: the one writer of the files `read -w` and `live -w` make.

Input: a binary file's `write`; the link type once, then packets (time in microseconds since
the epoch, the captured bytes, the length on the wire).
Output: the 24-byte file header (`write_header`), then a 16-byte record header and the bytes
per packet (`write_packet`); each returns the bytes it wrote.
Rule: the format tcpdump writes by default and every reader opens (dissector.capture.pcap
reads it back): little-endian, microsecond resolution (magic 0xa1b2c3d4), version 2.4,
thiszone and sigfigs 0, snaplen SNAPLEN (what our live capture keeps of a packet, as
tcpdump). A record is written whole, header then bytes, in two writes.
pcapng (draft-ietf-opsawg-pcapng), for packets of several link types (`read -w`): one
section header (`write_section`), an interface per link type (`write_interface`, default
microsecond resolution, no options) before its first packet, then enhanced packet blocks
(`write_enhanced`), padded to 4 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from dissector.capture.bpf import SNAPLEN

MAGIC = 0xA1B2C3D4  # microseconds, in the writer's (here: little-endian) byte order
VERSION = (2, 4)
_HEADER = struct.Struct("<IHHiIII")  # magic, version major, minor, thiszone, sigfigs, snaplen, link
_RECORD = struct.Struct("<IIII")  # seconds, microseconds, captured length, wire length

Write = Callable[[bytes], object]


def write_header(write: Write, linktype: int) -> int:
    """The file header for packets of `linktype`; its size."""
    write(_HEADER.pack(MAGIC, *VERSION, 0, 0, SNAPLEN, linktype))
    return _HEADER.size


def write_packet(write: Write, ts: int, data: bytes, orig_len: int) -> int:
    """One packet record: `ts` µs since the epoch, `data` as captured, `orig_len` on the
    wire; the bytes written."""
    write(_RECORD.pack(ts // 1_000_000, ts % 1_000_000, len(data), orig_len))
    write(data)
    return _RECORD.size + len(data)


# pcapng: the section header (byte-order magic, version 1.0, section length unknown), an
# interface (link type, reserved, snap length) and the enhanced packet block's fixed fields.
_SHB = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
_IDB = struct.Struct("<IIHHII")
_EPB = struct.Struct("<IIIIIII")
_LENGTH = struct.Struct("<I")


def write_section(write: Write) -> int:
    """A pcapng section header; its size."""
    write(_SHB)
    return len(_SHB)


def write_interface(write: Write, linktype: int) -> int:
    """A pcapng interface of `linktype` (the next interface number); its size."""
    write(_IDB.pack(1, _IDB.size, linktype, 0, SNAPLEN, _IDB.size))
    return _IDB.size


def write_enhanced(write: Write, interface: int, ts: int, data: bytes, orig_len: int) -> int:
    """One pcapng enhanced packet block on `interface`: `ts` µs since the epoch; its size."""
    pad = -len(data) % 4
    size = _EPB.size + len(data) + pad + _LENGTH.size
    write(_EPB.pack(6, size, interface, ts >> 32, ts & 0xFFFFFFFF, len(data), orig_len))
    write(data + b"\0" * pad + _LENGTH.pack(size))
    return size
