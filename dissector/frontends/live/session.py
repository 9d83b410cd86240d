"""EDGE: the dissecting side of a live capture: packets in, printed rows and files out.

Input: `LiveOptions` (what the command line asked for), where the packets come from (a
`Link`: its name, link type and kernel drops), then packets in capture order (the
capturer's pcap records: their headers parsed by the compiled walk offline reads use, when
built), the capturer's losses and the clock (`Session.tick`).
Output: the `read` text view or JSON lines of table rows on `out`, Parquet parts and the
summary line (`Counts.line`) on `err`; anomaly rows for kernel drops and skipped packets;
with --metrics, a `store.Snapshot` of the metrics handed to `publish` at most every
PUBLISH_SECONDS (the server of `loop` or the pipe of a `fanout` worker reads it).
Rules: only what is asked for is made (Parquet gets every table, jsonl its tables, the text
view's `!` lines need messages, the metrics `MetricsFeed.TABLES`); rows wait at most one
flush interval; `close()` ends open conversations and writes the last rows. The metrics feed
sees every event, every batch of rows as they are made and every finding as it is
established (the findings' engine's listener, shared with --findings), never files read
back. The capture loop, signals and stopping are `loop`'s.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

import pyarrow as pa

from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    AppMessage,
    ConversationOpened,
    Finding,
    Frame,
    FrameRun,
    PipelineEvent,
    Segment,
)
from dissector.frontends.diagnoses import finding_line, row_line
from dissector.frontends.hdr import HDR_TABLES, HdrRecorder, prepare
from dissector.frontends.live.files import ParquetParts
from dissector.frontends.live.options import Counts, LiveOptions
from dissector.frontends.live.records import RECORD, Walk, records
from dissector.frontends.text import FrameLines
from dissector.keylog_files import KeylogFiles
from dissector.read.driver import make_pipeline
from dissector.read.options import ReaderOptions, diagnoser
from dissector.read.plan import TABLES as TABLES_FRONT
from dissector.read.plan import TEXT, plan_read
from dissector.tables.builders import TableBuilder
from dissector.tables.filters import Filter
from dissector.tables.output import json_lines as encode
from dissector.tables.schema import TABLES

if TYPE_CHECKING:
    from dissector.diagnose import Diagnoser
    from dissector.metrics.feed import MetricsFeed
    from dissector.metrics.store import MetricStore, Snapshot

WORKER_CONN_IDS = 1_000_000_000  # connection ids of each dissecting process (-j): a block
PUBLISH_SECONDS = 0.5  # metrics: a new snapshot at most this often (the loop's TICK)


class Link(Protocol):
    """What a Session needs to know of where packets come from."""

    name: str
    linktype: int

    def drops(self) -> int | None: ...


def json_lines(name: str, batch: pa.RecordBatch, rows: Filter) -> str:
    """The JSON lines of a batch of table rows, each `{"table": name, ...columns}`."""
    table = rows.table(pa.Table.from_batches([batch]))
    return "".join(encode(b, {"table": name}).decode() for b in table.to_batches())


class Session:
    """Packets in; printed lines and Parquet files out. `close()` finishes everything.

    `source` says the link type and name, and the losses so far: `drops()` (the kernel's)
    and, for the capturing process, `skipped()`."""

    def __init__(
        self,
        opts: LiveOptions,
        source: Link,
        out: TextIO,
        err: TextIO,
        *,
        worker: int = 0,
        publish: Callable[[Snapshot], None] | None = None,
    ) -> None:
        """worker: which of the `opts.jobs` dissecting processes this is: its connections
        are numbered from worker * WORKER_CONN_IDS + 1, its Parquet parts named after it.
        publish: where the metrics' snapshots go (with opts.metrics)."""
        self.opts, self.source, self.out, self.err = opts, source, out, err
        self.printed = [n for n in TABLES if opts.tables is None or n in opts.tables]
        # Only what is asked for is made: Parquet files get every table; jsonl its tables
        # (frames alone need no payload decoding); the text view's `!` lines need messages.
        made: list[str] = []
        if opts.parquet is not None:
            made = list(TABLES)
        elif opts.fmt == "jsonl":
            made = self.printed
        if opts.findings and "findings" not in made:
            made.append("findings")
        self.hdr: HdrRecorder | None = None
        if opts.hdr_out is not None:  # latencies from the timeline and journeys rows
            self.hdr = HdrRecorder()
            made = [*made, *(name for name in HDR_TABLES if name not in made)]
        self.metrics: MetricsFeed | None = None
        self._store: MetricStore | None = None
        self._publish = publish
        if opts.metrics is not None or opts.otlp:
            from dissector.metrics.feed import MetricsFeed
            from dissector.metrics.store import MetricStore

            made += [name for name in MetricsFeed.TABLES if name not in made]
            self._store = MetricStore(start_us=time.time_ns() // 1000)
            self.metrics = MetricsFeed(self._store)
        self._next_publish = time.monotonic()
        # Frames in runs (no object per frame) go to the table builder: not to the text view.
        reader = opts.reader
        plan = plan_read(reader, made, TEXT if opts.fmt == "text" else TABLES_FRONT)
        # Key log files are followed: peers append secrets as they open sessions.
        self.keylogs = KeylogFiles(reader.tls_keylog, follow=True) if reader.tls_keylog else None
        keylog = self.keylogs.keylog if self.keylogs else None
        self.pipe = make_pipeline(reader, plan, worker * WORKER_CONN_IDS + 1, keylog)
        self._walk = Walk(source.linktype)
        self.lines = FrameLines(opts.rows, show_secrets=opts.show_secrets)
        self.builder = None
        self._add: Callable[[PipelineEvent], None] | None = None
        if made:
            self.builder = TableBuilder(
                capture=f"live:{source.name}",
                tables=plan.tables,
                fields=plan.fields,
                diagnoser=self._diagnoser(reader) if plan.findings else None,
                values=plan.values,
                end_to_end=None if self.metrics is None else self.metrics.end_to_end,
            )
            self._add = self.builder.feeder()
        self.counts = Counts(messages=0 if plan.payloads else None)
        self._files = contextlib.ExitStack()  # closes every file, whatever happens
        self.parquet: ParquetParts | None = None
        if opts.parquet is not None:
            prefix = f"w{worker}-" if opts.jobs > 1 else ""
            self.parquet = ParquetParts(opts.parquet, prefix=prefix, check=opts.jobs == 1)
            self._files.callback(self.parquet.close)
        self._next_flush = time.monotonic() + opts.flush_interval
        self._packet_clock: tuple[int, int] | None = None  # (last packet's ts, read at)
        self._drops_checked = time.time_ns() // 1000  # start of the window of the next drops

    def _diagnoser(self, reader: ReaderOptions) -> Diagnoser:
        """The findings' engine, its listener telling those who asked (--findings, the
        metrics) of each finding as it is established."""
        told = self.opts.findings or self.metrics is not None
        return diagnoser(reader, self._established if told else None)

    def _established(self, found: Finding) -> None:
        """A finding just established (a threshold passed): one line now (--findings),
        counted and open in the metrics (MetricsFeed.established)."""
        if self.metrics is not None:
            self.metrics.established(found)
        if self.opts.findings:
            self.out.write(finding_line(found, "now"))
            self.out.flush()

    def packets(self, batch: list[tuple[int, bytes]]) -> None:
        """Packets as (µs since the epoch, bytes), in capture order."""
        self.records(records(batch))

    def records(self, buf: bytes) -> None:
        """Whole pcap records as the capturer hands them over (`capturer.RECORD`)."""
        if self.keylogs is not None:
            self.keylogs.poll()  # sessions of this batch find the secrets written meanwhile
        items = self._walk(buf, self.counts.packets)
        if items and self.lines.first_ts is None:
            self.lines.start(items[0].ts)  # times count from the first packet, as in read
        feed, parsed = self.pipe.feed, self.pipe.feed_parsed
        for item in items:
            self._events(parsed(item) if type(item) is Segment else feed(item))  # type: ignore[arg-type]
        self.counts.packets += len(items)
        if self.metrics is not None and items:  # captured bytes: the records less their headers
            self.metrics.packets(len(items), len(buf) - RECORD.size * len(items))
        if items:  # the packets' clock, and when it was read (for the findings' timers)
            self._packet_clock = (items[-1].ts, time.time_ns() // 1000)
        self._emit()

    def _events(self, events: list[PipelineEvent]) -> None:
        counts, add, text = self.counts, self._add, self.opts.fmt == "text"
        metric = None if self.metrics is None else self.metrics.event
        for ev in events:
            kind = type(ev)
            if kind is Frame:
                counts.frames += 1
            elif isinstance(ev, FrameRun):
                counts.frames += ev.size
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
            if add is not None:
                add(ev)
            if metric is not None:
                metric(ev)

    def _emit(self) -> None:
        """Hand the rows made so far to the Parquet writer and stdout; flush the outputs."""
        if self.builder is not None:
            made = {name: b.take() for name, b in self.builder.batches.items()}
            if self.metrics is not None:
                for name, batches in made.items():
                    if batches:
                        self.metrics.batches(name, batches)
            if self.opts.findings:
                for batch in made.get("findings", []):
                    for row in batch.to_pylist():
                        self.out.write(row_line(row))
            if self.hdr is not None:
                for name in HDR_TABLES:
                    for batch in made.get(name, []):
                        self.hdr.add(name, batch)
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
        clock = time.time_ns() // 1000
        ended = self.pipe.expire(clock)  # packets carry the kernel's clock
        if self.builder is not None and self._packet_clock is not None:
            # the findings' timers run on the packets' clock, moved on by the time since
            # the last packet (a replayed capture's times are not the wall clock's)
            last_ts, read_at = self._packet_clock
            self.builder.tick(last_ts + max(0, clock - read_at))
        if self.keylogs is not None and self.keylogs.poll():
            ended += self.pipe.retry_tls()
        if ended:
            self._events(ended)
            self._emit()
        now = time.monotonic()
        if self.metrics is not None and now >= self._next_publish:
            self._next_publish = now + PUBLISH_SECONDS
            self.publish()
        if now < self._next_flush:
            return
        self._next_flush = now + self.opts.flush_interval
        if self.parquet is not None:
            self.parquet.flush()
        self._drops()

    def publish(self) -> None:
        """The metrics as they stand (losses so far included) handed to `publish`."""
        if self.metrics is None or self._store is None:
            return
        skipped = getattr(self.source, "skipped", None)
        self.metrics.losses(
            self.source.drops(), self.counts.skipped if skipped is None else skipped()
        )
        self.metrics.flush()  # the counts of events since the last batches
        if self._publish is not None:
            self._publish(self._store.snapshot(time.time_ns() // 1000))

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
            if self.builder is not None:
                self.builder.finish()
            self._emit()
            if self.hdr is not None and self.opts.hdr_out is not None:
                self.hdr.write(prepare(self.opts.hdr_out))
                self.err.writelines(f"pulsar-dissect: {line}\n" for line in self.hdr.warnings())
            if self.metrics is not None:
                self.metrics.finish()
                self.publish()
        if self.counts.dropped is None:
            self.counts.dropped = self.source.drops()
