"""dissector.frontends.hdr: HdrHistogram percentile distributions (.hgrm), read back as text.

The files are parsed here from their text format (HdrHistogram's outputPercentileDistribution:
a Value, Percentile, TotalCount, 1/(1-Percentile) table, then the Mean/StdDeviation, Max/Total
count and Buckets/SubBuckets footer, as Java's HdrHistogram and so pulsar-perf write it) and
checked against numpy on the same latencies, within HdrHistogram's documented precision: with
3 significant digits a value is told apart from any other more than 0.1% away, so a value it
reports is at most 0.1% above the recorded one (it reports the highest equivalent value).
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dissector.errors import OutputError, UsageError
from dissector.frontends import hdr
from dissector.frontends.live.loop import run
from dissector.frontends.live.options import LiveOptions
from dissector.read import read_tables
from tests.support.cli import cli
from tests.support.live import FakeSource

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
SAMPLE = PCAPS / "produce_consume.pcap"
#: HdrHistogram's precision at 3 significant digits (relative).
PRECISION = 0.001

HEADER = "       Value     Percentile TotalCount 1/(1-Percentile)"
LINE = re.compile(r"^ *(\d+\.\d{3}) (\d\.\d{12}) +(\d+)(?: +(\d+\.\d{2}))?$")
MEAN = re.compile(r"^#\[Mean    = +(\d+\.\d{3}), StdDeviation   = +(\d+\.\d{3})\]$")
MAX = re.compile(r"^#\[Max     = +(\d+\.\d{3}), Total count    = +(\d+)\]$")
BUCKETS = re.compile(r"^#\[Buckets = +(\d+), SubBuckets     = +(\d+)\]$")


@dataclass
class Hgrm:
    rows: list[tuple[float, float, int]]  # value (ms), percentile (0 to 1), total count
    mean: float
    stddev: float
    max: float
    count: int


def parse(text: str) -> Hgrm:
    """An .hgrm file by its format: header, a blank line, the table, the three-line footer."""
    lines = text.splitlines()
    assert lines[:2] == [HEADER, ""]
    *table, mean, peak, buckets = lines[2:]
    rows = []
    for i, line in enumerate(table):
        found = LINE.match(line)
        assert found, line
        value, percentile, total, inverse = found.groups()
        last = i == len(table) - 1
        assert (inverse is None) == last, line  # the last line (100%) has no 1/(1-P)
        if inverse is not None:  # the fourth column is 1/(1-Percentile), to 2 decimals
            assert float(inverse) == pytest.approx(1 / (1 - float(percentile)), abs=0.006)
        rows.append((float(value), float(percentile), int(total)))
    found_mean, found_max = MEAN.match(mean), MAX.match(peak)
    assert found_mean and found_max and BUCKETS.match(buckets), (mean, peak, buckets)
    return Hgrm(
        rows,
        float(found_mean.group(1)),
        float(found_mean.group(2)),
        float(found_max.group(1)),
        int(found_max.group(2)),
    )


def check_against(parsed: Hgrm, us: np.ndarray) -> None:
    """Count, max, mean and every line of the table against the latencies themselves."""
    ordered = np.sort(us)
    n = len(ordered)
    assert parsed.count == n and parsed.rows[-1][2] == n and parsed.rows[-1][1] == 1.0
    # the max: at least numpy's, at most 0.1% above it (ms with 3 decimals: whole µs)
    assert ordered[-1] / 1000 <= parsed.max <= ordered[-1] * (1 + PRECISION) / 1000 + 1e-9
    assert parsed.rows[-1][0] == parsed.max
    assert parsed.mean == pytest.approx(ordered.mean() / 1000, rel=PRECISION, abs=0.0005)
    assert parsed.stddev == pytest.approx(ordered.std() / 1000, rel=0.01, abs=0.0005)
    for (value, percentile, total), before in zip(parsed.rows, [(0, 0, 0), *parsed.rows],
                                                  strict=False):  # fmt: skip
        # a line: the largest latency counted so far (the total-th), reported within 0.1%
        largest = ordered[total - 1]
        assert largest / 1000 <= value <= largest * (1 + PRECISION) / 1000 + 1e-9
        assert total / n >= percentile - 1e-12  # the level is reached at this value
        assert value >= before[0] and total >= before[2] and percentile >= before[1]


def value_at(parsed: Hgrm, level: float) -> tuple[float, float]:
    """The first line at or past a percentile level: (its value in ms, its level)."""
    return next((v, p) for v, p, _ in parsed.rows if p >= level)


def test_a_long_tail_against_numpy(tmp_path: Path) -> None:
    """100,000 log-normal latencies (µs, 1 µs to minutes): every line, the max and the value
    at 0.99 within HdrHistogram's precision of numpy's on the same values."""
    rng = np.random.default_rng(41)
    us = rng.lognormal(mean=8, sigma=1.6, size=100_000).astype(np.int64)
    path = hdr.write_hgrm(tmp_path, "publish", us)
    assert path == tmp_path / "publish.hgrm"
    parsed = parse(path.read_text())
    check_against(parsed, us)
    value, level = value_at(parsed, 0.99)
    want = float(np.quantile(us, level, method="inverted_cdf"))  # the smallest x, F(x) >= level
    assert want / 1000 <= value <= want * (1 + PRECISION) / 1000
    assert level - 0.99 < 0.002  # a tick close to 0.99: 5 per half distance
    # the tail ticks go past p99.99 (1/(1-P) above 10,000)
    assert any(p >= 0.9999 for _, p, _ in parsed.rows[:-1])


def test_the_p99_of_a_plateau_is_numpys_within_the_precision(tmp_path: Path) -> None:
    """Latencies whose 98th to 99.5th percentiles are one value (12,345 µs): numpy's linear
    p99 is that value, and so is the file's value at 0.99 (to 0.1%)."""
    us = np.concatenate(
        [np.arange(1000, 9800), np.full(150, 12_345), np.arange(50_000, 55_000, 100)]
    ).astype(np.int64)  # 8800 + 150 + 50 = 9000 values: ranks 8800 to 8949 are 12,345
    assert np.quantile(us, 0.99, method="linear") == 12_345
    parsed = parse(hdr.write_hgrm(tmp_path, "dispatch", us).read_text())
    check_against(parsed, us)
    value, level = value_at(parsed, 0.99)
    assert level < 0.9944  # still on the plateau (ranks to 8949 of 9000)
    assert 12.345 <= value <= 12.345 * (1 + PRECISION)


