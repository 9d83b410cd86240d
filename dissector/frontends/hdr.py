"""EDGE: HdrHistogram percentile distributions (`.hgrm` files, as pulsar-perf writes them), one
per latency kind, for `summary --hdr-out DIR` and `live --hdr-out DIR`.

Input: timeline and journeys record batches (as a read streams them or live makes them:
`HdrRecorder.add`), or one kind's latencies in microseconds (`write_hgrm`).
Output: DIR/KIND.hgrm for each kind that has a latency (`KINDS`): `request-COMMAND` per
request command but SEND (its answered requests, as `summary`'s latency table), `publish`
(SEND to its SEND_RECEIPT or SEND_ERROR: `summary`'s SEND row), `dispatch` and `end_to_end`
(the journeys', every subscription together: dissector.tables.stats.journey_latencies).
Rules:
- The histograms are the `hdrhistogram` package's (HdrHistogram_py, imported only when
  asked for): values recorded in whole microseconds, SIGNIFICANT_FIGURES 3 (a recorded value
  is told apart from values more than 0.1% away), from 1 µs to HIGHEST_US, the 120,000 s of
  pulsar-perf's Recorder. A latency above HIGHEST_US is recorded as HIGHEST_US and one below
  0 (a dispatch seen before its receipt) as 0: still counted, never dropped, and the clamps
  counted per kind (`HdrRecorder.clamped`, which the commands say on stderr).
- The text is HdrHistogram's percentile distribution in milliseconds (values scaled by
  OUTPUT_SCALING 1000, TICKS 5 per half distance, as pulsar-perf calls it): the library's
  table of Value, Percentile, TotalCount, 1/(1-Percentile), then the footer as Java's
  `outputPercentileDistribution` writes it (the Python package 0.10.8 leaves StdDeviation in
  µs and writes "TotalCount" as a decimal: the footer is written here, from its numbers).
- Memory: one histogram per kind (about 200 KB), whatever the number of latencies; a batch's
  values are recorded by distinct value (numpy): no Python call per latency.
- Files are whole or absent: each is written under a hidden name in DIR, then renamed
  (tables.output.hidden_file); `prepare` makes DIR (and its parents) before a read starts, a
  DIR that cannot be made or written is one OutputError line. A kind without a latency
  writes no file (an older file of its name is left as it was).
"""

from __future__ import annotations

import io
import os
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from dissector.errors import OutputError, os_reason
from dissector.tables.output import hidden_file
from dissector.tables.stats import Latencies, journey_latencies, latency_name

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram

#: Significant decimal digits kept of every value (HdrHistogram's precision).
SIGNIFICANT_FIGURES = 3
#: The smallest value told apart from 0, µs.
LOWEST_US = 1
#: The largest value recorded as itself, µs: pulsar-perf's 120,000 s (33 h 20 min).
HIGHEST_US = 120_000 * 1_000_000
#: Recorded in µs, written in ms (pulsar-perf's output_value_unit_scaling_ratio).
OUTPUT_SCALING = 1000.0
#: Percentile ticks per half distance to 100% (HdrHistogram's and pulsar-perf's default).
TICKS = 5
#: Tables whose batches `HdrRecorder.add` reads.
HDR_TABLES = ("timeline", "journeys")
#: The SEND's latency is the publish latency; the other request commands are request-NAME.
PUBLISH = "publish"
#: The kinds, as patterns of file names (docs).
KINDS = ("request-COMMAND", PUBLISH, "dispatch", "end_to_end")
SUFFIX = ".hgrm"


def request_kind(command: str) -> str:
    """The kind of a request command's latencies: SEND -> publish, LOOKUP -> request-LOOKUP
    (a character a file name should not hold becomes `_`)."""
    return PUBLISH if command == "SEND" else "request-" + re.sub(r"[^A-Za-z0-9_.-]", "_", command)


def histogram() -> HdrHistogram:
    """An empty histogram of this module's range and precision."""
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)


