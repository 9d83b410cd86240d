"""The `outputs` level: every table in every format, the text views and the HTML report.

Input: a `random.Random`; captures as the other levels make them (damaged sample windows,
TLS sessions with their key logs, conversations full of hostile strings: fuzz.evil).
Output: `make` gives a `Case` (capture bytes, key log, what to write); `run` reads the tables
(read_tables), writes them and reads them back.
What runs, per input: every table written as JSON lines, CSV and Parquet with the project's
TableWriter; the text view of every event (FrameLines with -V and -x sometimes, secrets shown
or not) and the summary (summary.render); 1 input in REPORT_EVERY the HTML report, 1 in
EXPORT_EVERY the packets written back as pcap (-w: export.write_packets), 1 in API_EVERY
read_capture with the key log given as bytes, a Path, a list holding None. Some captures
are named with bytes that are not UTF-8 (as file systems allow).
Invariants: Parquet read back (pyarrow) equals the table; CSV read back (the csv module) has
the table's header and rows; JSON lines parse, one object per row with the table's columns;
the text view and the summary hold no control character a terminal obeys; the report shows
no tag, attribute or comment of the capture's strings (fuzz.evil.injected_markup) and makes
no warning (a library's warning reaches the user's terminal); the exported pcap opens and
holds no more packets than the capture; read_capture raises nothing but DissectorError.
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dissector.capture import open_capture
from dissector.errors import DissectorError, InputError
from dissector.events import Anomaly, Frame
from dissector.frontends.summary import render, summarize
from dissector.frontends.text import FrameLines
from dissector.read import ReaderOptions, iter_events, read_capture, read_tables
from dissector.tables.filters import Filter
from dissector.tables.output import EXTENSIONS, FORMATS, TableWriter
from fuzz import mutators as mu
from fuzz import tls_inputs as ti
from fuzz.checks import Case, Seen, require
from fuzz.evil import injected_markup, raw_controls, strings_capture
from fuzz.packets import Conn, pcap, stamp
from fuzz.seeds import Corpus
from fuzz.tls_pool import pool

CHECKS = ("formats", "text", "summary", "report", "export", "api")
REPORT_EVERY = 8
EXPORT_EVERY = 5
API_EVERY = 10


def make(rng: Random, corpus: Corpus) -> Case:
    kind = rng.random()
    keylog = None
    ops: list[str] = []
    if kind < 0.4:
        seed, donor = rng.choice(corpus.captures), rng.choice(corpus.captures)
        data, _, ops = mu.mutate_capture(rng, seed.records, donor.records, gz=seed.gz)
        ops.insert(0, seed.name)
    elif kind < 0.65:
        data, ops = strings_capture(rng), ["strings"]
    elif kind < 0.85:
        tls = rng.choice(pool())
        order = rng.choice(ti.ORDERS)
        segs = ti.segments(list(tls.wire), rng.choice((1400, 100)))
        pkts = ti.session_packets(Conn(server_port=6651), ti.interleave(segs, order, rng))
        data, keylog, ops = pcap(stamp(pkts)), tls.keylog, [f"{tls.name}:{order}"]
    else:
        seed = rng.choice(corpus.captures)
        data = mu.write_pcap(rng, mu.window(rng, seed.records), ops)[0]
        ops.insert(0, seed.name)
    settings = {
        "keylog": keylog,
        "verbose": rng.random() < 0.5,
        "hexdump": rng.random() < 0.3,
        "secrets": rng.random() < 0.3,
        "report": rng.randrange(REPORT_EVERY) == 0,
        "export": rng.randrange(EXPORT_EVERY) == 0,
        "api": rng.randrange(API_EVERY) == 0,
        "preview": rng.choice((0, 0, 16)),
        "name": rng.choice(("input.pcap",) * 6 + (os.fsdecode(b"\xff\xfe.pcap"), "in put ü.pcap")),
        # the checks run in this order: a failure stops the input, so that the failures of
        # one kind of input (text view and report of hostile strings) do not hide each other
        "order": rng.sample(CHECKS, len(CHECKS)),
    }
    return Case("outputs", len(data), ops, data, settings)


def run(case: Case, workdir: Path) -> Seen:
    s = case.settings
    for old in workdir.glob("*.pcap"):  # inputs of earlier cases under other names
        old.unlink()
    path = workdir / s["name"]
    path.write_bytes(case.data)
    keylogs: tuple[str, ...] = ()
    if s["keylog"] is not None:
        (workdir / "input.keys").write_text(s["keylog"])
        keylogs = (str(workdir / "input.keys"),)
    options = ReaderOptions(tls_keylog=keylogs, payload_preview=s["preview"], frame_bytes=True)
    seen = Seen()
    try:
        tables = read_tables(str(path), options)
    except InputError:
        seen.rejected = True
        return seen
    for check in s["order"]:
        if check == "formats":
            for name, table in tables.items():
                for fmt in FORMATS:
                    _round_trip(workdir / f"out{EXTENSIONS[fmt]}", fmt, name, table)
        elif check == "text":
            _text(str(path), options, s)
        elif check == "summary":
            text = render(summarize(tables))
            bad = raw_controls(text)
            require(not bad, "text_controls", f"summary: {bad}", "summary")
        elif check == "report" and s["report"]:
            _report(str(path), tables)
        elif check == "export" and s["export"]:
            _export(path, workdir / "export.pcap", options)
        elif check == "api" and s["api"]:
            _api(path, Path(keylogs[0]) if keylogs else workdir / "missing.keys")
    return seen


def _round_trip(out: Path, fmt: str, name: str, table: pa.Table) -> None:
    with TableWriter(fmt, str(out), table.schema) as writer:
        for batch in table.to_batches():
            writer.write(batch)
    where = f"{name}.{fmt}"
    rows = table.num_rows
    if fmt == "parquet":
        back = pq.read_table(out)
        require(back.num_rows == rows, "parquet_rows", f"{back.num_rows} != {rows}", where)
        require(back.equals(table), "parquet_differs", name, where)
    elif fmt == "csv":
        with out.open(newline="", encoding="utf-8") as f:
            lines = list(csv.reader(f))
        require(bool(lines) and lines[0] == table.column_names, "csv_header", lines[:1], where)
        require(len(lines) - 1 == rows, "csv_rows", f"{len(lines) - 1} != {rows}", where)
    else:
        with out.open(encoding="utf-8") as f:
            parsed = [json.loads(line) for line in f]
        require(len(parsed) == rows, "jsonl_rows", f"{len(parsed)} != {rows}", where)
        names = table.column_names
        require(all(list(p) == names for p in parsed), "jsonl_columns", names, where)


def _text(path: str, options: ReaderOptions, s: dict[str, Any]) -> None:
    lines = FrameLines(
        Filter(), show_secrets=s["secrets"], verbose=s["verbose"], hexdump=s["hexdump"]
    )
    for _, ev in iter_events(path, options):
        text = lines.line(ev)
        if text is None:
            continue
        bad = raw_controls(text)
        kind = "frame" if type(ev) is Frame else "anomaly" if type(ev) is Anomaly else "other"
        require(not bad, "text_controls", f"{bad}: {text[:200]!r}", f"text view {kind}")


def _report(path: str, tables: dict[str, pa.Table]) -> None:
    from dissector.frontends.report import REPORT_TABLES, Report

    report = Report([path])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in REPORT_TABLES:
            for batch in tables[name].to_batches():
                report.add(name, batch)
        page = report.html()
    said = sorted({f"{w.category.__name__}: {str(w.message)[:80]}" for w in caught})
    require(not said, "report_warning", said[:3])
    found = injected_markup(page)
    require(not found, "report_markup", found[:3])


def _export(path: Path, out: Path, options: ReaderOptions) -> None:
    from dissector.frontends.export import chosen_connections, write_packets

    chosen = chosen_connections([str(path)], options, None)
    written = write_packets(str(out), [str(path)], options, chosen)
    with open_capture(str(path)) as reader:
        total = sum(1 for _ in reader)
    with open_capture(str(out)) as reader:
        back = sum(1 for _ in reader)
        issues = [i.code for i in reader.issues]
    require(back == written <= total, "export_packets", f"{back} read, {written} written, {total}")
    require(not issues, "export_damaged", issues)


def _api(path: Path, keylog: Path) -> None:
    for given in (bytes(keylog), keylog, [None], [str(keylog)], (str(keylog),)):
        try:
            read_capture(path, tls_keylog=given, tables=["conversations"])  # type: ignore[arg-type]
        except DissectorError:
            pass
        except Exception as exc:
            require(False, "api_keylog_type", f"tls_keylog={given!r}: {type(exc).__name__}: {exc}")
