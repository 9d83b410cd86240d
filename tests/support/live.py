"""`pulsar-dissect live` in tests: whether this process may capture, the command as a
subprocess, and a fake packet source for runs that need no privilege.

Input: the platform and this process's privileges; the command's arguments; packets.
Output: `capture_denied()` (why not, or None) and `require_capture()`, which skips a test
where capturing is impossible, except in CI (CI=true), where it fails: the live tests must
run there; `Live` (the sniffer as a subprocess, once listening; it requires capture) and
`live_argv`; `FakeSource` (packets from a list, readable through a pipe like a socket).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest

from dissector.capture.bpf import BpfProgram


def capture_denied() -> str | None:
    """Why this process cannot capture packets, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "live capture needs Linux"
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except PermissionError:
        return "capturing needs root or CAP_NET_RAW"
    return None


def require_capture() -> None:
    why = capture_denied()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, but {why}: the live tests must run in CI")
    pytest.skip(why)


def live_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "dissector.frontends.cli", "live", *args]


class Live:
    """`pulsar-dissect live ARGS` as a subprocess, started once it is listening.

    Standard output lines are kept with the time they arrived; stderr is kept whole.
    """

    def __init__(self, *args: str, timeout: float = 15.0, prefix: tuple[str, ...] = ()) -> None:
        require_capture()
        self.proc = subprocess.Popen(
            [*prefix, *live_argv(*args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: list[tuple[float, str]] = []
        self.err: list[str] = []
        self._printed = threading.Condition()  # notified at each line of output (an event)
        self._threads = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, False), daemon=True),
        ]
        for t in self._threads:
            t.start()

        def listening() -> bool:
            return any("listening on" in line for line in self.err)

        with self._printed:  # stderr's lines and its end (the process gone) wake this
            self._printed.wait_for(lambda: listening() or self.proc.poll() is not None, timeout)
        if not listening():
            self.stop()
            pytest.fail(f"live did not start listening: {self.stderr}")

    def _pump(self, stream: Any, out: bool) -> None:
        for line in stream:
            with self._printed:
                if out:
                    self.lines.append((time.time(), line))
                else:
                    self.err.append(line)
                self._printed.notify_all()
        with self._printed:  # the stream's end is an event too
            self._printed.notify_all()

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for _, line in self.lines]

    def wait_for(self, text: str, timeout: float = 10.0) -> None:
        self.wait_until(lambda: any(text in line for _, line in self.lines), f"{text!r}", timeout)

    def wait_until(self, done: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
        """Wait until `done()` holds, checked at each line printed (no polling); `timeout`
        bounds a hang, not the machine's speed."""
        with self._printed:
            if not self._printed.wait_for(done, timeout=timeout):
                raise AssertionError(f"{what} never printed: {self.stderr}")

    def stop(self, sig: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        for t in self._threads:
            t.join(timeout=5)
        return rc


class FakeSource:
    """Packets from a list, readable through a pipe like a socket."""

    name = "fake0"
    filter: BpfProgram | None = None

    def __init__(self, pkts: list[tuple[int, bytes]], linktype: int) -> None:
        self.pending = deque(pkts)
        self.linktype = linktype
        self._read, self._write = os.pipe()
        if pkts:
            os.write(self._write, b"x")

    def fileno(self) -> int:
        return self._read

    def read(self, limit: int) -> list[tuple[int, bytes]]:
        out = [self.pending.popleft() for _ in range(min(limit, len(self.pending)))]
        if not self.pending and out:
            os.read(self._read, 1)
        return out

    def drops(self) -> int | None:
        return None

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
