"""Sans-IO Pulsar frame decoder for one direction of one connection: where the frames are.

Input: the direction's byte stream in arbitrary pieces (`feed`), plus the size of any bytes
missing from the capture (`gap`), then `close`.
Output: `Frame` events (sizes, decoded BaseCommand and sub-message; for SEND/MESSAGE also
broker entry metadata, checksum status, MessageMetadata and a zero-copy payload view) and
`Anomaly` events.
Rules:
- Incomplete input is normal: a frame is decoded only once all its bytes are here.
- Faults are anomalies, never exceptions. A frame whose sizes are plausible and whose command
  decodes is emitted even when later sections are wrong (bad checksum, bad metadata).
- After an impossible header, an undecodable command, a gap, or a mid-stream start, the
  decoder resynchronises: it scans forward for an offset where the sizes are plausible, the
  command decodes with its sub-message present, and for payload frames the metadata decodes
  and the CRC32C (when present) matches. Skipped bytes are reported, never zero-filled.
- Every byte is accounted for: frame_bytes + skipped_bytes + gap_bytes == stream length.
This module buffers and locates frames (sizes, gaps, resync); its base class
`frame_events.FrameEmitter` turns each located frame into events with provenance.
"""

from __future__ import annotations

from bisect import bisect_right

from dissector.errors import UsageError
from dissector.events import Direction, Event
from dissector.pulsar.frame_events import FrameEmitter, StreamStats
from dissector.pulsar.sections import (
    HEADER,
    MAGIC_BROKER_ENTRY,
    MAGIC_CHECKSUM,
    MIN_COMMAND_SIZE,
    Reject,
    command_ok,
    header_problem,
)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "MAGIC_BROKER_ENTRY",
    "MAGIC_CHECKSUM",
    "FrameDecoder",
    "StreamStats",
]

#: Largest totalSize accepted by default: Pulsar's 5 MiB message limit plus the 10 KiB of
#: framing overhead its brokers allow on top (Commands.MESSAGE_SIZE_FRAME_PADDING).
#: It also bounds the bytes buffered while waiting for one frame.
DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024 + 10 * 1024

#: Every serializer writes BaseCommand.type (field 1, varint) first: tag byte 0x08.
_TYPE_TAG = 0x08


