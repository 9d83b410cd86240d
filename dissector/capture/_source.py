"""Shared pieces of the capture readers: a buffered byte window and the issue record.

Input: a binary stream (a plain file or a gzip stream), read in large chunks.
Output: `ByteWindow`, which keeps the unread bytes of the current chunk in `buf` from `pos`,
and `CaptureIssue`, the record of the damage that stopped a reader.
Rule: a reader never raises on damaged input. A short read at the end of the stream, a gzip
stream that ends early or does not decompress, or an I/O error mid-file all end the window
(`fill` returns False) and leave their description in `error` for the reader's issue.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple, Protocol

from dissector.anomalies import AnomalyCode

#: Bytes requested from the stream per read: large enough that the per-read cost vanishes
#: next to the per-record cost, small enough to keep the reader's memory flat.
CHUNK_SIZE = 1 << 20

#: Largest record (pcap record or pcapng block) the readers accept. No link type we dissect
#: carries frames this large (Linux BIG TCP/GRO frames stay under 512 KiB); a bigger length
#: is corruption, and the bound keeps a bit flip from buffering gigabytes.
MAX_RECORD_SIZE = 16 << 20


class Stream(Protocol):
    """What the readers need of a file: a plain binary file or a `gzip.GzipFile`.

    `read1` (one underlying read) rather than `read`: when a gzip stream ends early, `read`
    would raise and drop the bytes it had already decompressed in the same call.
    """

    def read1(self, size: int = -1, /) -> bytes: ...

    def tell(self) -> int: ...

    def close(self) -> None: ...


#: The last microsecond that dates, Python's datetime and every output can hold (9999-12-31).
MAX_TS_US = 253_402_300_799_999_999


class CaptureIssue(NamedTuple):
    """Damage that ended the reading of a capture (every packet before it was yielded), or
    a record read with a correction (`capture.bad_timestamp`)."""

    code: str  # "capture.truncated", "capture.corrupt_record" or "capture.bad_timestamp"
    detail: str  # one line saying what is wrong
    packet: int  # number of the last good packet (0 if none)
    offset: int  # offset of the damaged record (in the decompressed stream for gzip files)


class ByteWindow:
    """The unread bytes of a stream: `buf[pos:]` starts at stream offset `base + pos`."""

    __slots__ = ("_held", "_held_at", "_stream", "base", "buf", "error", "pos")

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self.buf = b""
        self.pos = 0
        self.base = 0
        self.error: tuple[str, str] | None = None  # (issue code, detail) of a failed read
        # A chunk read whose bytes from _held_at on are not in the window yet (they follow it)
        self._held = b""
        self._held_at = 0

    @property
    def available(self) -> int:
        return len(self.buf) - self.pos

    def fill(self, need: int) -> bool:
        """Make at least `need` unread bytes available from `pos`; False if the stream ends.

        Chunks are read whole (CHUNK_SIZE: one read each, a ranged request for a remote file)
        and become the window themselves, uncopied. Only bytes left over (a record cut by a
        chunk's end) are joined, to just what completes the record: the rest of the chunk is
        held and becomes the window, from there, at the next fill."""
        have = len(self.buf) - self.pos
        if have >= need:
            return True
        # The bytes left over, apart: the chunk they were cut from is let go before the next
        # is read (two chunks alive at once cost the allocator fresh pages at every read).
        pieces = [(self.buf[self.pos :], 0)] if have else []
        self.buf = b""
        self.base += self.pos  # the stream offset of the first unread byte
        while have < need:
            if self._held:
                chunk, at = self._held, self._held_at
                self._held = b""
            else:
                read = self._read(max(CHUNK_SIZE, need - have))
                if not read:
                    break
                chunk, at = read, 0
            pieces.append((chunk, at))
            have += len(chunk) - at
        if len(pieces) == 1:
            self.buf, self.pos = pieces[0]
            self.base -= self.pos
            return have >= need
        parts = [chunk[at:] for chunk, at in pieces[:-1]]
        last, at = pieces[-1] if pieces else (b"", 0)
        over = max(0, have - need)  # bytes of the last chunk beyond the need: held
        cut = len(last) - over
        parts.append(last[at:cut])
        if over:
            self._held, self._held_at = last, cut
        self.buf = b"".join(parts)
        self.pos = 0
        return have >= need

    def _read(self, size: int) -> bytes:
        """One read of the stream: b"" at its end or when it fails (then `error` says why)."""
        if self.error is not None:
            return b""
        try:
            return self._stream.read1(size)
        except EOFError as exc:  # gzip: compressed stream ended before its end marker
            self.error = (AnomalyCode.CAPTURE_TRUNCATED, f"compressed stream cut short ({exc})")
        except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            self.error = (AnomalyCode.CAPTURE_CORRUPT_RECORD, f"read failed: {exc}")
        return b""

    def at_clean_end(self) -> bool:
        """True when the stream ended exactly here, without a read error."""
        return self.available == 0 and self.error is None

    def cut_short(self, what: str, need: int, packet: int) -> CaptureIssue:
        """The issue for a record that `fill(need)` could not complete."""
        offset = self.base + self.pos
        if self.error is not None:
            code, detail = self.error
            return CaptureIssue(code, f"{detail}, in {what}", packet, offset)
        return CaptureIssue(
            AnomalyCode.CAPTURE_TRUNCATED,
            f"file ends inside {what} ({self.available} of {need} bytes present)",
            packet,
            offset,
        )

    def corrupt(self, detail: str, packet: int, pos: int) -> CaptureIssue:
        """The issue for an impossible record at `buf[pos]`."""
        return CaptureIssue(AnomalyCode.CAPTURE_CORRUPT_RECORD, detail, packet, self.base + pos)


def bad_timestamp(ts: int, packet: int, offset: int) -> CaptureIssue:
    """The issue for packet `packet`, whose time `ts` (µs) is outside 1970..9999."""
    detail = f"packet {packet}: timestamp {ts} µs is outside 1970..9999; the previous one used"
    return CaptureIssue(AnomalyCode.CAPTURE_BAD_TIMESTAMP, detail, packet, offset)
