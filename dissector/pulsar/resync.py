"""Resynchronisation: where a Pulsar frame may start again in bytes that are not one.

Input: the pending bytes of one direction while its decoder is out of sync (after an
impossible header, an undecodable command, a gap, or a mid-stream start), with the stream
offset they start at and the bytes missing from the capture so far.
Output: the next offset worth checking (`find`), and for a candidate there whether its cheap
checks pass, it is wrong, or it needs more bytes (`check`); the full decode (checksum
included) stays with the decoder.
Rules:
- A frame may start where the sizes are plausible, the command decodes with its sub-message
  present, and for payload frames the metadata decodes (the CRC32C, when present, is the
  decoder's last check).
- Resync work is linear in the input: offsets that cannot start a frame are passed over by a
  C-level search; a candidate is checked cheapest part first (command, then where its
  metadata lies and whether it decodes), each from the bytes present; and the bytes all
  candidates may decode, checksum or wait for are bounded by RESYNC_WORK_PER_BYTE times the
  bytes received (gaps excluded).
"""

from __future__ import annotations

from dissector.pulsar.sections import (
    MIN_COMMAND_SIZE,
    candidate_type,
    payload_layout,
    resync_pattern,
    sections_decode,
)
from dissector.pulsar.wire import PAYLOAD_TYPES

#: Resync work budget: all resync candidates of a stream together may decode, checksum or
#: wait for at most this many bytes per byte received up to the furthest byte they look at.
#: A frame after ordinary garbage always fits (its own checks cost at most its length); a
#: flood of candidates that pass the cheap checks and fail the checksum cannot make resync
#: quadratic (fuzzing finding 5: 5 MiB checksummed per 22-byte fake header).
RESYNC_WORK_PER_BYTE = 4


class Resync:
    """The candidate search and work budget of one direction; see the module docstring."""

    def __init__(self, max_frame_size: int, origin: int) -> None:
        """origin: the stream offset the direction's decoder started at."""
        self.max_frame_size = max_frame_size
        self._pattern = resync_pattern(max_frame_size)
        self._origin = origin
        self._work = 0  # bytes resync candidates have looked at (see RESYNC_WORK_PER_BYTE)
        self._cand = -1  # stream offset of the candidate whose reach is charged
        self._reach = 0  # stream offset up to which that candidate has been charged
        self._checked = -1  # stream offset of the candidate whose cheap checks passed

    def find(self, buf: bytes, pos: int) -> int:
        """Where in `buf` the next plausible frame header at or after `pos` starts, or -1."""
        nxt = buf.find(b"\x08", pos + 8)  # the type tag: C speed over most garbage
        m = self._pattern.search(buf, nxt - 8) if nxt >= 0 else None
        return -1 if m is None else m.start()

    def check(
        self,
        buf: bytes,
        mv: memoryview,
        pos: int,
        total: int,
        csize: int,
        base: int,
        gaps: int,
        final: bool,
    ) -> int:
        """Check the candidate frame at buf[pos] (sizes `total`, `csize`; `buf` starts at
        stream offset `base`; `gaps` bytes missing so far), cheapest part first, each from
        the bytes present; every look further ahead is charged to the work budget first.

        final: no more bytes will come, so a candidate that does not fit is wrong.
        Returns 0 when the frame is whole and its command (and metadata) decode, leaving the
        checksum to the full decode; -1 when the candidate is wrong; else the buffer length
        needed to go on.
        """
        if total > self.max_frame_size or csize < MIN_COMMAND_SIZE or csize + 4 > total:
            return -1
        n = len(buf)
        start = base + pos
        end = pos + 4 + total
        if self._checked != start:
            cend = pos + 8 + csize
            more = self._look(start, cend, n, base, gaps, final)
            if more:
                return more
            ctype = candidate_type(mv[pos + 8 : cend])
            if ctype < 0:
                return -1
            if ctype in PAYLOAD_TYPES:
                layout = payload_layout(buf, cend, end)
                if isinstance(layout, int):
                    return -1 if layout < 0 else self._look(start, layout, n, base, gaps, final)
                bstart, bend, mstart, mend = layout
                more = self._look(start, mend, n, base, gaps, final)
                if more:
                    return more
                if not sections_decode(mv, bstart, bend, mstart, mend):
                    return -1
            elif end != cend:
                return -1  # a simple command fills its frame
            self._checked = start
        return self._look(start, end, n, base, gaps, final)

    def _look(self, start: int, upto: int, n: int, base: int, gaps: int, final: bool) -> int:
        """May the candidate at stream offset `start` look at the buffer up to `upto`?

        -1 if the budget says no or those bytes will never come, 0 if they are here,
        else `upto` (wait for them).
        """
        if upto > n and final:
            return -1
        reach = base + upto
        if self._cand != start:
            self._cand = self._reach = start
        extra = reach - self._reach
        if extra > 0:
            received = reach - self._origin - gaps  # gaps earn nothing
            if self._work + extra > RESYNC_WORK_PER_BYTE * received:
                return -1
            self._work += extra
            self._reach = reach
        return upto if upto > n else 0
