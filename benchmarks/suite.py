"""The benchmark's commands: ours, the tshark yardstick and the baselines, with their checks.

Input: the captures (CaptureInfo by name), the work folder for outputs, and the mode
(how many runs of each).
Output: Case records: the argument list, where its output goes, and a check that reads the
output back and compares it with the generator's record (rows, commands, packets).
Rule: a command counts only if it exits 0 and its check passes; every check compares with
the generator's own count, never with another tool's.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import tshark
from benchmarks.captures import CaptureInfo

ROOT = Path(__file__).resolve().parent.parent
TABLE_NAMES = ("frames", "messages", "anomalies", "conversations", "timeline", "entities")

Check = dict[str, Any]  # {"ok": bool, "detail": str, "outputs": [...], and counts}


@dataclass(frozen=True)
class Case:
    key: str  # e.g. "ours.small.frames"
    group: str  # "ours", "tshark" or "baseline"
    capture: str  # capture name
    label: str  # the command as the report shows it
    argv: list[str]
    output: Path  # a file, a folder, or the captured stdout
    stdout_to_output: bool  # whether `output` is the command's stdout
    check: Callable[[Path, CaptureInfo], Check]
    repeats: int


def pulsar_dissect() -> str:
    beside = Path(sys.executable).with_name("pulsar-dissect")
    return str(beside) if beside.exists() else (shutil.which("pulsar-dissect") or "pulsar-dissect")


def _outputs(path: Path) -> list[dict[str, Any]]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [{"path": str(p), "bytes": p.stat().st_size} for p in files if p.exists()]


def _rows(path: Path) -> int:
    """Rows of a parquet file, or of every parquet file in a folder (a dataset)."""
    import pyarrow.parquet as pq

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    return sum(int(pq.ParquetFile(f).metadata.num_rows) for f in files)


def _result(ok: bool, detail: str, output: Path, **counts: Any) -> Check:
    return {"ok": ok, "detail": detail, "outputs": _outputs(output), **counts}


def check_table(table: str) -> Callable[[Path, CaptureInfo], Check]:
    """A parquet file of `table` whose row count is the generator's frames or messages."""

    def check(output: Path, info: CaptureInfo) -> Check:
        if not output.is_file():
            return _result(False, f"no file {output.name} written", output)
        rows = _rows(output)
        want = info.frames if table == "frames" else info.messages
        ok = rows == want
        return _result(
            ok, "" if ok else f"{rows:,} rows, generator wrote {want:,}", output, rows=rows
        )

    return check


def check_no_findings(output: Path, info: CaptureInfo) -> Check:
    """A findings file with no row: the generator's traffic is healthy."""
    if not output.is_file():
        return _result(False, f"no file {output.name} written", output)
    rows = _rows(output)
    return _result(rows == 0, "" if rows == 0 else f"{rows} findings", output, rows=rows)


def check_folder(output: Path, info: CaptureInfo) -> Check:
    """Every table in the folder; frames and messages rows as the generator wrote."""
    if not output.is_dir():
        return _result(False, f"no folder {output.name} written", output)
    found = {p.name.split(".")[0]: p for p in output.iterdir()}
    missing = [t for t in TABLE_NAMES if t not in found]
    if missing:
        return _result(False, f"tables missing: {', '.join(missing)}", output)
    rows = {t: _rows(found[t]) for t in TABLE_NAMES if found[t].suffix in (".parquet", "")}
    problems = [
        f"{t}: {rows.get(t)} rows, generator wrote {want:,}"
        for t, want in (("frames", info.frames), ("messages", info.messages))
        if rows.get(t) != want
    ]
    return _result(not problems, "; ".join(problems), output, rows=rows)


def check_tshark_tcp(output: Path, info: CaptureInfo) -> Check:
    """tshark reading TCP only: one line per packet of the capture."""
    lines = sum(1 for _ in output.open()) if output.is_file() else 0
    ok = lines == info.packets
    detail = "" if ok else f"{lines:,} lines, generator wrote {info.packets:,} packets"
    return _result(ok, detail, output, lines=lines)


def check_text(output: Path, info: CaptureInfo) -> Check:
    size = output.stat().st_size if output.is_file() else 0
    return _result(size > 0, "" if size else "nothing printed", output)


def check_tshark_fields(output: Path, info: CaptureInfo) -> Check:
    counts = tshark.count_commands(output) if output.is_file() else {}
    n = sum(counts.values())
    ok = n == info.frames
    detail = "" if ok else f"{n:,} commands decoded, generator wrote {info.frames:,}"
    by_type = {str(k): v for k, v in sorted(counts.items())}
    return _result(ok, detail, output, commands=n, by_type=by_type)


def check_tshark_verbose(output: Path, info: CaptureInfo) -> Check:
    n = tshark.count_verbose(output) if output.is_file() else 0
    ok = n == info.frames
    detail = "" if ok else f"{n:,} command types printed, generator wrote {info.frames:,}"
    return _result(ok, detail, output, commands=n)


def check_baseline(output: Path, info: CaptureInfo) -> Check:
    try:
        got = json.loads(output.read_text())
    except (OSError, ValueError) as exc:
        return _result(False, f"no result: {exc}", output)
    problems = [f"{got.get('packets')} packets"] if got.get("packets") != info.packets else []
    if "frames" in got and got["frames"] != info.frames:
        problems.append(f"{got['frames']:,} frames, generator wrote {info.frames:,}")
    return _result(not problems, "; ".join(problems), output, **got)