class FrameDecoder(FrameEmitter):
    """Decode the frames of one direction; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        conn_id: int = 0,
        direction: Direction = Direction.CLIENT_TO_BROKER,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        synced: bool = True,
        offset: int = 0,
    ) -> None:
        if max_frame_size < 8:
            raise UsageError(f"max_frame_size must be at least 8, got {max_frame_size}")
        super().__init__(conn_id, direction, offset)
        self.max_frame_size = max_frame_size
        self._pieces: list[bytes] = []  # pending bytes (joined lazily), from offset self._base
        self._pending_len = 0
        self._need = 8  # pending length needed before parsing is worth trying again
        self._syncing = not synced
        self._discard = 0  # bytes still to drop: the rest of a frame cut by a gap
        self._closed = False

    # ----------------------------------------------------------------- public API

    @property
    def offset(self) -> int:
        """Stream offset of the next byte to be fed."""
        return self._base + self._pending_len

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a frame or a skip (an incomplete frame)."""
        return self._pending_len

    @property
    def _buf(self) -> bytes:
        """The pending bytes as one object (joined once, on the rare paths that need it)."""
        if len(self._pieces) > 1:
            self._pieces = [b"".join(self._pieces)]
        return self._pieces[0] if self._pieces else b""

    def _clear_pending(self) -> None:
        self._base += self._pending_len
        self._pieces = []
        self._pending_len = 0

    def feed(
        self, data: bytes | bytearray | memoryview, *, packet: int = 0, ts: int = 0
    ) -> list[Event]:
        """Add the next bytes of the stream; return the events they complete."""
        self._check_open()
        if not data:
            return []
        chunk = data if type(data) is bytes else bytes(data)
        out: list[Event] = []
        if self._discard:
            k = min(self._discard, len(chunk))
            self._discard -= k
            self.stats.frame_bytes += k
            self._base += k
            chunk = chunk[k:]
            if not chunk:
                return out
        self._marks.append((self.offset, packet, ts))
        if self._pieces:
            self._pieces.append(chunk)
            self._pending_len += len(chunk)
            if self._pending_len < self._need:
                return out
            chunk = b"".join(self._pieces)
            self._pieces = []
            self._pending_len = 0
        self._parse(chunk, out)
        return out

    def gap(self, length: int) -> list[Event]:
        """Record that `length` bytes of the stream are missing; never zero-filled."""
        self._check_open()
        if length < 0:
            raise UsageError(f"gap length must be >= 0, got {length}")
        out: list[Event] = []
        if length == 0:
            return out
        gap_start = self.offset
        gap_end = gap_start + length
        self.stats.gap_bytes += length
        if self._discard:
            if length < self._discard:
                self._discard -= length
                self._base += length
                return out
            self._discard = 0
        elif self._pieces and not self._syncing:
            frame_end = self._cut_frame(
                self._buf, self.max_frame_size, out, "bytes missing from the capture"
            )
            if frame_end is not None and gap_end < frame_end:
                self._discard = frame_end - gap_end
                self._clear_pending()
                self._base = gap_end
                self._marks.clear()
                return out
        elif self._pieces:
            self._skip(self._base, self._pending_len)
        self._flush_skip(out)
        self._clear_pending()
        self._marks.clear()
        self._base = gap_end
        self._need = 8
        self._syncing = True
        self._sync_reason = f"{length} bytes missing at offset {gap_start}"
        return out

    def close(self) -> list[Event]:
        """End of stream: report an incomplete last frame and any skipped run."""
        self._check_open()
        out: list[Event] = []
        if self._pieces and self._syncing:
            # Candidates still waiting for bytes can now be rejected: scan on through them.
            buf = self._buf
            self._pieces = []
            self._pending_len = 0
            self._parse(buf, out, final=True)
        if self._pieces:
            if self._syncing:
                self._skip(self._base, self._pending_len)
            else:
                self._cut_frame(self._buf, self.max_frame_size, out, "stream ended")
            self._clear_pending()
        if self._discard:
            # The rest of a frame cut by a gap never arrived: nothing more to account for.
            self._discard = 0
        self._flush_skip(out)
        self._closed = True
        return out

    # ----------------------------------------------------------------- parsing

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("FrameDecoder used after close()")

    def _parse(self, buf: bytes, out: list[Event], *, final: bool = False) -> None:
        """Consume whole frames from `buf` (which starts at self._base); keep the rest.

        final: no more bytes will come, so a resync candidate that does not fit is rejected.
        """
        mv = memoryview(buf)
        n = len(buf)
        pos = 0
        base = self._base
        max_size = self.max_frame_size
        frames = fbytes = 0
        while n - pos >= 8:
            total, csize = HEADER.unpack_from(buf, pos)
            end = pos + 4 + total
            if self._syncing:
                if (
                    total > max_size
                    or csize < MIN_COMMAND_SIZE
                    or csize + 4 > total
                    or (pos + 8 < n and buf[pos + 8] != _TYPE_TAG)
                ):
                    nxt = buf.find(b"\x08", pos + 9)
                    step = max(1, (nxt - 8 if nxt >= 0 else n - 8) - pos)
                    self._skip(base + pos, step)
                    pos += step
                    continue
                if pos + 8 + csize <= n and not command_ok(mv[pos + 8 : pos + 8 + csize]):
                    self._skip(base + pos, 1)
                    pos += 1
                    continue
                if end > n:
                    if not final:
                        break
                    self._skip(base + pos, 1)
                    pos += 1
                    continue
                try:
                    frame, problems = self._decode(buf, mv, pos, total, csize, strict=True)
                except Reject:
                    self._skip(base + pos, 1)
                    pos += 1
                    continue
                self._syncing = False
                self._flush_skip(out)
            else:
                if total > max_size or total < 6 or csize < MIN_COMMAND_SIZE or csize + 4 > total:
                    bad = header_problem(total, csize, max_size)
                    assert bad is not None
                    out.append(self._anomaly(bad[0], base + pos, bad[1]))
                    self._start_sync(f"after {bad[0]} at offset {base + pos}")
                    continue
                if end > n:
                    break
                try:
                    frame, problems = self._decode(buf, mv, pos, total, csize, strict=False)
                except Reject as exc:
                    out.append(self._anomaly("pulsar.command_undecodable", base + pos, str(exc)))
                    self._start_sync(f"after pulsar.command_undecodable at offset {base + pos}")
                    continue
            out.append(frame)
            if problems:
                out.extend(problems)
            frames += 1
            fbytes += end - pos
            pos = end
        stats = self.stats
        stats.frames += frames
        stats.frame_bytes += fbytes
        if pos == n:  # the common case: the buffer ended on a frame boundary
            self._base += n
            self._pieces = []
            self._pending_len = 0
            self._need = 8
            self._marks.clear()
        else:
            self._keep(buf, pos)

    def _start_sync(self, reason: str) -> None:
        self._syncing = True
        self._sync_reason = reason

    def _keep(self, buf: bytes, pos: int) -> None:
        """Keep buf[pos:] as pending bytes and work out how many are needed next."""
        self._base += pos
        rest = buf[pos:] if pos else buf
        self._pieces = [rest] if rest else []
        self._pending_len = len(rest)
        if not rest:
            self._marks.clear()
            self._need = 8
            return
        marks = self._marks
        i = bisect_right(marks, (self._base, 1 << 62)) - 1
        if i > 0:
            del marks[:i]
        if len(rest) >= 8:
            total, csize = HEADER.unpack_from(rest, 0)
            if total > self.max_frame_size:
                self._need = 8
            elif self._syncing and 8 + csize > len(rest):
                self._need = 8 + csize  # enough to check the candidate's command
            else:
                self._need = 4 + total
        else:
            self._need = 8
