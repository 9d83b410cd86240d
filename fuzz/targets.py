"""The fuzz levels: one input made from a Random, run through one stage, invariants checked.

Input: a `Corpus` (fuzz.seeds), a scratch folder for capture files, and per input a
`random.Random` seeded from (campaign seed, level, index).
Output: `Harness.make(level, rng)` gives a `Case` (the input and its settings);
`Harness.run(case)` runs it and returns what it saw (anomaly codes, whether the file was
rejected), or raises: any exception but `InputError` at open is a failure, and so is an
`InvariantError` (a broken invariant, named).
Levels:
- pipeline: capture bytes -> every table built as Arrow (the reader's own loop: TableBuilder
  over `iter_events`, with varied ReaderOptions) and the text view (FrameLines); some inputs
  also through `read_tables`/`stream_tables` or the command line (`read`, `summary`).
- capture: the pcap/pcapng readers alone (`open_capture` on the bytes).
- tcp: packet headers and TCP reassembly (`parse_packet`, `Reassembler`) on packet records.
- framing: the frame decoder on damaged byte streams, fed in random pieces with gaps.
- payload: payload frames (metadata, compression, batches, chunks) through the decoder, the
  message extractor and the messages table; `decompress` and `split_batch` directly.
- tls, multi, cli, outputs (issue 31) and values, journeys, diagnose (issue 42): inputs built
  rather than damaged samples; each in its own module (fuzz/level_*.py) with its invariants.
Invariants (fuzz.checks): no exception but `InputError` (and that only before any packet);
every anomaly code is registered; every string column is text (Arrow-validated UTF-8) and every time
column holds a date Python can show; for every direction of every connection frame + skipped
+ gap (+ preamble) bytes = stream bytes; TCP stream offsets are contiguous; the frame
decoder accounts for every byte and gives the same frames however the stream is split.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import sys
import time
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from random import Random
from typing import Any, Protocol

import pyarrow as pa

from dissector.anomalies import REGISTRY
from dissector.capture import open_capture
from dissector.capture._source import MAX_RECORD_SIZE, MAX_TS_US
from dissector.errors import InputError
from dissector.events import (
    Anomaly,
    AppMessage,
    ConnClosed,
    ConnOpened,
    Direction,
    Frame,
    NetIssue,
    RawPacket,
    Segment,
    StreamData,
    StreamGap,
)
from dissector.flow.tcp import Reassembler
from dissector.frontends.text import frame_text
from dissector.net.headers import parse_packet
from dissector.pulsar.batches import split_batch
from dissector.pulsar.decompression import DEFAULT_MAX_UNCOMPRESSED, decompress
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, plain
from dissector.pulsar.messages import MessageExtractor
from dissector.read import ReaderOptions, read_tables
from dissector.read.tables import stream_tables
from dissector.tables.builders import TableBuilder
from dissector.tables.schema import TABLES
from fuzz import (
    level_cli,
    level_diagnose,
    level_journeys,
    level_multi,
    level_outputs,
    level_tls,
    level_values,
)
from fuzz import mutators as mu
from fuzz.checks import (
    Case,
    InvariantError,
    Seen,
    check_conversations,
    check_tables,
    read_checked,
    require,
    table_rows,
)
from fuzz.seeds import Corpus

__all__ = [
    "BUILT_LEVELS",
    "LEVELS",
    "SAMPLE_LEVELS",
    "Case",
    "Harness",
    "InvariantError",
    "Seen",
    "check_conversations",
    "check_tables",
]

#: Levels that damage the samples (issue 14), and those that build their inputs (issue 31).
SAMPLE_LEVELS = ("pipeline", "capture", "tcp", "framing", "payload")
BUILT_LEVELS = ("tls", "multi", "cli", "outputs", "values", "journeys", "diagnose")
LEVELS = SAMPLE_LEVELS + BUILT_LEVELS


class _BuiltLevel(Protocol):
    """A built level's module (fuzz/level_*.py)."""

    def make(self, rng: Random, corpus: Corpus) -> Case: ...

    def run(self, case: Case, workdir: Path) -> Seen: ...


_BUILT: dict[str, _BuiltLevel] = {
    "tls": level_tls,
    "multi": level_multi,
    "cli": level_cli,
    "outputs": level_outputs,
    "values": level_values,
    "journeys": level_journeys,
    "diagnose": level_diagnose,
}

