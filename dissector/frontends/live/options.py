"""The options of a live capture and the counts of its summary line.

Input: what the command line asked for (`LiveOptions`, checked when made: a bad
combination is a UsageError, one line) and what a session counted (`Counts`).
Output: `LiveOptions` (frozen), `Counts.line()` (the summary line on stderr).
Rule: the options say what is asked, never how it is done (dissector.frontends.live.session
makes what they ask).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissector.errors import UsageError
from dissector.frontends.live.capturer import DEFAULT_QUEUE
from dissector.read.options import ReaderOptions
from dissector.tables.filters import Filter
from dissector.tables.schema import TABLES

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
    findings: bool = False  # print findings as they are established (and their rows)
    jobs: int = 1  # dissecting processes, each with its share of the flows (live.fanout)
    hdr_out: str | None = None  # --hdr-out DIR: HdrHistogram files written at stop
    metrics: tuple[str, int] | None = None  # --metrics: (host, port) of the endpoint
    otlp_out: str | None = None  # --otlp-out: OTLP JSON lines of metrics, one per flush
    otlp_endpoint: str | None = None  # --otlp-endpoint: a collector's OTLP/HTTP address
    otlp_timeout: float = 10.0  # --otlp-timeout: seconds a push (and the stop) may take
    otlp_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # auth: unshown
    otlp_gzip: bool = False  # --otlp-compression gzip

    @property
    def otlp(self) -> bool:
        """Whether OpenTelemetry metrics are asked for (a file or a collector)."""
        return self.otlp_out is not None or self.otlp_endpoint is not None

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
        if self.jobs < 1:
            raise UsageError("-j must be positive")
        if self.jobs > 1 and (self.pcap is not None or self.count is not None):
            raise UsageError(
                "-w and -c count the packets of one capturing process: not with -j above 1"
            )
        if self.jobs > 1 and self.hdr_out is not None:
            raise UsageError("--hdr-out records every flow's latencies in one process: -j 1")
        if self.flush_interval <= 0 or self.buffer_bytes <= 0 or self.queue_bytes <= 0:
            raise UsageError("flush interval, buffer size and queue size must be positive")


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
