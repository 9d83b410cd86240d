"""Sans-IO Pulsar frame decoder for one direction of one connection: where the frames are.

Input: the direction's byte stream in arbitrary pieces (`feed`), plus the size of any bytes
missing from the capture (`gap`), then `close`.
Output: `Frame` events (sizes, decoded BaseCommand and sub-message; for SEND/MESSAGE also
broker entry metadata, checksum status, MessageMetadata and a zero-copy payload view) and
`Anomaly` events.
Rules:
- Incomplete input is normal: a frame is decoded only once all its bytes are here.
- Faults are anomalies, never exceptions. A frame whose sizes are plausible and whose command
  decodes is emitted even when later sections are wrong (bad checksum, bad metadata). An
  impossible header that is the start of an HTTP status line says so in its detail (that
  start only: sections.http_status).
- After an impossible header, an undecodable command, a gap, or a mid-stream start, the
  decoder resynchronises (`resync.Resync`: where a frame may start again, within a work
  budget linear in the input). Skipped bytes are reported, never zero-filled.
- Every byte is accounted for: frame_bytes + skipped_bytes + gap_bytes == stream length.
- Where the compiled stage is active (dissector._core.frames_scan), runs of whole frames
  in sync are scanned in C (sizes, command, payload layout, checksum); the scan stops
  before any frame it cannot vouch for, which the code here decodes as without it.
This module buffers and locates frames (sizes, gaps, resync); its base class
`frame_events.FrameEmitter` turns each located frame into events with provenance.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final

from dissector import _core
from dissector.anomalies import AnomalyCode
from dissector.errors import UsageError
from dissector.events import Decoded, Direction, Event, FrameRun
from dissector.pulsar.frame_events import FrameEmitter, StreamStats
from dissector.pulsar.frame_runs import RUN_TYPES
from dissector.pulsar.resync import Resync
from dissector.pulsar.sections import (
    HEADER,
    MAGIC_BROKER_ENTRY,
    MAGIC_CHECKSUM,
    MIN_COMMAND_SIZE,
    Reject,
    header_problem,
    http_status,
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

#: Shortest possible frame: totalSize, commandSize, type tag and a one-byte type.
_MIN_FRAME = 10
#: Why the compiled scan stopped (frames.h PD_STOP_*) where the decoder tells them apart:
#: at a frame it leaves to Python, and with its batch full (the others: the decoder's turn).
_STOP_PYTHON: Final = 2
_STOP_FULL: Final = 3
#: frames.h PD_MAX_FRAME_LIMIT: the scan leaves a larger size limit to Python at once.
_SCAN_LIMIT: Final = 1 << 31


def plain(events: list[Decoded]) -> list[Event]:
    """The events of a decoder made without runs (FrameRun events are only made on
    request): the same list, checked."""
    for ev in events:
        if type(ev) is FrameRun:
            raise TypeError("a FrameRun from a decoder made without runs")
    return events  # type: ignore[return-value]  # checked above


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
        keep_raw: bool = False,
        runs: bool = False,
    ) -> None:
        """keep_raw: each complete frame carries its bytes in `raw` (the hex view).

        runs: where the compiled stage is active, frames of a run's types
        (dissector.pulsar.frame_runs) come as `FrameRun` events, not a `Frame` each."""
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
        self._resync = Resync(max_frame_size, offset)
        self.keep_raw = keep_raw
        # The compiled scan of whole frames (C), or None: pure Python, or switched off.
        scan = _core.frames_scan() if max_frame_size < _SCAN_LIMIT else None
        self._scan: _core.FrameScan | None = scan
        self._runs = _core.frames_block() if runs and scan is not None and not keep_raw else None

    # ----------------------------------------------------------------- public API

    def use_runs(self) -> None:
        """From now on, frames of a run's types come as `FrameRun` events (as `runs=True`
        at construction: where the compiled stage is active, without `keep_raw`)."""
        if self._runs is None and self._scan is not None and not self.keep_raw:
            self._runs = _core.frames_block()

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
    ) -> list[Decoded]:
        """Add the next bytes of the stream; return the events they complete."""
        self._check_open()
        if not data:
            return []
        chunk = data if type(data) is bytes else bytes(data)
        out: list[Decoded] = []
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

    def gap(self, length: int) -> list[Decoded]:
        """Record that `length` bytes of the stream are missing; never zero-filled."""
        self._check_open()
        if length < 0:
            raise UsageError(f"gap length must be >= 0, got {length}")
        out: list[Decoded] = []
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

    def close(self) -> list[Decoded]:
        """End of stream: report an incomplete last frame and any skipped run."""
        self._check_open()
        out: list[Decoded] = []
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

    def _parse(self, buf: bytes, out: list[Decoded], *, final: bool = False) -> None:
        """Consume whole frames from `buf` (which starts at self._base); keep the rest.

        final: no more bytes will come, so a resync candidate that does not fit is rejected.
        """
        mv = memoryview(buf)
        n = len(buf)
        pos = 0
        base = self._base
        max_size = self.max_frame_size
        frames = fbytes = 0
        wait = 8  # bytes needed from pos before parsing is worth trying again
        scan = self._scan
        runs = self._runs
        declined = -1  # where the compiled scan last stopped short: Python's turn there
        resync = self._resync
        while n - pos >= 8:
            if self._syncing:
                at = resync.find(buf, pos)
                if at < 0:
                    stop = n if final else max(pos, n - _MIN_FRAME + 1)
                    self._skip(base + pos, stop - pos)
                    pos = stop
                    wait = _MIN_FRAME
                    break
                if at > pos:
                    self._skip(base + pos, at - pos)
                    pos = at
                total, csize = HEADER.unpack_from(buf, pos)
                need = resync.check(buf, mv, pos, total, csize, base, self.stats.gap_bytes, final)
                if need > 0:
                    wait = need - pos
                    break
                if need < 0:
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
                end = pos + 4 + total
            else:
                if runs is not None and pos != declined:
                    # Compiled run scan: the frames of a run's types from here as one event
                    # (counted by `_run`); Python decodes the frame it stopped at, if any.
                    stop_at, stop, count, block = runs(buf, pos, max_size, RUN_TYPES)
                    if count:
                        out.append(self._run(block, count, pos, stop_at))
                        pos = stop_at
                    if stop != _STOP_FULL:
                        declined = pos
                    continue
                if scan is not None and pos != declined:
                    # Compiled scan: the run of frames it takes from here, then Python
                    # decodes (or waits for) the frame it stopped at, if any.
                    stop_at, stop, rows = scan(buf, pos, max_size)
                    if rows:
                        done = self._taken(mv, rows, self.keep_raw, out)
                        if done != stop_at:  # a part failed to decode: Python's frame
                            stop_at = done
                            stop = _STOP_PYTHON
                        pos = stop_at
                    if stop != _STOP_FULL:
                        declined = pos
                    continue
                total, csize = HEADER.unpack_from(buf, pos)
                end = pos + 4 + total
                if total > max_size or total < 6 or csize < MIN_COMMAND_SIZE or csize + 4 > total:
                    bad = header_problem(total, csize, max_size)
                    assert bad is not None
                    detail = bad[1]
                    status = http_status(buf, pos) if buf[pos] == 0x48 else None  # "H"
                    if status is not None:  # the bytes are an HTTP answer: say its status
                        detail = f"{detail}; an HTTP status line: {status!r}"
                    out.append(self._anomaly(bad[0], base + pos, detail))
                    self._start_sync(f"after {bad[0]} at offset {base + pos}")
                    continue
                if end > n:
                    wait = 4 + total
                    break
                try:
                    frame, problems = self._decode(buf, mv, pos, total, csize, strict=False)
                except Reject as exc:
                    out.append(
                        self._anomaly(AnomalyCode.PULSAR_COMMAND_UNDECODABLE, base + pos, str(exc))
                    )
                    self._start_sync(f"after pulsar.command_undecodable at offset {base + pos}")
                    continue
            if self.keep_raw:
                frame = frame._replace(raw=bytes(mv[pos:end]))
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
            self._keep(buf, pos, wait)

    def _start_sync(self, reason: str) -> None:
        self._syncing = True
        self._sync_reason = reason

    def _keep(self, buf: bytes, pos: int, need: int) -> None:
        """Keep buf[pos:] as pending bytes; parse again once `need` of them are here."""
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
        self._need = need