#: One pipeline input in this many also runs through the command line / the reader API.
CLI_EVERY = 40
API_EVERY = 25


class Harness:
    """Make and run inputs of every level; see the module docstring."""

    def __init__(self, corpus: Corpus, workdir: str | os.PathLike[str]) -> None:
        self.corpus = corpus
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ making inputs

    def make(self, level: str, rng: Random) -> Case:
        if level in _BUILT:
            return _BUILT[level].make(rng, self.corpus)
        return getattr(self, f"_make_{level}")(rng)  # type: ignore[no-any-return]

    def _seed_pair(self, rng: Random) -> tuple[Any, Any]:
        captures = self.corpus.captures
        return rng.choice(captures), rng.choice(captures)

    def _make_capture_bytes(self, rng: Random, level: str) -> Case:
        seed, donor = self._seed_pair(rng)
        data, size, ops = mu.mutate_capture(rng, seed.records, donor.records, gz=seed.gz)
        return Case(level, size, [seed.name, *ops], data)

    def _make_pipeline(self, rng: Random) -> Case:
        case = self._make_capture_bytes(rng, "pipeline")
        case.settings = _options(rng)
        roll = rng.randrange(CLI_EVERY * API_EVERY)  # API_EVERY values of it: 1 in CLI_EVERY
        if roll < API_EVERY:
            case.settings["cli"] = rng.choice(_CLI_RUNS)
        elif roll < API_EVERY + CLI_EVERY:
            case.settings["api"] = True
        return case

    def _make_capture(self, rng: Random) -> Case:
        return self._make_capture_bytes(rng, "capture")

    def _make_tcp(self, rng: Random) -> Case:
        seed, donor = self._seed_pair(rng)
        ops: list[str] = [seed.name]
        recs = mu.window(rng, seed.records)
        mu.mutate_records(rng, recs, mu.window(rng, donor.records), ops, rng.randrange(1, 5))
        settings = {
            "ports": rng.choice(((6650, 6651), (6650, 6651), (6651,), (8080,))),
            "idle": rng.choice((None, None, None, 1, 1000, 100_000)),
            "ignore": rng.random() < 0.2,
        }
        return Case("tcp", sum(len(r.data) for r in recs), ops, recs, settings)

    def _make_framing(self, rng: Random) -> Case:
        streams = self.corpus.streams
        seed, donor = rng.choice(streams), rng.choice(streams)
        data, ops = mu.mutate_stream(rng, seed.data, seed.offsets, donor.data)
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.choice((0, 1, 3, 10, 30))))
        gaps = set()
        if cuts and rng.random() < 0.25:
            gaps = {rng.randrange(len(cuts) + 1) for _ in range(rng.randrange(1, 4))}
        settings = {
            "synced": rng.random() < 0.7,
            "max_frame_size": rng.choice((DEFAULT_MAX_FRAME_SIZE,) * 6 + (8, 64, 200, 1000, 65536)),
            "cuts": cuts,
            "gaps": gaps,
            "split_check": not gaps and rng.random() < 0.3,
        }
        return Case("framing", len(data), [seed.name, *ops], data, settings)

    def _make_payload(self, rng: Random) -> Case:
        ops: list[str] = []
        run = rng.choice(self.corpus.payload_runs)
        frames = mu.mutate_payload_frames(rng, run, ops)
        data = mu.encode_payload_frames(frames)
        settings = {
            "max_uncompressed": rng.choice((DEFAULT_MAX_UNCOMPRESSED,) * 4 + (0, 100, 5000)),
            "preview": rng.choice((0, 0, 0, 16)),
            "codec": rng.randrange(6),
            "size": rng.choice((None, 0, 1, 100, 1 << 20, mu.MASK32)),
            "count": rng.choice((1, 2, 5, 0x7FFFFFFF)),
        }
        return Case("payload", len(data), ops, data, settings)

    # ------------------------------------------------------------------ running inputs

    def run(self, case: Case) -> Seen:
        if case.level in _BUILT:
            return _BUILT[case.level].run(case, self.workdir)
        return getattr(self, f"_run_{case.level}")(case)  # type: ignore[no-any-return]

    def _write(self, data: bytes) -> str:
        path = self.workdir / "input.pcap"
        path.write_bytes(data)
        return str(path)

    def _run_pipeline(self, case: Case) -> Seen:
        path = self._write(case.data)
        options = _reader_options(case.settings)
        seen = Seen()
        tables = read_checked(path, options, seen)
        start = time.perf_counter()
        if "api" in case.settings:
            _check_api(path, options, tables, seen.rejected)
        if "cli" in case.settings:
            _check_cli(path, case.settings["cli"], self.workdir, seen.rejected)
        seen.extra = time.perf_counter() - start
        return seen

    def _run_capture(self, case: Case) -> Seen:
        path = self._write(case.data)
        seen = Seen()
        try:
            reader = open_capture(path)
        except InputError:
            seen.rejected = True
            return seen
        count = total = 0
        with reader:
            for pkt in reader:
                count += 1
                total += len(pkt.data)
                require(pkt.number == count, "packet_numbers", f"{pkt.number} for {count}")
                require(0 <= pkt.ts <= MAX_TS_US, "packet_time", pkt.ts)
                require(len(pkt.data) <= MAX_RECORD_SIZE, "record_bound", len(pkt.data))
                require(pkt.orig_len >= 0, "orig_len", pkt.orig_len)
        size = _plain_size(case.data) if case.data[:2] == b"\x1f\x8b" else case.size
        require(16 * count <= size + 16, "packets_from_nothing", f"{count} in {size}")
        require(total <= size, "bytes_from_nothing", f"{total} in {size}")
        ending = [i for i in reader.issues if i.code != "capture.bad_timestamp"]
        require(len(ending) <= 1, "several_ending_issues", ending)
        for issue in reader.issues:
            require(issue.code in REGISTRY, "unregistered_code", issue.code)
            require(0 <= issue.packet <= count, "issue_packet", issue)
            seen.codes.add(issue.code)
        return seen

    def _run_tcp(self, case: Case) -> Seen:
        seen = Seen()
        settings = case.settings
        tcp = Reassembler(frozenset(settings["ports"]), idle_timeout=settings["idle"])
        stream: dict[tuple[int, Direction], int] = {}  # next offset per conn direction
        opened: set[int] = set()
        closed: set[int] = set()
        ignored: set[int] = set()
        fresh: list[int] = []  # connections opened by the latest packet
        payload = delivered = 0

        def take(events: Iterable[Any]) -> None:
            nonlocal delivered
            for ev in events:
                kind = type(ev)
                if kind is StreamData or kind is StreamGap:
                    key = (ev.conn_id, ev.direction)
                    require(ev.conn_id in opened, "data_before_open", ev.conn_id)
                    require(ev.conn_id not in ignored, "data_of_ignored", ev.conn_id)
                    require(ev.conn_id not in closed, "data_after_close", ev.conn_id)
                    at = stream.get(key, 0)
                    require(ev.offset == at, "stream_offsets", f"{key}: {ev.offset} != {at}")
                    size = len(ev.data) if kind is StreamData else ev.length
                    require(size > 0, "empty_stream_event", ev)
                    stream[key] = at + size
                    if kind is StreamData:
                        delivered += size
                elif kind is ConnOpened:
                    require(ev.conn_id not in opened, "opened_twice", ev.conn_id)
                    opened.add(ev.conn_id)
                    fresh.append(ev.conn_id)
                elif kind is ConnClosed:
                    require(ev.conn_id in opened, "close_before_open", ev.conn_id)
                    require(ev.conn_id not in closed, "closed_twice", ev.conn_id)
                    closed.add(ev.conn_id)
                else:
                    require(kind is Anomaly, "event_type", kind)
                    require(ev.code in REGISTRY, "unregistered_code", ev.code)
                    seen.codes.add(ev.code)

        for number, rec in enumerate(case.data, start=1):
            pkt = RawPacket(number, rec.ts, rec.linktype, rec.data, rec.orig_len)
            seg = parse_packet(pkt)
            if isinstance(seg, NetIssue):
                code = seg.anomaly().code
                require(code in REGISTRY, "unregistered_code", code)
                seen.codes.add(code)
                continue
            if seg is None:
                continue
            require(isinstance(seg, Segment), "segment_type", type(seg))
            payload += len(seg.payload)
            take(tcp.feed(seg))
            for conn_id in fresh:  # what the pipeline may do once it has looked
                if conn_id in closed:
                    continue
                if settings["ignore"] and conn_id % 2:  # not Pulsar
                    tcp.ignore(conn_id)
                    ignored.add(conn_id)
            fresh.clear()
        take(tcp.close())
        require(opened == closed, "left_open", opened - closed)
        require(delivered <= payload, "bytes_from_nothing", f"{delivered} > {payload}")
        return seen

    def _run_framing(self, case: Case) -> Seen:
        seen = Seen()
        data: bytes = case.data
        s = case.settings
        dec = FrameDecoder(synced=s["synced"], max_frame_size=s["max_frame_size"])
        events: list[Frame | Anomaly] = []
        bounds = [0, *s["cuts"], len(data)]
        for i in range(len(bounds) - 1):
            piece = data[bounds[i] : bounds[i + 1]]
            if i in s["gaps"]:
                events.extend(plain(dec.gap(len(piece))))
            else:
                events.extend(plain(dec.feed(piece, packet=i + 1, ts=i)))
        events.extend(plain(dec.close()))
        st = dec.stats
        require(dec.pending == 0, "pending_after_close", dec.pending)
        parts = st.frame_bytes + st.skipped_bytes + st.gap_bytes
        require(parts == len(data), "byte_accounting", f"{parts} != {len(data)} ({st})")
        end = 0
        for ev in events:
            if isinstance(ev, Frame):
                require(ev.stream_offset >= end, "frames_overlap", ev.stream_offset)
                end = ev.stream_offset + ev.wire_size
                frame_text(ev).encode("utf-8")
            else:
                require(isinstance(ev, Anomaly), "event_type", type(ev))
                require(ev.code in REGISTRY, "unregistered_code", ev.code)
                seen.codes.add(ev.code)
        if s["split_check"]:
            whole = FrameDecoder(synced=s["synced"], max_frame_size=s["max_frame_size"])
            again = plain(whole.feed(data) + whole.close())
            require(
                [_event_key(e) for e in again] == [_event_key(e) for e in events],
                "split_changes_result",
                f"{len(again)} events whole, {len(events)} split",
            )
        return seen

    def _run_payload(self, case: Case) -> Seen:
        seen = Seen()
        s = case.settings
        data: bytes = case.data
        dec = FrameDecoder(conn_id=1)
        extractor = MessageExtractor(max_uncompressed=s["max_uncompressed"], preview=s["preview"])
        builder = TableBuilder(tables=["messages", "anomalies", "frames"])
        out: list[Any] = []
        for ev in dec.feed(data) + dec.close():
            out.append(ev)
            if type(ev) is Frame and ev.metadata is not None:
                out.extend(extractor.feed(ev._replace(topic="t")))
        out.extend(extractor.close_conn(1))
        for ev in out:
            require(type(ev) in (Frame, Anomaly, AppMessage), "event_type", type(ev))
            if type(ev) is Anomaly:
                require(ev.code in REGISTRY, "unregistered_code", ev.code)
                seen.codes.add(ev.code)
            builder.add(ev)
        check_tables(builder.tables())
        # The stage's functions alone, on the payload bytes of the frames.
        limit = s["max_uncompressed"]
        for ev in out:
            if type(ev) is not Frame or ev.payload is None:
                continue
            raw = bytes(ev.payload)
            plain, problems = decompress(s["codec"], raw, s["size"], limit)
            for code, _ in problems:
                require(code in REGISTRY, "unregistered_code", code)
            if plain is not None and s["codec"] != 0:
                require(len(plain) <= max(limit, 0), "decompress_bound", len(plain))
                if s["size"] is not None and not problems:
                    require(len(plain) == s["size"], "decompress_size", len(plain))
            entries, problems = split_batch(raw, s["count"])
            require(len(entries) <= s["count"], "batch_count", len(entries))
            require(sum(len(e.payload) for e in entries) <= len(raw), "batch_bytes", len(raw))
            for code, _ in problems:
                require(code in REGISTRY, "unregistered_code", code)
        return seen


