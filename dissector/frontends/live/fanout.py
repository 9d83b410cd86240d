"""EDGE: `live -j N`: N dissecting processes, each with its share of the flows.

Input: `LiveOptions` with `jobs` N > 1, and the interface to capture on.
Output: what `live` prints with one process: the text view or JSON lines of every worker,
merged line by line on stdout, one listening line, one summary line with every worker's
counts summed (packets captured, dissected, dropped by the kernel, unread); every
worker's Parquet parts in the one -o directory (`part-wK-NNNNNN.parquet`).
Rules:
- N packet sockets on the interface in one fan-out group (`capture.packet_socket`:
  PACKET_FANOUT_HASH, symmetric, so both directions of a connection reach one socket).
  Worker K, a process forked here, captures and dissects socket K's packets as `live`
  does with one process (its own capturing process, `loop.capture`), its connections
  numbered from K * WORKER_CONN_IDS + 1 so that no two workers' ids meet.
- Lines: a worker writes its output into its own pipe; only whole lines are copied to
  stdout, so lines of two workers never mix; between workers, lines come as they arrive.
- Stop: a signal here (SIGINT, SIGTERM) sends every worker one SIGTERM; workers ignore
  SIGINT (the terminal's Ctrl-C reaches the whole process group). Each stops as `live`
  does (drain the kernel, dissect what is queued within its deadline, count the rest) and
  reports its counts through a pipe. A worker silent STOP_SECONDS after the stop is killed
  and said to be (its packets are then not counted); a second signal kills every worker.
- --metrics: this process serves the one endpoint (bound before any worker is forked,
  served once they all are); each worker publishes its snapshots through a pipe of its own
  (`published`), and a scrape gets them merged (`store.merge`: the workers share the flows,
  so their counts add up).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dissector.capture.packet_socket import LINKTYPE_NAMES, PacketSocket
from dissector.errors import InputError
from dissector.frontends.live.capturer import Capturer
from dissector.frontends.live.files import check_parquet_root
from dissector.frontends.live.loop import (
    TICK,
    Stopper,
    capture,
    choose_filter,
    filter_words,
    metrics_words,
    otlp_metrics,
)
from dissector.frontends.live.options import Counts, LiveOptions
from dissector.frontends.live.published import SnapshotPipe, WorkerSnapshots
from dissector.frontends.live.session import Session

if TYPE_CHECKING:
    from dissector.frontends.otlp_metrics import OtlpMetricsOut
    from dissector.metrics.serve import MetricsServer

STOP_SECONDS = 5.0  # after the stop, the longest wait for a worker's counts
READ_BYTES = 1 << 16  # taken from a worker's pipe at a time


def run(opts: LiveOptions, out: TextIO, err: TextIO) -> int:
    """`pulsar-dissect live -j N`: 0 after a clean stop, 130 when a second signal aborted."""
    if opts.parquet is not None:
        check_parquet_root(Path(opts.parquet))
    group = os.getpid() & 0xFFFF
    workers = _Workers()
    server = _metrics_server(opts, workers)  # a port in use: nothing started yet
    otlp: OtlpMetricsOut | None = None
    sources: list[PacketSocket] = []
    try:
        for _ in range(opts.jobs):
            sources.append(
                PacketSocket(opts.interface, choose_filter(opts), opts.buffer_bytes, fanout=group)
            )
        otlp = otlp_metrics(opts, sources[0].name, err)  # its thread starts after the forks
    except BaseException:
        for src in sources:
            src.close()
        if server is not None:
            server.close()
        raise
    workers.otlp = otlp
    first = sources[0]
    kind = LINKTYPE_NAMES.get(first.linktype, str(first.linktype))
    try:
        with Stopper() as stop:  # a signal while the workers start stops them too
            workers.start(opts, sources)
            if server is not None:
                server.start()  # its threads after the forks
            err.write(f"pulsar-dissect: listening on {first.name}, link-type {kind}, ")
            err.write(filter_words(first.filter))
            err.write(f", buffer {first.buffer_bytes >> 10} KiB, {opts.jobs} processes (by flow)")
            err.write(f"{metrics_words(server)}\n")
            err.flush()
            workers.merge(stop, out)
    except KeyboardInterrupt:
        workers.kill()
        otlp = None  # aborted: no waiting for a collector
        err.write("pulsar-dissect: interrupted\n")
        return 130
    finally:
        if server is not None:
            server.close()
        if otlp is not None:
            if workers.snapshots is not None:
                otlp.keep(workers.snapshots.get())  # the workers' last snapshots merged
            otlp.close()  # the last request; waits at most --otlp-timeout
        workers.kill()
        for src in sources:
            src.close()  # the workers' (the parent's copies only)
    for line in workers.problems:
        err.write(f"pulsar-dissect: {line}\n")
    err.write(f"pulsar-dissect: {total(workers.counts).line()}\n")
    if workers.errors:
        raise InputError(workers.errors[0])
    return 0


def _metrics_server(opts: LiveOptions, workers: _Workers) -> MetricsServer | None:
    """With --metrics: the endpoint bound, serving the workers' snapshots merged (read from
    their pipes with --otlp-out / --otlp-endpoint too)."""
    if opts.metrics is None and not opts.otlp:
        return None
    from dissector.metrics.store import MetricStore

    empty = MetricStore(start_us=time.time_ns() // 1000).snapshot()
    workers.snapshots = WorkerSnapshots(empty)
    if opts.metrics is None:
        return None
    from dissector.metrics.serve import MetricsServer

    return MetricsServer(*opts.metrics, workers.snapshots.get)


def total(parts: list[Counts]) -> Counts:
    """The counts of several workers as one."""
    out = Counts(captured=0)
    for c in parts:
        out.packets += c.packets
        out.captured = (out.captured or 0) + (c.packets if c.captured is None else c.captured)
        out.skipped += c.skipped
        out.frames += c.frames
        if out.messages is not None:
            out.messages = None if c.messages is None else out.messages + c.messages
        out.conversations += c.conversations
        out.anomalies += c.anomalies
        if c.dropped is not None:
            out.dropped = (out.dropped or 0) + c.dropped
        out.unread += c.unread
        out.unread_more = out.unread_more or c.unread_more
    return out


class _Workers:
    """The forked workers, their output pipes and their reports."""

    def __init__(self) -> None:
        self.pids: dict[int, int] = {}  # worker -> pid (until reaped)
        self.outputs: dict[int, bytearray] = {}  # output pipe -> its partial line
        self.reports: dict[int, tuple[int, bytearray]] = {}  # report pipe -> worker, bytes
        self.counts: list[Counts] = []
        self.errors: list[str] = []
        self.problems: list[str] = []
        self.snapshots: WorkerSnapshots | None = None  # --metrics: the workers' pipes
        self.otlp: OtlpMetricsOut | None = None  # --otlp-*: their merge published there

    def start(self, opts: LiveOptions, sources: list[PacketSocket]) -> None:
        """Fork worker k for each socket k."""
        snapshots = self.snapshots
        for k, src in enumerate(sources):
            out_r, out_w = os.pipe()
            rep_r, rep_w = os.pipe()
            met_r, met_w = os.pipe() if snapshots is not None else (-1, -1)
            pid = os.fork()
            if pid == 0:  # worker k
                code = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the front end's to handle
                    theirs = snapshots.fds if snapshots is not None else []
                    for fd in (out_r, rep_r, met_r, *self.outputs, *self.reports, *theirs):
                        if fd >= 0:
                            os.close(fd)
                    for other in sources:
                        if other is not src:
                            other.close()
                    code = _worker(k, opts, src, out_w, rep_w, met_w)
                finally:
                    os._exit(code)
            os.close(out_w)
            os.close(rep_w)
            if snapshots is not None:
                os.close(met_w)
                snapshots.add(k, met_r)
            self.pids[k] = pid
            self.outputs[out_r] = bytearray()
            self.reports[rep_r] = (k, bytearray())

    def merge(self, stop: Stopper, out: TextIO) -> None:
        """Copy whole lines to `out` until every worker reported (or the stop's deadline)."""
        stopped: float | None = None
        while self.outputs or self.reports:
            now = time.monotonic()
            if stopped is None and stop.requested:
                stopped = now
                self._signal(signal.SIGTERM)
            if stopped is not None and now >= stopped + STOP_SECONDS:
                for k, _ in self.reports.values():
                    self.problems.append(f"worker {k} did not stop in time: not counted")
                break
            metrics = self.snapshots.fds if self.snapshots is not None else []
            fds = [*self.outputs, *self.reports, *metrics, stop.fileno()]
            ready, _, _ = select.select(fds, [], [], TICK)
            for fd in ready:
                if fd in self.outputs:
                    self._output(fd, out)
                elif fd in self.reports:
                    self._report(fd)
                elif fd in metrics and self.snapshots is not None:
                    self.snapshots.read(fd)
                    if self.otlp is not None and self.otlp.due():  # merged only then
                        self.otlp.publish(self.snapshots.get())
            stop.clear()
        out.flush()

    def _output(self, fd: int, out: TextIO) -> None:
        got = os.read(fd, READ_BYTES)
        buf = self.outputs[fd]
        if not got:  # the worker's end (a line cut short by its death is not printed)
            if buf:
                self.problems.append(f"a worker ended in the middle of a line: {len(buf)} bytes")
            del self.outputs[fd]
            os.close(fd)
            return
        buf += got
        end = buf.rfind(b"\n") + 1
        if end:
            out.write(buf[:end].decode(errors="replace"))
            out.flush()
            del buf[:end]

    def _report(self, fd: int) -> None:
        got = os.read(fd, READ_BYTES)
        k, buf = self.reports[fd]
        if got:
            buf += got
            return
        del self.reports[fd]
        os.close(fd)
        report: dict[str, Any] = (
            json.loads(buf) if buf else {"why": f"worker {k} ended without a report"}
        )
        if "counts" in report:
            self.counts.append(Counts(**report["counts"]))
        if "why" in report:
            self.errors.append(str(report["why"]))

    def _signal(self, sig: int) -> None:
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def kill(self) -> None:
        """Kill (if still running) and reap every worker."""
        if self.outputs or self.reports:
            self._signal(signal.SIGKILL)
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        self.pids.clear()
        for fd in [*self.outputs, *self.reports]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.outputs.clear()
        self.reports.clear()
        if self.snapshots is not None:
            self.snapshots.close()


def _worker(
    k: int, opts: LiveOptions, src: PacketSocket, out_fd: int, report_fd: int, metrics_fd: int
) -> int:
    """Worker k: capture and dissect socket k's packets until SIGTERM or --duration, then
    report the counts (`counts`) or why it failed (`why`) as one JSON object; with
    --metrics, its snapshots go into `metrics_fd` as it runs."""
    report: dict[str, object] = {}
    pipe = SnapshotPipe(metrics_fd) if metrics_fd >= 0 else None
    try:  # the output buffered: every write to the pipe whole
        with open(out_fd, "w", encoding="utf-8", buffering=1 << 16) as out:
            cap = Capturer(src, None, queue_bytes=opts.queue_bytes)
            publish = None if pipe is None else pipe.send
            session = Session(opts, cap, out, sys.stderr, worker=k, publish=publish)
            with Stopper() as stop:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the front end says when
                cap.start()
                try:
                    capture(session, cap, stop, opts)
                finally:
                    cap.kill()
                    session.counts.captured = cap.captured()
                    session.close()
        report["counts"] = dataclasses.asdict(session.counts)
    except InputError as exc:
        report["why"] = str(exc)
    except KeyboardInterrupt:  # a second SIGTERM
        return 130
    finally:
        if pipe is not None:
            pipe.close()
    os.write(report_fd, json.dumps(report).encode())
    os.close(report_fd)
    return 0
