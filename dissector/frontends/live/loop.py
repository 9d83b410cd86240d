"""EDGE: live capture: sniff a broker's traffic and dissect it as it happens.

Input: one network interface (a Linux packet socket, `capture.packet_socket`) and a kernel
filter: by default built in for `tcp port P or ...` on the broker ports (no libpcap), or a
`-f` expression compiled by libpcap. A capturing process of our own (`capturer`,
capture kept apart from dissection as Wireshark does) reads the kernel's ring, writes -w
and hands packets over through a pipe.
Output: as packets arrive, the `read` text view (one line per frame) or one JSON line per
table row (`{"table": NAME, ...columns}`); optionally the raw packets as pcap files rotated
like tcpdump's `-C/-G/-W`, and the tables as Parquet datasets; a summary line on stderr.
Rules:
- Packets feed the same sans-IO Pipeline as offline reading, in capture order (the dissecting
  side is `session.Session`); the pcap files hold every packet captured, so reading
  them back gives the same tables.
- Capturing never waits for dissecting: packets wait in the capturer's memory (at most
  --queue-size), not in the kernel's buffer. Every packet captured is dissected, or counted
  as skipped (the dissector fell further behind than the queue) or unread at stop, and
  kernel drops and skips become anomaly rows naming their time window: never silent.
- Loopback: each packet is kept once, as libpcap does (see `capture.packet_socket`).
- `-j N` (N > 1): `fanout` runs N captures of this kind, one per process, sharing the flows
  (the command line calls it instead of `run`).
- No wait lasts longer than TICK: Ctrl-C, SIGTERM, --duration and periodic flushes act even
  when no packet arrives. Stopping drains what the kernel holds, dissects what was queued
  for at most DISSECT_SECONDS (then counts the rest as unread), ends open conversations
  (`capture_end`), writes the last rows and closes every file; a second signal aborts.
- Memory is bounded: events are not kept, rows wait at most one flush interval (or
  PART_ROWS rows), and the pipeline forgets finished connections; a connection idle for
  longer than --idle-timeout (default 300 s, by the clock) ends with `timeout`.
- Parquet: `PATH/TABLE/part-NNNNNN.parquet`, one part per table and flush, written under a
  hidden name then renamed: every file on disk is valid, a crash loses one interval at most.
- `--metrics [HOST:]PORT`: the endpoint (`metrics.serve`) is bound before anything else
  starts (a port in use stops the command before the capture) and served once the
  capturing process is forked, on threads of its own that read the snapshot the session
  publishes at its ticks; the listening line says where. It closes after the summary.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from dissector.capture.bpf import BpfProgram, broker_port_filter
from dissector.capture.packet_socket import LINKTYPE_NAMES, ChooseFilter, PacketSocket
from dissector.capture.pcap_filter import compile_expression
from dissector.errors import InputError
from dissector.frontends.live.capturer import Capturer
from dissector.frontends.live.files import PcapFiles, check_parquet_root
from dissector.frontends.live.options import LiveOptions
from dissector.frontends.live.published import Latest
from dissector.frontends.live.session import Session

if TYPE_CHECKING:
    from dissector.frontends.live.published import Publish
    from dissector.frontends.otlp_metrics import OtlpMetricsOut
    from dissector.metrics.serve import MetricsServer
    from dissector.metrics.store import Snapshot

TICK = 0.5  # seconds: longest wait before signals, time limits and flushes are looked at
READ_BYTES = 256 << 10  # packets taken from the capturer in one go before output is flushed
DISSECT_SECONDS = 1.5  # after a stop, dissecting what is queued takes at most this
COUNT_SECONDS = 0.5  # then counting (not dissecting) what is still queued, at most this


# --------------------------------------------------------------------------- the source


class Source(Protocol):
    """Where packets come from (a socket, or a fake one in tests)."""

    name: str
    linktype: int
    filter: BpfProgram | None  # what the kernel applies, None: nothing

    def fileno(self) -> int: ...

    def read(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to `limit` waiting packets as (µs since the epoch, bytes); [] when none."""
        ...

    def drops(self) -> int | None:
        """Packets the kernel dropped so far, or None when the platform does not say."""
        ...

    def close(self) -> None: ...