def test_values_below_2048_us_are_exact_and_the_text_is_in_ms(tmp_path: Path) -> None:
    """Below 2048 µs every microsecond is its own bucket: the file shows them exactly,
    divided by 1000 (pulsar-perf's output_value_unit_scaling_ratio)."""
    us = np.array([5, 5, 17, 250, 250, 250, 1999], dtype=np.int64)
    parsed = parse(hdr.write_hgrm(tmp_path, "request-LOOKUP", us).read_text())
    assert {v for v, _, _ in parsed.rows} == {0.005, 0.017, 0.25, 1.999}
    assert parsed.max == 1.999 and parsed.count == 7
    assert parsed.mean == round(float(us.mean()) / 1000, 3)
    assert parsed.stddev == round(float(us.std()) / 1000, 3)  # scaled, as Java writes it
    assert next(t for v, _, t in parsed.rows if v == 0.25) == 6


def test_values_out_of_range_are_clamped_and_counted() -> None:
    """A negative latency (a dispatch seen before its receipt) is recorded as 0, one above
    HIGHEST_US as HIGHEST_US: every value counted, the clamps said."""
    recorder = hdr.HdrRecorder()
    recorder.record("dispatch", np.array([-500, 100, 200], dtype=np.int64))
    recorder.record("end_to_end", np.array([hdr.HIGHEST_US + 7, 10], dtype=np.int64))
    recorder.record("publish", np.empty(0, np.int64))  # nothing: no histogram, no file
    assert set(recorder.histograms) == {"dispatch", "end_to_end"}
    assert recorder.clamped == {"dispatch": 1, "end_to_end": 1}
    dispatch = parse(hdr.hgrm(recorder.histograms["dispatch"]).decode())
    assert dispatch.count == 3 and dispatch.rows[0][:2] == (0.0, 0.0)
    e2e = parse(hdr.hgrm(recorder.histograms["end_to_end"]).decode())
    assert e2e.count == 2
    assert hdr.HIGHEST_US / 1000 <= e2e.max <= hdr.HIGHEST_US * (1 + PRECISION) / 1000
    assert recorder.warnings() == [
        "--hdr-out: 1 dispatch latencies outside 0 to 120000 s recorded at the nearer end",
        "--hdr-out: 1 end_to_end latencies outside 0 to 120000 s recorded at the nearer end",
    ]
    with pytest.raises(ValueError):
        hdr.hgrm(hdr.histogram())


def test_kinds_name_the_files() -> None:
    assert hdr.request_kind("SEND") == "publish"
    assert hdr.request_kind("LOOKUP") == "request-LOOKUP"
    assert hdr.request_kind("a/b c") == "request-a_b_c"


