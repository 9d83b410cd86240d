"""EDGE: the capturing process of `live` (capture apart from dissection, as Wireshark does).

Input: a packet source (the kernel's ring), the -w pcap files, --count.
Output: the packets, in capture order, through a pipe to the dissecting process as pcap
records (`records`: the dissecting side walks them with the compiled record walk offline
reads use); every packet also in the -w files; counters in shared memory (packets
captured, kernel drops, packets skipped and packets left unread).
Rules:
- This process only reads the kernel's ring, writes -w and queues packets in its own
  memory, so it keeps up with the kernel even when dissection cannot: a packet waits
  here (at most `queue_bytes`), not in the kernel's buffer where it would be dropped.
  Past that budget a packet is written to -w but not queued: counted as skipped.
- Every packet captured is accounted for: dissected, skipped, or unread at stop; the
  dissector reports the counts (never silent).
- Stop (the parent's `s`): the kernel's queue is drained for at most DRAIN_SECONDS (then
  what is still queued there is counted as unread for COUNT_SECONDS, written to -w), the
  queue is handed over, then EOF. Abandon (the parent's `a`, when its stop deadline
  passed): the chunks not yet handed over are counted as unread and the process ends.
- Signals are the parent's business: this process ignores SIGINT/SIGTERM and ends when the
  parent's control pipe closes. An error ends it with one line for the parent to show.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections import deque
from multiprocessing.sharedctypes import RawArray
from typing import Protocol

from dissector.errors import InputError
from dissector.frontends.live.records import RECORD, records, split_records, whole

CHUNK_BYTES = 256 << 10  # packets are handed over in chunks of about this size
PIPE_BYTES = 1 << 20  # the pipe's kernel buffer (F_SETPIPE_SZ), when allowed
DEFAULT_QUEUE = 1 << 30  # bytes of packets waiting for the dissector, at most
TICK = 0.1  # seconds: the longest wait before the control pipe and counters are looked at
READ_BATCH = 1024
DRAIN_SECONDS = 1.0
COUNT_SECONDS = 0.5
_F_SETPIPE_SZ = 1031

# the shared counters, written by the capturer only
CAPTURED, DROPPED, SKIPPED, UNREAD, UNREAD_MORE = range(5)


class PacketSource(Protocol):
    name: str
    linktype: int

    def fileno(self) -> int: ...
    def read(self, limit: int) -> list[tuple[int, bytes]]: ...
    def drops(self) -> int | None: ...
    def close(self) -> None: ...


class PacketWriter(Protocol):
    def write(self, ts: int, data: bytes, orig_len: int) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class Capturer:
    """The parent's handle on the capturing process: `start()` forks it; `read()` gives the
    packets it handed over; `stop()`, `abandon()` and `finish()` end it."""

    def __init__(
        self,
        source: PacketSource,
        pcap: PacketWriter | None = None,
        *,
        count: int | None = None,
        queue_bytes: int = DEFAULT_QUEUE,
    ) -> None:
        self.name, self.linktype = source.name, source.linktype
        self.filter = getattr(source, "filter", None)
        self.buffer_bytes = getattr(source, "buffer_bytes", 0)
        self._source, self._pcap, self._count = source, pcap, count
        self._queue_bytes = queue_bytes
        self._counters = RawArray("q", 5)
        self._counters[DROPPED] = -1
        self._buf = bytearray()
        self.eof = False
        self.started = False
        self.pid = 0
        self._data = self._ctl = self._err = -1

    # ------------------------------------------------------------------ the parent's side

    def start(self) -> None:
        data_r, data_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        err_r, err_w = os.pipe()
        with contextlib.suppress(OSError):  # a larger pipe: fewer wake-ups (best effort)
            import fcntl

            fcntl.fcntl(data_w, _F_SETPIPE_SZ, PIPE_BYTES)
        if self._pcap is not None:
            self._pcap.flush()  # nothing buffered is written twice
        pid = os.fork()
        if pid == 0:  # the capturer
            code = 1
            try:
                for fd in (data_r, ctl_w, err_r):
                    os.close(fd)
                code = self._child(data_w, ctl_r, err_w)
            finally:
                os._exit(code)
        self.pid, self.started = pid, True
        for fd in (data_w, ctl_r, err_w):
            os.close(fd)
        self._data, self._ctl, self._err = data_r, ctl_w, err_r
        os.set_blocking(data_r, False)
        self._source.close()  # the child's now (the parent's copy only)
        if self._pcap is not None:
            self._pcap.close()  # flushed before the fork: closing writes nothing

    def fileno(self) -> int:
        return self._data

    def read(self, limit: int = 1 << 20) -> list[tuple[int, bytes]]:
        """The whole packets that arrived (up to about `limit` bytes); [] when none yet."""
        return split_records(self.read_records(limit))

    def read_records(self, limit: int = 1 << 20) -> bytes:
        """The whole pcap records that arrived (up to about `limit` bytes); b"" when none."""
        try:
            got = os.read(self._data, limit)
        except BlockingIOError:
            return b""
        if not got:
            self.eof = True
            return b""
        buf = self._buf
        buf += got
        pos = whole(buf)
        taken = bytes(buf[:pos])
        del buf[:pos]
        return taken

    def count_rest(self, until: float) -> tuple[int, bool]:
        """Read to EOF counting (not dissecting) packets: (packets, whether time ran out)."""
        counted = 0
        while not self.eof:
            if time.monotonic() >= until:
                return counted, True
            select.select([self._data], [], [], 0.05)
            counted += len(self.read())
        return counted, False

    def stop(self) -> None:
        """Stop capturing: drain the kernel, hand the queue over, then EOF."""
        self._say(b"s")

    def abandon(self) -> None:
        """Count what is not handed over yet as unread and end."""
        self._say(b"a")

    def _say(self, word: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self._ctl, word)

    def finish(self) -> None:
        """Wait for the process; its error (one line) becomes an InputError."""
        if not self.pid:
            return
        with contextlib.suppress(OSError):
            os.close(self._ctl)
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        message = b""
        with contextlib.suppress(OSError):
            message = os.read(self._err, 4096)
        for fd in (self._data, self._err):
            with contextlib.suppress(OSError):
                os.close(fd)
        if os.waitstatus_to_exitcode(status) != 0:
            text = message.decode(errors="replace").strip() or "the capturing process failed"
            raise InputError(text)

    def kill(self) -> None:
        if self.pid:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0)
            self.pid = 0

    # the counters
    def drops(self) -> int | None:
        value = self._counters[DROPPED]
        return None if value < 0 else int(value)

    def captured(self) -> int:
        return int(self._counters[CAPTURED])

    def skipped(self) -> int:
        return int(self._counters[SKIPPED])

    def unread(self) -> tuple[int, bool]:
        return int(self._counters[UNREAD]), bool(self._counters[UNREAD_MORE])

    # ------------------------------------------------------------------ the child's side

    def _child(self, out: int, ctl: int, err: int) -> int:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        try:
            _Loop(self, out, ctl).run()
        except (InputError, OSError) as exc:
            text = str(exc) if isinstance(exc, InputError) else _os_error(exc, self._pcap)
            with contextlib.suppress(OSError):
                os.write(err, text.encode()[:4000])
            return 1
        finally:
            if self._pcap is not None:
                with contextlib.suppress(OSError):
                    self._pcap.close()
            with contextlib.suppress(OSError):
                os.close(out)
        return 0


def _os_error(exc: OSError, pcap: PacketWriter | None) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    what = "writing the capture file" if pcap is not None else "capturing"
    return f"{where}{what} failed: {exc.strerror or exc}"


class _Loop:
    """The capturer's loop: ring -> -w and queue -> pipe."""

    def __init__(self, cap: Capturer, out: int, ctl: int) -> None:
        self.cap, self.out, self.ctl = cap, out, ctl
        self.src, self.pcap, self.counters = cap._source, cap._pcap, cap._counters
        self.left = cap._count
        self.chunks: deque[tuple[bytes, int]] = deque()  # (records, packets)
        self.queued = 0  # bytes in `chunks`
        self.sent = 0  # bytes of the first chunk already in the pipe
        self.stopping = self.abandoning = False
        os.set_blocking(out, False)

    def run(self) -> None:
        src_fd, next_stats = self.src.fileno(), 0.0
        while not self.stopping and self.left != 0:
            readers = [self.ctl, src_fd]
            writers = [self.out] if self.chunks else []
            ready, writable, _ = select.select(readers, writers, [], TICK)
            if self.ctl in ready:
                self._control()
            if src_fd in ready:
                self._take(self.src.read(self._limit()))
            if writable:
                self._send()
            now = time.monotonic()
            if now >= next_stats:
                self._stats()
                next_stats = now + TICK
        self._drain()
        self._stats()
        self._hand_over()

    def _limit(self) -> int:
        return READ_BATCH if self.left is None else min(READ_BATCH, self.left)

    def _control(self) -> None:
        word = os.read(self.ctl, 64)
        if not word or b"a" in word:  # the parent is gone, or gives up waiting
            self.stopping = self.abandoning = True
        elif b"s" in word:
            self.stopping = True

    def _take(self, batch: list[tuple[int, bytes]]) -> None:
        if not batch:
            return
        counters, pcap = self.counters, self.pcap
        counters[CAPTURED] += len(batch)
        if self.left is not None:
            self.left -= len(batch)
        if pcap is not None:
            for ts, data in batch:
                pcap.write(ts, data, len(data))
            pcap.flush()
        if self.queued >= self.cap._queue_bytes:
            counters[SKIPPED] += len(batch)  # in -w, not dissected: the dissector is behind
            return
        first, size = 0, 0
        for i, (_, data) in enumerate(batch, 1):
            size += RECORD.size + len(data)
            if size >= CHUNK_BYTES:
                self._queue(records(batch[first:i]), i - first)
                first, size = i, 0
        if first < len(batch):
            self._queue(records(batch[first:]), len(batch) - first)

    def _queue(self, chunk: bytes, packets: int) -> None:
        self.chunks.append((chunk, packets))
        self.queued += len(chunk)

    def _send(self) -> None:
        """Whatever the pipe takes now, without blocking."""
        while self.chunks:
            chunk, _ = self.chunks[0]
            try:
                n = os.write(self.out, memoryview(chunk)[self.sent :])
            except BlockingIOError:
                return
            self.sent += n
            if self.sent < len(chunk):
                return
            self.chunks.popleft()
            self.queued -= len(chunk)
            self.sent = 0

    def _stats(self) -> None:
        dropped = self.src.drops()
        if dropped is not None:
            self.counters[DROPPED] = dropped

    def _drain(self) -> None:
        """What the kernel holds, for at most DRAIN_SECONDS; then count the rest."""
        if self.abandoning or self.left == 0:
            return
        until = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < until:
            batch = self.src.read(READ_BATCH)
            if not batch:
                return
            self._take(batch)
        until = time.monotonic() + COUNT_SECONDS
        counters, pcap = self.counters, self.pcap
        while time.monotonic() < until:
            batch = self.src.read(READ_BATCH)
            if not batch:
                return
            counters[CAPTURED] += len(batch)
            counters[UNREAD] += len(batch)
            if pcap is not None:
                for ts, data in batch:
                    pcap.write(ts, data, len(data))
        counters[UNREAD_MORE] = 1

    def _hand_over(self) -> None:
        """The queue into the pipe (waiting for the parent to read), unless abandoned."""
        while self.chunks and not self.abandoning:
            ready, writable, _ = select.select([self.ctl], [self.out], [], TICK)
            if self.ctl in ready:
                self._control()
            if writable:
                self._send()
        if self.sent:  # a chunk half in the pipe: finish it, the parent is counting
            os.set_blocking(self.out, True)
            chunk, _ = self.chunks.popleft()
            view = memoryview(chunk)[self.sent :]
            while view:
                view = view[os.write(self.out, view) :]
        self.counters[UNREAD] += sum(packets for _, packets in self.chunks)