def choose_filter(opts: LiveOptions) -> ChooseFilter:
    """The kernel filter: built in for the broker ports (no libpcap), libpcap's for -f EXPR,
    none for -f ''."""

    def choose(linktype: int, interface: str) -> BpfProgram | None:
        if opts.bpf is None:
            try:
                return broker_port_filter(opts.reader.broker_ports, linktype)
            except ValueError as exc:
                raise InputError(f"{interface}: {exc}; give -f EXPR instead") from None
        if not opts.bpf.strip():
            return None
        return compile_expression(opts.bpf, interface, linktype)

    return choose


def filter_words(program: BpfProgram | None) -> str:
    """How the listening line names the filter in force."""
    if program is None:
        return "no filter (every packet)"
    return f"filter {program.text!r} ({program.compiled_by})"


def metrics_server(opts: LiveOptions) -> tuple[MetricsServer | None, Latest | None]:
    """With --metrics: the endpoint bound (not yet serving: `start()` it after any fork),
    serving what is `set` on the Latest; (None, None) without."""
    if opts.metrics is None:
        return None, None
    from dissector.metrics.serve import MetricsServer
    from dissector.metrics.store import MetricStore

    latest = Latest(MetricStore(start_us=time.time_ns() // 1000).snapshot())
    return MetricsServer(*opts.metrics, latest.get), latest


def otlp_metrics(opts: LiveOptions, interface: str, err: TextIO) -> OtlpMetricsOut | None:
    """With --otlp-out / --otlp-endpoint: where the metrics go, a request per flush interval
    (the file opened now: one that cannot be written stops the command before the capture)."""
    if not opts.otlp:
        return None
    import socket

    from dissector.frontends.otlp_metrics import OtlpMetricsOut
    from dissector.metrics.otlp import resource_attributes

    return OtlpMetricsOut(
        resource_attributes(interface=interface, host=socket.gethostname()),
        err,
        path=opts.otlp_out,
        endpoint=opts.otlp_endpoint,
        timeout=opts.otlp_timeout,
        interval=opts.flush_interval,
        headers=dict(opts.otlp_headers),
        gzip=opts.otlp_gzip,
    )


def publishers(*hooks: Publish | None) -> Publish | None:
    """One hook calling each given (None when none is)."""
    kept = [hook for hook in hooks if hook is not None]
    if len(kept) < 2:
        return kept[0] if kept else None

    def publish(snapshot: Snapshot) -> None:
        for hook in kept:
            hook(snapshot)

    return publish


def metrics_words(server: MetricsServer | None) -> str:
    """How the listening line says where the metrics are served ("" without)."""
    return "" if server is None else f", metrics on {server.url}"


# --------------------------------------------------------------------------- one run


class Stopper:
    """SIGINT and SIGTERM ask for a clean stop (and wake `select`); a second one aborts."""

    def __init__(self) -> None:
        self.requested = False
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
        self._saved: dict[int, Any] = {}
        self._saved_fd = -1

    def __enter__(self) -> Stopper:
        if threading.current_thread() is threading.main_thread():
            self._saved_fd = signal.set_wakeup_fd(self._write)
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def fileno(self) -> int:
        return self._read

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._read, 512)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        if self._saved:
            signal.set_wakeup_fd(self._saved_fd)
        os.close(self._read)
        os.close(self._write)


def capture(session: Session, cap: Capturer, stop: Stopper, opts: LiveOptions) -> None:
    """Dissect what the capturer hands over until a signal or --duration (then it drains the
    kernel and hands the rest over) or until it ends by itself (--count). After a stop,
    dissecting lasts at most DISSECT_SECONDS; what is still queued then is counted."""
    deadline = None if opts.duration is None else time.monotonic() + opts.duration
    stopped: float | None = None  # when the stop was asked
    fds = [cap.fileno(), stop.fileno()]
    while not cap.eof:
        now = time.monotonic()
        if stopped is None and (stop.requested or (deadline is not None and now >= deadline)):
            cap.stop()
            stopped = now
        if stopped is not None and now >= stopped + DISSECT_SECONDS:
            break
        wait = TICK if deadline is None or stopped is not None else min(TICK, deadline - now)
        ready, _, _ = select.select(fds, [], [], max(wait, 0))
        if fds[0] in ready:
            records = cap.read_records(READ_BYTES)
            if records:
                session.records(records)
        stop.clear()
        session.tick()
    counts = session.counts
    if not cap.eof:  # the deadline passed with packets still queued: say how many
        cap.abandon()
        counts.unread, counts.unread_more = cap.count_rest(time.monotonic() + COUNT_SECONDS)
        if counts.unread_more:
            cap.kill()
    cap.finish()
    unread, more = cap.unread()
    counts.unread += unread
    counts.unread_more = counts.unread_more or more


def run(opts: LiveOptions, out: TextIO, err: TextIO, source: Source | None = None) -> int:
    """`pulsar-dissect live`: 0 after a clean stop, 130 when a second signal aborted it."""
    if opts.parquet is not None:
        check_parquet_root(Path(opts.parquet))  # before the capture starts, not after
    if opts.hdr_out is not None:
        from dissector.frontends.hdr import prepare

        prepare(opts.hdr_out)  # likewise
    server, latest = metrics_server(opts)  # a port in use: nothing started yet
    try:
        src: Source = source or PacketSocket(opts.interface, choose_filter(opts), opts.buffer_bytes)
    except BaseException:
        if server is not None:
            server.close()
        raise
    cap: Capturer | None = None
    pcap: PcapFiles | None = None
    otlp: OtlpMetricsOut | None = None
    try:
        if opts.pcap is not None:  # opened here: a path that cannot be written fails now
            pcap = PcapFiles(
                opts.pcap,
                src.linktype,
                rotate_bytes=opts.rotate_bytes,
                rotate_seconds=opts.rotate_seconds,
                max_files=opts.max_files,
            )
        otlp = otlp_metrics(opts, src.name, err)  # its thread starts after the fork
        cap = Capturer(src, pcap, count=opts.count, queue_bytes=opts.queue_bytes)
        publish = publishers(
            None if latest is None else latest.set, None if otlp is None else otlp.publish
        )
        session = Session(opts, cap, out, err, publish=publish)  # opens the output files
        kind = LINKTYPE_NAMES.get(src.linktype, str(src.linktype))
        buffer = getattr(src, "buffer_bytes", 0) >> 10
        with Stopper() as stop:
            cap.start()
            if server is not None:
                server.start()  # its threads after the fork: the capturer has none
            err.write(f"pulsar-dissect: listening on {src.name}, link-type {kind}, ")
            err.write(filter_words(src.filter))
            err.write(f", buffer {buffer} KiB" if buffer else "")
            err.write(f"{metrics_words(server)}\n")
            err.flush()
            try:
                capture(session, cap, stop, opts)
            finally:
                cap.kill()  # only if still running: after an error or a second signal
                session.counts.captured = cap.captured()
                session.close()
                err.write(f"pulsar-dissect: {session.counts.line()}\n")
    except KeyboardInterrupt:
        otlp = None  # aborted: no waiting for a collector (the push thread dies with us)
        err.write("pulsar-dissect: interrupted\n")
        return 130
    finally:
        if server is not None:
            server.close()
        if otlp is not None:
            otlp.close()  # the last request; waits at most --otlp-timeout
        if cap is None or not cap.started:  # else the capturer's (closed at its start)
            src.close()
            if pcap is not None:
                pcap.close()
    return 0