def _plain_size(data: bytes) -> int:
    """Bytes a gzip file decompresses to before it fails (a damaged deflate stream may
    decode to more bytes than went in)."""
    n = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            while chunk := f.read1(4096):
                n += len(chunk)
    except (OSError, EOFError, zlib.error):
        pass
    return n


# ---------------------------------------------------------------------- pipeline settings


def _options(rng: Random) -> dict[str, Any]:
    """Reader settings: mostly the defaults, else one or two of them changed."""
    out: dict[str, Any] = {}
    for _ in range(rng.choice((0, 0, 0, 0, 1, 1, 2))):
        what = rng.randrange(9)
        if what == 0:
            out["payload_preview"] = rng.choice((1, 16, 64))
        elif what == 1:
            out["max_uncompressed"] = rng.choice((0, 100, 10_000))
        elif what == 2:
            out["max_frame_size"] = rng.choice((8, 64, 1000, 65536))
        elif what == 3:
            out["ports"] = rng.choice(((8080,), (0, 1, 65535)))
        elif what == 4:
            out["tls_ports"] = rng.choice(((6650,), ()))
        elif what == 5:
            out["idle_timeout"] = rng.choice((0.000001, 0.001, 1.0))
        elif what == 6:
            out["shard"] = rng.choice(((0, 2), (1, 2), (0, 1)))
        elif what == 7:
            out["messages"] = False
        else:
            out["pairs"] = False
    return out


