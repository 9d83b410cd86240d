"""EDGE: live capture: sniff a broker's traffic and dissect it as it happens.

Input: one network interface (a Linux packet socket, `capture.packet_socket`) and a kernel
filter: by default built in for `tcp port P or ...` on the broker ports (no libpcap), or a
`-f` expression compiled by libpcap. A capturing process of our own (`live_capturer`,
capture kept apart from dissection as Wireshark does) reads the kernel's ring, writes -w
and hands packets over through a pipe.
Output: as packets arrive, the `read` text view (one line per frame) or one JSON line per
table row (`{"table": NAME, ...columns}`); optionally the raw packets as pcap files rotated
like tcpdump's `-C/-G/-W`, and the tables as Parquet datasets; a summary line on stderr.
Rules:
- Packets feed the same sans-IO Pipeline as offline reading, in capture order; the pcap
  files hold every packet captured, so reading them back gives the same tables.
- Capturing never waits for dissecting: packets wait in the capturer's memory (at most
  --queue-size), not in the kernel's buffer. Every packet captured is dissected, or counted
  as skipped (the dissector fell further behind than the queue) or unread at stop, and
  kernel drops and skips become anomaly rows naming their time window: never silent.
- Loopback: each packet is kept once, as libpcap does (see `capture.packet_socket`).
- No wait lasts longer than TICK: Ctrl-C, SIGTERM, --duration and periodic flushes act even
  when no packet arrives. Stopping drains what the kernel holds, dissects what was queued
  for at most DISSECT_SECONDS (then counts the rest as unread), ends open conversations
  (`capture_end`), writes the last rows and closes every file; a second signal aborts.
- Memory is bounded: events are not kept, rows wait at most one flush interval (or
  PART_ROWS rows), and the pipeline forgets finished connections; a connection idle for
  longer than --idle-timeout (default 300 s, by the clock) ends with `timeout`.
- Parquet: `PATH/TABLE/part-NNNNNN.parquet`, one part per table and flush, written under a
  hidden name then renamed: every file on disk is valid, a crash loses one interval at most.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import select
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO

import pyarrow as pa

from dissector.anomalies import AnomalyCode
from dissector.capture.bpf import BpfProgram, broker_port_filter
from dissector.capture.packet_socket import LINKTYPE_NAMES, ChooseFilter, PacketSocket
from dissector.capture.pcap_filter import compile_expression
from dissector.errors import InputError, UsageError
from dissector.events import (
    Anomaly,
    AppMessage,
    ConversationOpened,
    Frame,
    PipelineEvent,
    RawPacket,
)
from dissector.frontends.live_capturer import DEFAULT_QUEUE, Capturer
from dissector.frontends.live_files import ParquetParts, PcapFiles, check_parquet_root
from dissector.frontends.text import FrameLines
from dissector.keylog_files import KeylogFiles
from dissector.read.driver import make_pipeline
from dissector.read.options import ReaderOptions
from dissector.tables.builders import TableBuilder
from dissector.tables.filters import Filter
from dissector.tables.output import json_lines as encode
from dissector.tables.schema import TABLES, needs_pairs, needs_payloads

TICK = 0.5  # seconds: longest wait before signals, time limits and flushes are looked at
READ_BYTES = 256 << 10  # packets taken from the capturer in one go before output is flushed
DISSECT_SECONDS = 1.5  # after a stop, dissecting what is queued takes at most this
COUNT_SECONDS = 0.5  # then counting (not dissecting) what is still queued, at most this
DEFAULT_BUFFER = 64 << 20  # kernel receive buffer: loopback bursts of 64 KiB segments


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveOptions:
    interface: str | None = None  # None: the default route's
    bpf: str | None = None  # None: built in for the broker ports; "": no filter
    reader: ReaderOptions = field(default_factory=ReaderOptions)
    fmt: str = "text"  # text | jsonl
    tables: tuple[str, ...] | None = None  # jsonl: tables printed (None: all)
    rows: Filter = field(default_factory=Filter)  # what is printed (files get everything)
    show_secrets: bool = False
    pcap: str | None = None  # -w
    rotate_bytes: int | None = None  # -C, in bytes
    rotate_seconds: float | None = None  # -G
    max_files: int | None = None  # -W
    parquet: str | None = None  # -o: a directory of Parquet datasets
    flush_interval: float = 5.0
    count: int | None = None
    duration: float | None = None
    buffer_bytes: int = DEFAULT_BUFFER
    queue_bytes: int = DEFAULT_QUEUE  # packets waiting for the dissector, at most

    def __post_init__(self) -> None:
        if self.fmt not in ("text", "jsonl"):
            raise UsageError(f"format must be text or jsonl, not {self.fmt!r}")
        if self.tables is not None and (self.fmt != "jsonl" or set(self.tables) - set(TABLES)):
            raise UsageError(f"--table takes --format jsonl and one of {', '.join(TABLES)}")
        if self.pcap is None and (self.rotate_bytes or self.rotate_seconds or self.max_files):
            raise UsageError("-C, -G and -W rotate the files written with -w PATH: give -w")
        if self.max_files is not None and not (self.rotate_bytes or self.rotate_seconds):
            raise UsageError("-W limits the number of rotated files: give -C or -G too")
        for name in ("rotate_bytes", "rotate_seconds", "max_files", "count", "duration"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise UsageError(f"{name.replace('_', ' ')} must be positive")
        if self.flush_interval <= 0 or self.buffer_bytes <= 0 or self.queue_bytes <= 0:
            raise UsageError("flush interval, buffer size and queue size must be positive")


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


class Link(Protocol):
    """What a Session needs to know of where packets come from."""

    name: str
    linktype: int

    def drops(self) -> int | None: ...


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


# --------------------------------------------------------------------------- one run


def json_lines(name: str, batch: pa.RecordBatch, rows: Filter) -> str:
    """The JSON lines of a batch of table rows, each `{"table": name, ...columns}`."""
    table = rows.table(pa.Table.from_batches([batch]))
    return "".join(encode(b, {"table": name}).decode() for b in table.to_batches())


def _n(count: int, one: str, many: str = "") -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


@dataclass(slots=True)
class Counts:
    packets: int = 0  # dissected
    captured: int | None = None  # by the capturer (None: not known, as many as dissected)
    skipped: int = 0  # captured while the dissector was too far behind: not dissected
    frames: int = 0
    messages: int | None = 0  # None: payloads not decoded (the tables asked need none)
    conversations: int = 0
    anomalies: int = 0
    dropped: int | None = None  # None: the platform does not say
    unread: int = 0  # still queued at stop: counted (and written by -w), not dissected
    unread_more: bool = False  # and more still, when counting ran out of time

    def line(self) -> str:
        captured = self.packets if self.captured is None else self.captured
        parts = [
            _n(captured, "packet") + " captured",
            _n(self.frames, "frame"),
            *([] if self.messages is None else [_n(self.messages, "message")]),
            _n(self.conversations, "conversation"),
            _n(self.anomalies, "anomaly", "anomalies"),
        ]
        dropped = "n/a" if self.dropped is None else self.dropped
        line = ", ".join(parts) + f", {dropped} dropped by the kernel"
        if self.unread:
            more = "at least " if self.unread_more else ""
            line += f", {more}{_n(self.unread, 'packet')} still queued at stop (not dissected)"
        if self.skipped:
            line += f", {_n(self.skipped, 'packet')} skipped (dissection fell behind)"
        return line


class Session:
    """Packets in; printed lines and Parquet files out. `close()` finishes everything.

    `source` says the link type and name, and the losses so far: `drops()` (the kernel's)
    and, for the capturing process, `skipped()`."""

    def __init__(self, opts: LiveOptions, source: Link, out: TextIO, err: TextIO) -> None:
        self.opts, self.source, self.out, self.err = opts, source, out, err
        self.printed = [n for n in TABLES if opts.tables is None or n in opts.tables]
        # Only what is asked for is made: Parquet files get every table; jsonl its tables
        # (frames alone need no payload decoding); the text view's `!` lines need messages.
        made: list[str] = []
        if opts.parquet is not None:
            made = list(TABLES)
        elif opts.fmt == "jsonl":
            made = self.printed
        decode = opts.fmt == "text" or needs_payloads(made)
        reader = replace(opts.reader, messages=decode, pairs=needs_pairs(made))
        # Key log files are followed: peers append secrets as they open sessions.
        self.keylogs = KeylogFiles(reader.tls_keylog, follow=True) if reader.tls_keylog else None
        self.pipe = make_pipeline(reader, keylog=self.keylogs.keylog if self.keylogs else None)
        self.lines = FrameLines(opts.rows, show_secrets=opts.show_secrets)
        self.builder = None
        if made:
            self.builder = TableBuilder(
                capture=f"live:{source.name}", tables=made, fields=opts.reader.fields
            )
        self.counts = Counts(messages=0 if decode else None)
        self._files = contextlib.ExitStack()  # closes every file, whatever happens
        self.parquet: ParquetParts | None = None
        if opts.parquet is not None:
            self.parquet = ParquetParts(opts.parquet)
            self._files.callback(self.parquet.close)
        self._next_flush = time.monotonic() + opts.flush_interval
        self._drops_checked = time.time_ns() // 1000  # start of the window of the next drops

    def packets(self, batch: list[tuple[int, bytes]]) -> None:
        linktype, feed, counts = self.source.linktype, self.pipe.feed, self.counts
        if self.keylogs is not None:
            self.keylogs.poll()  # sessions of this batch find the secrets written meanwhile
        if batch and self.lines.first_ts is None:
            self.lines.start(batch[0][0])  # times count from the first packet, as in read
        for ts, data in batch:
            counts.packets += 1
            self._events(feed(RawPacket(counts.packets, ts, linktype, data, len(data))))
        self._emit()

    def _events(self, events: list[PipelineEvent]) -> None:
        counts, builder, text = self.counts, self.builder, self.opts.fmt == "text"
        for ev in events:
            kind = type(ev)
            if kind is Frame:
                counts.frames += 1
            elif kind is AppMessage and counts.messages is not None:
                counts.messages += 1
            elif kind is Anomaly:
                counts.anomalies += 1
            elif kind is ConversationOpened:
                counts.conversations += 1
            if text:
                line = self.lines.line(ev)
                if line is not None:
                    self.out.write(line)
            if builder is not None:
                builder.add(ev)

    def _emit(self) -> None:
        """Hand the rows made so far to the Parquet writer and stdout; flush the outputs."""
        if self.builder is not None:
            made = {name: b.take() for name, b in self.builder.batches.items()}
            if self.parquet is not None:  # files first: a closed stdout must not cost rows
                for name, batches in made.items():
                    self.parquet.add(name, batches)
            if self.opts.fmt == "jsonl":
                for name in self.printed:
                    for batch in made[name]:
                        self.out.write(json_lines(name, batch, self.opts.rows))
        self.out.flush()

    def tick(self) -> None:
        """Periodic work: idle connections ended, Parquet parts, kernel drop warnings."""
        ended = self.pipe.expire(time.time_ns() // 1000)  # packets carry the kernel's clock
        if self.keylogs is not None and self.keylogs.poll():
            ended += self.pipe.retry_tls()
        if ended:
            self._events(ended)
            self._emit()
        now = time.monotonic()
        if now < self._next_flush:
            return
        self._next_flush = now + self.opts.flush_interval
        if self.parquet is not None:
            self.parquet.flush()
        self._drops()

    def _drops(self) -> None:
        """Packets lost since the last look, each kind a warning on stderr and an anomaly row
        (conn_id 0) naming the time window, so the tables show where data is missing: those
        the kernel dropped, and those captured (kept by -w) but skipped by dissection."""
        now = time.time_ns() // 1000
        dropped, before = self.source.drops(), self.counts.dropped or 0
        if dropped is not None and dropped > before:
            self._loss(
                AnomalyCode.CAPTURE_KERNEL_DROPS, dropped - before, "dropped by the kernel", now
            )
        if dropped is not None:
            self.counts.dropped = dropped
        skipped = getattr(self.source, "skipped", None)
        if skipped is not None and skipped() > self.counts.skipped:
            more, self.counts.skipped = skipped() - self.counts.skipped, skipped()
            self._loss(AnomalyCode.CAPTURE_NOT_DISSECTED, more, "captured but not dissected", now)
        self._drops_checked = now

    def _loss(self, code: str, count: int, what: str, now: int) -> None:
        start = dt.datetime.fromtimestamp(self._drops_checked / 1e6, dt.UTC)
        end = dt.datetime.fromtimestamp(now / 1e6, dt.UTC)
        hint = "raise -B" if code == AnomalyCode.CAPTURE_KERNEL_DROPS else "raise --queue-size"
        detail = (
            f"{count} packets {what} between {start.isoformat()} and {end.isoformat()} ({hint})"
        )
        self.err.write(f"pulsar-dissect: {detail}\n")
        self.err.flush()
        anomaly = Anomaly.of(
            code,
            conn_id=0,
            direction=None,
            stream_offset=None,
            detail=detail,
            length=count,
            packet=self.counts.packets,
            ts=now,
        )
        self._events([anomaly])
        self._emit()

    def close(self) -> None:
        with self._files:
            self._drops()  # the last window's drops are rows too
            self._events(self.pipe.close())
            self._emit()
        if self.counts.dropped is None:
            self.counts.dropped = self.source.drops()


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
            batch = cap.read(READ_BYTES)
            if batch:
                session.packets(batch)
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
    src: Source = source or PacketSocket(opts.interface, choose_filter(opts), opts.buffer_bytes)
    cap: Capturer | None = None
    pcap: PcapFiles | None = None
    try:
        if opts.pcap is not None:  # opened here: a path that cannot be written fails now
            pcap = PcapFiles(
                opts.pcap,
                src.linktype,
                rotate_bytes=opts.rotate_bytes,
                rotate_seconds=opts.rotate_seconds,
                max_files=opts.max_files,
            )
        cap = Capturer(src, pcap, count=opts.count, queue_bytes=opts.queue_bytes)
        session = Session(opts, cap, out, err)  # opens the output files
        kind = LINKTYPE_NAMES.get(src.linktype, str(src.linktype))
        buffer = getattr(src, "buffer_bytes", 0) >> 10
        err.write(f"pulsar-dissect: listening on {src.name}, link-type {kind}, ")
        err.write(filter_words(src.filter))
        err.write(f", buffer {buffer} KiB\n" if buffer else "\n")
        err.flush()
        with Stopper() as stop:
            cap.start()
            try:
                capture(session, cap, stop, opts)
            finally:
                cap.kill()  # only if still running: after an error or a second signal
                session.counts.captured = cap.captured()
                session.close()
                err.write(f"pulsar-dissect: {session.counts.line()}\n")
    except KeyboardInterrupt:
        err.write("pulsar-dissect: interrupted\n")
        return 130
    finally:
        if cap is None or not cap.started:  # else the capturer's (closed at its start)
            src.close()
            if pcap is not None:
                pcap.close()
    return 0