def record(hist: HdrHistogram, us: np.ndarray) -> int:
    """Record latencies (µs) into `hist`, each distinct value once with its count; returns
    how many were clamped into [0, HIGHEST_US] (module rules)."""
    values = np.asarray(us, dtype=np.int64)
    clamped = int(np.count_nonzero((values < 0) | (values > HIGHEST_US)))
    distinct, counts = np.unique(np.clip(values, 0, HIGHEST_US), return_counts=True)
    for value, count in zip(distinct.tolist(), counts.tolist(), strict=True):
        hist.record_value(value, count)
    return clamped


def hgrm(hist: HdrHistogram) -> bytes:
    """The percentile distribution of a histogram with at least one value, in ms (module
    rules)."""
    if not hist.get_total_count():
        raise ValueError("a percentile distribution of no value")
    body = io.BytesIO()
    hist.output_percentile_distribution(body, OUTPUT_SCALING, TICKS)
    table = body.getvalue().split(b"#[", 1)[0]  # the library's footer replaced (module rules)
    digits = SIGNIFICANT_FIGURES
    mean = hist.get_mean_value() / OUTPUT_SCALING
    deviation = hist.get_stddev() / OUTPUT_SCALING
    peak = hist.get_max_value() / OUTPUT_SCALING
    footer = (
        f"#[Mean    = {mean:12.{digits}f}, StdDeviation   = {deviation:12.{digits}f}]\n"
        f"#[Max     = {peak:12.{digits}f}, Total count    = {hist.get_total_count():12d}]\n"
        f"#[Buckets = {hist.bucket_count:12d}, SubBuckets     = {hist.sub_bucket_count:12d}]\n"
    )
    return table + footer.encode()


def prepare(directory: str | os.PathLike[str]) -> Path:
    """DIR made if missing (with its parents) and checked writable; an OutputError if not."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"--hdr-out {path}: not a folder") from None
    except OSError as exc:
        raise OutputError(f"--hdr-out {path}: cannot make the folder: {os_reason(exc)}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"--hdr-out {path}: cannot write: permission denied")
    return path


def write_file(directory: Path, kind: str, hist: HdrHistogram) -> Path:
    """DIR/KIND.hgrm, written whole (a hidden name, then renamed)."""
    path = directory / f"{kind}{SUFFIX}"
    text = hgrm(hist)
    with hidden_file(os.fspath(path)) as out:
        out.write(text)
    return path


def write_hgrm(directory: str | os.PathLike[str], kind: str, us: np.ndarray) -> Path:
    """One kind's latencies (µs) as DIR/KIND.hgrm; DIR made if missing."""
    hist = histogram()
    record(hist, us)
    return write_file(prepare(directory), kind, hist)


class HdrRecorder:
    """One histogram per latency kind, filled from timeline and journeys batches."""

    def __init__(self) -> None:
        self.histograms: dict[str, HdrHistogram] = {}
        self.clamped: Counter[str] = Counter()  # per kind: values recorded as 0 or HIGHEST_US

    def record(self, kind: str, us: np.ndarray) -> None:
        """Record one kind's latencies (µs)."""
        if len(us) == 0:
            return
        hist = self.histograms.get(kind)
        if hist is None:
            hist = self.histograms[kind] = histogram()
        clamped = record(hist, us)
        if clamped:
            self.clamped[kind] += clamped

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """The latencies of a timeline batch (answered requests, by command) or a journeys
        batch (dispatch, end to end); other tables' batches are ignored."""
        if table == "timeline":
            latencies = Latencies()
            latencies.add(batch)
            for command, us in latencies.values().items():
                self.record(request_kind(command), us)
        elif table == "journeys" and batch.num_rows:
            for column, us in journey_latencies(batch).items():
                self.record(latency_name(column), us)

    def write(self, directory: Path) -> list[Path]:
        """Every kind's file in DIR (made by `prepare`), kinds sorted by name."""
        return [write_file(directory, k, self.histograms[k]) for k in sorted(self.histograms)]

    def warnings(self) -> list[str]:
        """One line per kind with clamped values (module rules), for stderr."""
        return [
            f"--hdr-out: {n} {kind} latencies outside 0 to {HIGHEST_US // 1_000_000} s "
            "recorded at the nearer end"
            for kind, n in sorted(self.clamped.items())
        ]