def _reader_options(settings: dict[str, Any]) -> ReaderOptions:
    kw = {k: v for k, v in settings.items() if k not in ("ports", "cli", "api")}
    if "tls_ports" in kw:
        kw["tls_ports"] = frozenset(kw["tls_ports"])
    return ReaderOptions.make(settings.get("ports", ()), **kw)


#: Command lines run on some pipeline inputs (-j 1: the campaign has its own workers).
_CLI_RUNS = (
    ("read",),
    ("read", "--table", "messages", "--format", "jsonl"),
    ("read", "--table", "frames", "--format", "csv"),
    ("read", "--table", "timeline", "--format", "jsonl"),
    ("read", "--table", "conversations", "--format", "parquet", "-o", "{dir}/out.parquet"),
    ("read", "--table", "entities", "--format", "jsonl", "-o", "{dir}/out.jsonl"),
    ("summary",),
    ("summary", "--format", "json"),
)


# ---------------------------------------------------------------------- invariants


def _check_api(
    path: str, options: ReaderOptions, tables: dict[str, pa.Table], rejected: bool
) -> None:
    """`read_tables` and `stream_tables` give the rows the reader's loop gave."""
    try:
        again = read_tables(path, options)
    except InputError:
        require(rejected, "api_rejects", path)
        return
    require(not rejected, "api_accepts", path)
    require(table_rows(again) == table_rows(tables), "api_rows", table_rows(again))
    for name, table in tables.items():  # the same input read again: the same tables
        require(again[name].equals(table), "api_differs", name, name)
    check_tables(again)
    counts: Counter[str] = Counter()

    def sink(name: str, batch: pa.RecordBatch) -> None:
        counts[name] += batch.num_rows

    stream_tables(path, options, list(TABLES), sink)
    require(dict(counts) == {k: v for k, v in table_rows(tables).items() if v}, "stream_rows")


def _check_cli(path: str, run: tuple[str, ...], workdir: Path, rejected: bool) -> None:
    """The command line on the input: exit 0 (2 when the file is unusable), no traceback."""
    from dissector.frontends.cli import main

    args = [a.replace("{dir}", str(workdir)) for a in run]
    argv = [args[0], path, "-j", "1", *args[1:]]
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    old = sys.stdout
    sys.stdout = out
    try:
        with contextlib.redirect_stderr(err):
            code = main(argv)
        out.flush()
    finally:
        sys.stdout = old
    require(
        code == (2 if rejected else 0),
        "cli_exit",
        f"{' '.join(args)}: exit {code}: {err.getvalue()}",
    )


def _event_key(ev: Frame | Anomaly) -> tuple[Any, ...]:
    if isinstance(ev, Frame):
        return ("F", ev.stream_offset, ev.total_size, ev.command_name, ev.checksum, ev.complete)
    return ("A", ev.code, ev.stream_offset, ev.length)
