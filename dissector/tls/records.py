"""Split one direction of a TLS connection into records; resynchronise after missing bytes.

Input: the direction's TCP byte stream in arbitrary pieces (`feed`), the size of bytes
missing from the capture (`gap`), then `close`.
Output: `Record`s (content type, version, fragment, stream offset, packet and time of the
packet that completed it) and `Lost` runs: stream bytes that belong to no whole record
(a record cut by a gap, bytes skipped to resync, a record cut by the end of the stream),
each with the reason.
Rules:
- Incomplete input is normal: a record is emitted once its header and fragment are here.
- A header is plausible when its type is 20-24, its version 0x0300-0x0304 and its length
  at most MAX_FRAGMENT. An implausible header, a gap or a mid-stream start makes the reader
  scan forward for a plausible header; a candidate found by scanning is emitted only when
  the caller's `check` accepts it (e.g. it decrypts) or, when `check` cannot say, when the
  bytes after it start another plausible header (or the stream ends with it). Rejected offsets are
  skipped, never zero-filled.
- Every byte is accounted for: record bytes + lost bytes == stream length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

#: Largest fragment a record may carry: 2^14 plaintext + 2048 expansion (RFC 5246 6.2.3).
MAX_FRAGMENT = (1 << 14) + 2048
HEADER_LEN = 5


class Record(NamedTuple):
    ctype: int  # content type: 20 change_cipher_spec, 21 alert, 22 handshake, 23 app data
    version: int  # legacy record version
    fragment: bytes
    offset: int  # stream offset of the record header
    packet: int  # packet that completed the record
    ts: int
    resynced: bool = False  # found by scanning after lost bytes


class Lost(NamedTuple):
    offset: int
    length: int
    reason: str  # "gap" (missing from the capture), "cut" (one whole record, of which
    # bytes are missing), "skipped" (not a record), "truncated" (the stream ended in it)
    packet: int
    ts: int
    ctype: int = 0  # "cut": the record's content type


#: check(record) -> whether a record found by scanning is real; None: cannot say (then the
#: header after it decides).
Check = Callable[[Record], bool | None]


def plausible(buf: bytes | bytearray, at: int) -> bool:
    """Whether buf[at:at+5] is a plausible record header."""
    return (
        20 <= buf[at] <= 24
        and buf[at + 1] == 3
        and buf[at + 2] <= 4
        and (buf[at + 3] << 8 | buf[at + 4]) <= MAX_FRAGMENT
    )


class RecordReader:
    """Records of one direction; see the module docstring."""

    __slots__ = ("_base", "_buf", "_check", "_discard", "_skipped", "_syncing", "packet", "ts")

    def __init__(self, *, synced: bool = True, offset: int = 0, check: Check | None = None):
        self._buf = bytearray()
        self._base = offset  # stream offset of _buf[0]
        self._syncing = not synced
        self._check = check
        self._skipped: Lost | None = None  # the run of skipped bytes not reported yet
        self._discard = 0  # bytes still to drop: the rest of a record cut by a gap
        self.packet = 0
        self.ts = 0

    @property
    def offset(self) -> int:
        """Stream offset of the next byte to be fed."""
        return self._base + len(self._buf) + self._discard

    def feed(self, data: bytes, packet: int = 0, ts: int = 0) -> list[Record | Lost]:
        self.packet, self.ts = packet, ts
        if self._discard:
            k = min(self._discard, len(data))
            self._discard -= k
            self._base += k
            data = data[k:]
        self._buf += data
        return self._parse(final=False)

    def gap(self, length: int) -> list[Record | Lost]:
        """`length` bytes are missing at the current offset. A record whose header is here
        is lost whole ("cut") and the next one is where its length says; otherwise what
        was pending is lost and the reader resyncs."""
        out: list[Record | Lost] = []
        self._flush_skipped(out)
        buf = self._buf
        if self._discard:  # still inside a cut record
            k = min(self._discard, length)
            self._discard -= k
            self._base += k
            length -= k
            if not length:
                return out
        elif buf and not self._syncing and len(buf) >= HEADER_LEN and plausible(buf, 0):
            size = HEADER_LEN + (buf[3] << 8 | buf[4])
            out.append(Lost(self._base, size, "cut", self.packet, self.ts, buf[0]))
            end = self._base + size
            gap_end = self.offset + length
            buf.clear()
            if gap_end <= end:
                self._discard = end - gap_end
                self._base = gap_end
                return out
            self._base = end
            length = gap_end - end
        if buf:
            out.append(self._lost(len(buf), "gap"))
        out.append(Lost(self._base, length, "gap", self.packet, self.ts))
        self._base += length
        self._syncing = True
        return out

    def close(self) -> list[Record | Lost]:
        return self._parse(final=True)

    def _lost(self, n: int, reason: str) -> Lost:
        lost = Lost(self._base, n, reason, self.packet, self.ts)
        del self._buf[:n]
        self._base += n
        return lost

    def _parse(self, final: bool) -> list[Record | Lost]:
        out: list[Record | Lost] = []
        buf = self._buf
        at = 0
        while True:
            if self._syncing:
                found, i = self._scan(buf, at, final)
                if i > at:
                    self._skip(self._base + at, i - at)
                    at = i
                if not found:  # more bytes needed to decide at i (or none left)
                    break
                self._flush_skipped(out)
                self._syncing = False
                record = self._record(buf, at, resynced=True)
                assert record is not None
                out.append(record)
                at += HEADER_LEN + len(record.fragment)
                continue
            if len(buf) - at < HEADER_LEN:
                break
            if not plausible(buf, at):
                self._syncing = True
                continue
            record = self._record(buf, at)
            if record is None:
                break
            out.append(record)
            at += HEADER_LEN + len(record.fragment)
        del buf[:at]
        self._base += at
        if final:
            if buf and self._syncing:
                self._skip(self._base, len(buf))
                self._base += len(buf)
                buf.clear()
            self._flush_skipped(out)
            if buf:
                out.append(self._lost(len(buf), "truncated"))
        return out

    def _skip(self, offset: int, length: int) -> None:
        run = self._skipped
        if run is None:
            self._skipped = Lost(offset, length, "skipped", self.packet, self.ts)
        else:
            self._skipped = run._replace(length=run.length + length)

    def _flush_skipped(self, out: list[Record | Lost]) -> None:
        if self._skipped is not None:
            out.append(self._skipped)
            self._skipped = None

    def _record(self, buf: bytearray, at: int, resynced: bool = False) -> Record | None:
        length = buf[at + 3] << 8 | buf[at + 4]
        end = at + HEADER_LEN + length
        if end > len(buf):
            return None
        return Record(
            buf[at],
            buf[at + 1] << 8 | buf[at + 2],
            bytes(buf[at + HEADER_LEN : end]),
            self._base + at,
            self.packet,
            self.ts,
            resynced,
        )

    def _scan(self, buf: bytearray, at: int, final: bool) -> tuple[bool, int]:
        """(True, i): an accepted record starts at i; (False, i): nothing before i can start
        one, and whether one starts at i is not known yet (more bytes needed)."""
        end = len(buf)
        for i in range(at, end - HEADER_LEN + 1):
            if not plausible(buf, i):
                continue
            record = self._record(buf, i, resynced=True)
            if record is None:
                if final:
                    continue
                return False, i  # a candidate waiting for its bytes
            nxt = i + HEADER_LEN + len(record.fragment)
            verdict = None if self._check is None else self._check(record)
            if verdict is not None:
                if verdict:
                    return True, i
            elif end - nxt >= HEADER_LEN:
                if plausible(buf, nxt):
                    return True, i
            elif final:
                if nxt == end:
                    return True, i
            else:
                return False, i  # accepted if the next header is plausible: wait for it
        return False, end if final else max(at, end - HEADER_LEN + 1)
