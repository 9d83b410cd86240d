"""EDGE: the metrics snapshots of `live --metrics` on their way to the HTTP endpoint.

Input: immutable `store.Snapshot`s, published by a dissecting `Session` at its ticks.
Output: `Latest` (one process: the newest snapshot, a reference the server's threads read),
`SnapshotPipe` (a worker of `-j N`: its snapshots written into a pipe to the parent) and
`WorkerSnapshots` (the parent: each worker's newest, read from the pipes, merged with
`store.merge` when a scraper asks).
Rules:
- Nobody waits: publishing swaps a reference; a worker's pipe is non-blocking: while one
  snapshot is still on its way the newer ones wait (only the newest is sent next), so a
  parent slow to read costs the worker nothing but freshness.
- On the pipe, each snapshot is a frame: its length (4 bytes, big-endian), then its pickle
  (parent and worker are the same program: the pickle is never from elsewhere).
- A worker that ended keeps its last snapshot in the merge: counters never go back; its
  last snapshot is written whole when it closes the pipe (`SnapshotPipe.close`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
from collections.abc import Callable

from dissector.metrics.store import Snapshot, merge

_LENGTH = struct.Struct(">I")
READ_BYTES = 1 << 20  # taken from a worker's pipe at a time


class Latest:
    """The newest snapshot of this process (`set` by the session, `get` by the server)."""

    def __init__(self, first: Snapshot) -> None:
        self._snapshot = first

    def set(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot  # one reference swapped: atomic for the readers

    def get(self) -> Snapshot:
        return self._snapshot


class SnapshotPipe:
    """A worker's end: `send(snapshot)` never blocks (module rules)."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        os.set_blocking(fd, False)
        self._pending = memoryview(b"")
        self._newest: Snapshot | None = None

    def send(self, snapshot: Snapshot) -> None:
        self._newest = snapshot
        self._flush()

    def _flush(self) -> None:
        while self._fd is not None:
            if not self._pending:
                if self._newest is None:
                    return
                data = pickle.dumps(self._newest, protocol=pickle.HIGHEST_PROTOCOL)
                self._pending, self._newest = memoryview(_LENGTH.pack(len(data)) + data), None
            try:
                written = os.write(self._fd, self._pending)
            except BlockingIOError:
                return  # the parent has not read the last one yet: the next tick goes on
            except OSError:  # the parent is gone: nobody to publish to
                self._shut()
                return
            self._pending = self._pending[written:]

    def close(self) -> None:
        """The last snapshot written whole, then the pipe closed. This write may wait: the
        parent reads the pipe until its end, which comes before the worker's report the
        parent waits for (and the parent's stop deadline bounds it); a snapshot cut short
        would lose the run's last counts (the final OTLP request of -j N)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.set_blocking(self._fd, True)
                self._flush()
        self._shut()

    def _shut(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class WorkerSnapshots:
    """The parent's side: each worker's pipe read as it becomes readable (`read(fd)`), the
    newest snapshot of each kept; `get()` merges them (the server's threads call it)."""

    def __init__(self, empty: Snapshot) -> None:
        self._empty = empty
        self._newest: dict[int, Snapshot] = {}  # worker -> snapshot; replaced whole, never changed
        self._buffers: dict[int, tuple[int, bytearray]] = {}  # fd -> worker, bytes so far

    def add(self, worker: int, fd: int) -> None:
        self._buffers[fd] = (worker, bytearray())

    @property
    def fds(self) -> list[int]:
        return list(self._buffers)

    def read(self, fd: int) -> None:
        """Whatever the worker's pipe holds; its end closes the pipe (the snapshot kept)."""
        worker, buf = self._buffers[fd]
        got = os.read(fd, READ_BYTES)
        if not got:
            del self._buffers[fd]
            os.close(fd)
            return
        buf += got
        newest = None
        while len(buf) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(buf)
            if len(buf) < _LENGTH.size + size:
                break
            newest = bytes(buf[_LENGTH.size : _LENGTH.size + size])
            del buf[: _LENGTH.size + size]
        if newest is not None:
            self._newest = {**self._newest, worker: pickle.loads(newest)}

    def get(self) -> Snapshot:
        parts = list(self._newest.values())
        return merge(parts) if parts else self._empty

    def close(self) -> None:
        for fd in self._buffers:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._buffers.clear()


Publish = Callable[[Snapshot], None]