def test_files_are_whole_and_the_folder_is_made(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b"
    first = hdr.write_hgrm(folder, "publish", np.array([1000, 2000], dtype=np.int64))
    again = hdr.write_hgrm(folder, "publish", np.array([3000], dtype=np.int64))
    assert first == again and parse(again.read_text()).count == 1  # replaced, not appended
    assert sorted(p.name for p in folder.iterdir()) == ["publish.hgrm"]  # no hidden part left
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        hdr.prepare(tmp_path / "file")
    with pytest.raises(OutputError, match="cannot make the folder"):
        hdr.prepare(tmp_path / "file" / "sub")


# ------------------------------------------------------------------------- commands


def summary_json(*args: str) -> dict:  # type: ignore[type-arg]
    res = cli("summary", "--format", "json", *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def test_summary_writes_one_file_per_kind_with_the_summarys_counts(tmp_path: Path) -> None:
    """`summary --hdr-out DIR`: request-COMMAND per command but SEND, publish for SEND,
    dispatch and end_to_end for the journeys; each file's count, max and values are those
    of the latencies in the tables (numpy), the summary's counts and maxima too."""
    captures = [str(PCAPS / "produce_consume.pcap"), str(PCAPS / "acks.pcap")]
    out = tmp_path / "new" / "hdr"
    res = cli("summary", "--hdr-out", str(out), *captures)
    assert res.returncode == 0, res.stderr
    summary = summary_json(*captures)
    names = {hdr.request_kind(c) for c in summary["latency"]} | {"dispatch", "end_to_end"}
    assert {p.name for p in out.iterdir()} == {f"{n}.hgrm" for n in names}
    tables = read_tables([Path(c) for c in captures])
    timeline = tables["timeline"].to_pylist()
    for command, stats in summary["latency"].items():
        us = np.array([r["latency_us"] for r in timeline if r["request_command"] == command
                       and r["outcome"] in ("success", "error")], dtype=np.int64)  # fmt: skip
        parsed = parse((out / f"{hdr.request_kind(command)}.hgrm").read_text())
        check_against(parsed, us)
        assert parsed.count == stats["count"]
        assert stats["max_ms"] <= parsed.max <= stats["max_ms"] * (1 + PRECISION)
    journeys = tables["journeys"].to_pylist()
    for key in ("dispatch", "end_to_end"):
        us = np.array([r[f"{key}_us"] for r in journeys if r["consumer_conn_id"] is not None
                       and r[f"{key}_us"] is not None], dtype=np.int64)  # fmt: skip
        parsed = parse((out / f"{key}.hgrm").read_text())
        assert (
            parsed.count
            == len(us)
            == sum(s[key]["count"] for s in summary["journeys"]["subscriptions"])
        )
        check_against(parsed, np.maximum(us, 0))  # negative ones recorded as 0 (said)
        if (us < 0).any():
            assert f"{(us < 0).sum()} {key} latencies outside" in res.stderr
    # --no-journeys: no journey kinds
    res = cli("summary", "--no-journeys", "--hdr-out", str(tmp_path / "nj"), *captures)
    assert res.returncode == 0, res.stderr
    assert not {"dispatch.hgrm", "end_to_end.hgrm"} & {p.name for p in (tmp_path / "nj").iterdir()}


def test_a_bad_folder_is_one_line_before_the_read(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for bad, says in ((tmp_path / "file", "not a folder"),
                      (tmp_path / "file" / "d", "cannot make the folder")):  # fmt: skip
        res = cli("summary", "--hdr-out", str(bad), str(SAMPLE))
        assert res.returncode == 2 and res.stdout == ""
        assert res.stderr.startswith(f"pulsar-dissect: --hdr-out {bad}: {says}")
        assert res.stderr.count("\n") == 1, res.stderr


def test_live_writes_the_files_summary_writes_at_stop(tmp_path: Path) -> None:
    """A replayed capture through `live --hdr-out`: at stop, byte for byte the files
    `summary --hdr-out` writes for the same capture."""
    from dissector.capture import open_capture

    with open_capture(SAMPLE) as reader:
        pkts = [(p.ts, p.data) for p in reader]
    err = io.StringIO()
    opts = LiveOptions(count=len(pkts), hdr_out=str(tmp_path / "live"))
    assert run(opts, io.StringIO(), err, source=FakeSource(pkts, 1)) == 0
    res = cli("summary", "--hdr-out", str(tmp_path / "summary"), str(SAMPLE))
    assert res.returncode == 0, res.stderr
    live = {p.name: p.read_bytes() for p in (tmp_path / "live").iterdir()}
    assert live == {p.name: p.read_bytes() for p in (tmp_path / "summary").iterdir()}
    assert {"publish.hgrm", "end_to_end.hgrm"} <= set(live)
    with pytest.raises(UsageError, match="-j 1"):
        LiveOptions(jobs=2, hdr_out=str(tmp_path))
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):  # before the capture starts
        run(LiveOptions(count=1, hdr_out=str(tmp_path / "file")), io.StringIO(), err,
            source=FakeSource(pkts, 1))  # fmt: skip