@dataclass(frozen=True)
class Repeats:
    fast: int  # small, mib and mix captures
    large: int  # each command on the 1.2 GB captures
    slow: int  # scapy and tshark -V


OUT = "{OUT}"  # stands for the case's output path in an argument list


def cases(caps: dict[str, CaptureInfo], work: Path, repeats: Repeats) -> list[Case]:
    """Every command of the benchmark, in the order they run."""
    pd, py = pulsar_dissect(), sys.executable
    small, large, half, mib, mix = (caps[n].path for n in ("small", "large", "half", "mib", "mix"))
    frames = ["--table", "frames", "--format", "parquet", "-o", OUT]
    fast, big, slow = repeats.fast, repeats.large, repeats.slow
    out: list[Case] = []

    def add(
        key: str,
        label: str,
        argv: list[str],
        output: str,
        check: Callable[..., Check],
        runs: int,
        stdout: bool = False,
    ) -> None:
        group, capture = key.split(".")[:2]
        path = work / output
        args = [str(path) if a == OUT else a for a in argv]
        out.append(Case(key, group, capture, label, args, path, stdout, check, runs))

    add(
        "ours.small.frames",
        "read SMALL --table frames --format parquet -o F",
        [pd, "read", small, *frames],
        "small-frames.parquet",
        check_table("frames"),
        fast,
    )
    add(
        "ours.small.j1",
        "read SMALL -j 1 --table frames --format parquet -o F (one process)",
        [pd, "read", small, "-j", "1", *frames],
        "small-j1.parquet",
        check_table("frames"),
        fast,
    )
    add(
        "ours.small.all1",
        "read SMALL -j 1 -o DIR (every table, one process)",
        [pd, "read", small, "-j", "1", "-o", OUT],
        "small-tables-j1",
        check_folder,
        fast,
    )
    add(
        "ours.small.all",
        "read SMALL -o DIR (every table)",
        [pd, "read", small, "-o", OUT],
        "small-tables",
        check_folder,
        fast,
    )
    add(
        "ours.large.frames",
        "read LARGE --table frames --format parquet -o F",
        [pd, "read", large, *frames],
        "large-frames.parquet",
        check_table("frames"),
        big,
    )
    add(
        "ours.half.frames",
        "read HALF --table frames --format parquet -o F",
        [pd, "read", half, *frames],
        "half-frames.parquet",
        check_table("frames"),
        big,
    )
    add(
        "ours.large.summary",
        "summary LARGE",
        [pd, "summary", large],
        "large-summary.txt",
        check_text,
        big,
        stdout=True,
    )
    add(
        "ours.large.all",
        "read LARGE -o DIR (every table)",
        [pd, "read", large, "-o", OUT],
        "large-tables",
        check_folder,
        big,
    )
    for j in ("1", "2"):
        add(
            f"ours.large.j{j}",
            f"read LARGE -j {j} --table frames --format parquet -o F",
            [pd, "read", large, "-j", j, *frames],
            f"large-j{j}.parquet",
            check_table("frames"),
            big,
        )
    add(
        "ours.mib.messages",
        "read MIB --table messages --format parquet -o F",
        [pd, "read", mib, "--table", "messages", "--format", "parquet", "-o", OUT],
        "mib-messages.parquet",
        check_table("messages"),
        fast,
    )
    add(
        "ours.mix.findings",
        "read MIX --table findings --format parquet -o F (the diagnosis rules alone)",
        [pd, "read", mix, "--table", "findings", "--format", "parquet", "-o", OUT],
        "mix-findings.parquet",
        check_no_findings,
        fast,
    )
    add(
        "ours.mix.all",
        "read MIX -o DIR (every table)",
        [pd, "read", mix, "-o", OUT],
        "mix-tables",
        check_folder,
        fast,
    )
    add(
        "tshark.small.fields",
        "tshark + pulsar.lua, -T fields (frames-table columns)",
        tshark.args(Path(small)),
        "small-tshark-fields.txt",
        check_tshark_fields,
        fast,
        stdout=True,
    )
    add(
        "tshark.small.tcp",
        "tshark reading TCP only (no Pulsar): -T fields -e tcp.stream -e tcp.len",
        tshark.tcp_args(Path(small)),
        "small-tshark-tcp.txt",
        check_tshark_tcp,
        fast,
        stdout=True,
    )
    add(
        "tshark.small.verbose",
        "tshark + pulsar.lua, -V (every field of every layer)",
        tshark.args(Path(small), "verbose"),
        "small-tshark-verbose.txt",
        check_tshark_verbose,
        slow,
        stdout=True,
    )
    add(
        "tshark.large.fields",
        "tshark + pulsar.lua, -T fields (frames-table columns)",
        tshark.args(Path(large)),
        "large-tshark-fields.txt",
        check_tshark_fields,
        big,
        stdout=True,
    )
    add(
        "baseline.small.scapy",
        "scapy RawPcapReader + TCPSession + protobuf decode",
        [py, "-m", "benchmarks.baselines", "scapy", small],
        "small-scapy.json",
        check_baseline,
        slow,
        stdout=True,
    )
    for name, path in (("small", small), ("large", large)):
        add(
            f"baseline.{name}.walk",
            "pure-Python pcap record walk (the Python floor)",
            [py, "-m", "benchmarks.baselines", "walk", path],
            f"{name}-walk.json",
            check_baseline,
            fast,
            stdout=True,
        )
    return out
