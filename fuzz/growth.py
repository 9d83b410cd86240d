"""Growth check: inputs an attacker can grow, made at n, 2n and 4n; time (and memory) must
grow at most in proportion.

Input: the families below (`--families`), sizes scaled by `--scale`, `--runs` timings each.
Output: a table of times and ratios on stdout, the JSON report `--out` and its markdown
beside it (reports/fuzz_growth.md); exit status 1 when a ratio is above its bound.
Families (each makes inputs of the shape of issue 31's reproducers,
/work/shared/repro/fuzz-2026-11/, at any size):
- keyupdate (F1): a TLS 1.3 session whose client sends a chain of n KeyUpdate messages, read
  with its key log;
- resync (F2): a TLS 1.3 session with n bytes of plausible record headers (17 03 03 3f f0 ...)
  inside the client's stream, read with its key log (without one the session is not read past
  its handshake: no baseline there); the time per garbage byte is reported;
- filter (F10): `read -Y WORD` with a word of n characters;
- overlap (F12): n TCP segments of 52 bytes, each starting one byte after the previous one;
- teardrop (F12): the same segments, each sent as two overlapping IP fragments;
- waiting (F4): n TLS 1.3 sessions open at once whose records wait for keys the key log does
  not hold: the peak memory they add (read with the key log, minus without) must stop
  growing (a global bound), not grow with n.
Rules: each measurement runs in a fresh process (`--measure`), timed around the read alone
(imports and the input's making apart), best of `--runs` (one run when it takes over
LONG_RUN s); peak memory is that process's VmHWM. Time ratios time(2n)/time(n) and
time(4n)/time(2n) must stay within RATIO (2.2: linear plus noise); a ratio whose larger time is
under MIN_SECONDS is not judged (fixed costs and noise). Not a test: wall-clock times depend on
the machine, so this is a campaign of its own (`make fuzz-growth`), never part of pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from random import Random
from typing import Any

from fuzz import growth_acks, growth_journeys, growth_values
from fuzz import tls_inputs as ti
from fuzz.growth_model import Family, Input, write
from fuzz.mutators import ACK, PSH, Rec
from fuzz.packets import C2B, Conn, Pkt, ether, fragments, pcap, stamp
from fuzz.tls_pool import TlsSeed, pool

#: Largest accepted time(2n) / time(n).
RATIO = 2.2
#: Below this many seconds (the larger time of a ratio) a ratio is not judged.
MIN_SECONDS = 0.1
#: A measurement run taking longer than this is not repeated.
LONG_RUN = 5.0
#: waiting: the memory added at 4n may exceed that at 2n by this factor plus MEMORY_SLACK_MIB
#: (a global bound on waiting records at or below what 2n sessions wait for: about 60 MiB at
#: the default scale; a larger bound needs a larger --scale).
MEMORY_GROWTH = 1.3
MEMORY_SLACK_MIB = 16
#: Bytes of records each waiting session holds (under tls.session.MAX_WAITING, 1 MiB).
WAITING_BYTES = 960 << 10


def _tls13() -> TlsSeed:
    return next(s for s in pool() if s.tls13)


def _other_tls13() -> TlsSeed:
    return [s for s in pool() if s.tls13][1]


def _session(flights: ti.Flights, rng: Random) -> list[Rec]:
    segs = ti.segments(flights, 1400)
    return stamp(ti.session_packets(Conn(server_port=6651), ti.interleave(segs, "sent", rng)))


def make_keyupdate(n: int, folder: Path) -> Input:
    seed = _tls13()
    flights = ti.with_key_updates(seed, {0: {1: n}})
    return write(folder, f"keyupdate{n}", _session(flights, Random(1)), seed.keylog)


def make_resync(n: int, folder: Path) -> Input:
    seed = _tls13()
    junk = (b"\x17\x03\x03\x3f\xf0" * (n // 5 + 1))[:n]
    flights = ti.with_garbage(list(seed.wire), C2B, 2, 0, junk)
    return write(folder, f"resync{n}", _session(flights, Random(1)), seed.keylog)


def make_filter(n: int, folder: Path) -> Input:
    seed = _tls13()
    made = write(folder, "filter", _session(list(seed.wire), Random(1)))
    made.expression = "a" * n
    return made


def _segments(n: int) -> list[Pkt]:
    rng = Random(12)
    conn = Conn("10.1.0.1", "10.1.0.2", 1234, 6650)
    return [conn.packet(C2B, PSH | ACK, rng.randbytes(52), seq=1000 + i) for i in range(n)]


def make_overlap(n: int, folder: Path) -> Input:
    return write(folder, f"overlap{n}", stamp(_segments(n), step=10))


def make_teardrop(n: int, folder: Path) -> Input:
    pkts = []
    for i, p in enumerate(_segments(n)):
        l3 = bytearray(p.data[14:])
        l3[4:6] = (i & 0xFFFF).to_bytes(2, "big")  # identification
        pkts += [Pkt(C2B, ether(f)) for f in fragments(bytes(l3), 40, overlap=8)]
    return write(folder, f"teardrop{n}", stamp(pkts, step=10))


def make_waiting(n: int, folder: Path) -> Input:
    """n sessions: every handshake, then their records packet by packet, then every close."""
    seed, rng = _tls13(), Random(4)
    conns = [
        Conn(f"10.2.{i // 250}.{i % 250 + 1}", client_port=40000 + i, server_port=6651)
        for i in range(n)
    ]
    flows = []
    for conn in conns:
        records = ti.waiting_records(rng, WAITING_BYTES)
        segs = ti.segments(ti.with_garbage(list(seed.wire), C2B, 2, 0, records), 1400)
        flows.append(
            [p for d, data in ti.interleave(segs, "sent", rng) for p in conn.send(d, data)]
        )
    pkts = [p for conn in conns for p in conn.handshake()]
    longest = max(len(f) for f in flows)
    pkts += [f[k] for k in range(longest) for f in flows if k < len(f)]
    pkts += [p for conn in conns for p in conn.close()]
    return write(folder, f"waiting{n}", stamp(pkts, step=1), _other_tls13().keylog)


FAMILIES = (
    (
        Family("keyupdate", "F1", make_keyupdate, 800, "KeyUpdates"),
        Family("resync", "F2", make_resync, 100_000, "garbage bytes"),
        Family("filter", "F10", make_filter, 10_000, "characters"),
        Family("overlap", "F12", make_overlap, 10_000, "segments"),
        Family("teardrop", "F12", make_teardrop, 8_000, "fragment pairs"),
        Family("waiting", "F4", make_waiting, 32, "sessions", memory=True),
    )
    + growth_acks.FAMILIES
    + growth_journeys.FAMILIES
    + growth_values.FAMILIES
)


# --------------------------------------------------------------------------- measuring


def measure(spec: dict[str, Any]) -> dict[str, float]:
    """In this (fresh) process: the best time of reading the input, and the peak memory."""
    import contextlib
    import io

    from dissector.errors import DissectorError
    from dissector.frontends.cli import main
    from dissector.read import ReaderOptions, read_tables

    def once(captures: list[str], keylogs: list[str], expression: str | None) -> None:
        if spec.get("argv") is not None:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
                contextlib.suppress(SystemExit),
            ):
                main([spec["argv"][0], *captures, *spec["argv"][1:]])
            return
        if expression is None:
            options = ReaderOptions(tls_keylog=tuple(keylogs), **spec.get("options", {}))
            read_tables(captures, options, spec.get("tables"))
            return
        # what `read CAPTURE -Y EXPR --table frames --format csv -o FILE` runs
        out = os.path.join(spec["folder"], "filtered.csv")
        argv = ["read", *captures, "-Y", expression, "--table", "frames", "--format", "csv"]
        with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(DissectorError):
            main([*argv, "-o", out, "-j", "1"])

    # warm-up on a small capture: lazy imports and first-use costs are not the input's
    once([spec["warmup"]], spec["keylogs"], None if spec["expression"] is None else "a")
    best = float("inf")
    for _ in range(spec["runs"]):
        start = time.perf_counter()
        once(spec["captures"], spec["keylogs"], spec["expression"])
        took = time.perf_counter() - start
        best = min(best, took)
        if took > LONG_RUN:
            break
    return {"seconds": best, "peak_mib": _peak_mib()}


def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _child(made: Input, folder: Path, runs: int, keylogs: bool = True) -> dict[str, float]:
    spec = {
        "captures": made.captures,
        "keylogs": made.keylogs if keylogs else [],
        "expression": made.expression,
        "options": made.options,
        "tables": made.tables,
        "argv": made.argv,
        "runs": runs,
        "folder": str(folder),
        "warmup": str(_warmup(folder)),
    }
    done = subprocess.run(
        [sys.executable, "-m", "fuzz.growth", "--measure", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measurement failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _cli_peak_mib(made: Input) -> float:
    """The peak RSS of the command alone, as a user runs it: `python -m dissector.frontends.cli`
    in a process of its own (ru_maxrss of that child; the measuring process's own peak also
    holds its warm-up and every timed run). A read of every table when the input names no
    command."""
    argv = made.argv or [
        "read",
        "-j",
        "1",
        "-o",
        os.path.join(os.path.dirname(made.captures[0]), "all"),
    ]
    cmd = [sys.executable, "-m", "dissector.frontends.cli", argv[0], *made.captures, *argv[1:]]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit status {status}")
    return usage.ru_maxrss / 1024


def _warmup(folder: Path) -> Path:
    path = folder / "warmup.pcap"
    if not path.exists():
        path.write_bytes(pcap(_session(list(_other_tls13().wire), Random(1))))
    return path


def _judge(times: list[float], bound: float) -> tuple[list[float], bool]:
    ratios = [b / a if a > 0 else 0.0 for a, b in pairwise(times)]
    ok = all(r <= bound or b < MIN_SECONDS for r, b in zip(ratios, times[1:], strict=True))
    return ratios, ok


def check(family: Family, scale: float, runs: int, folder: Path) -> dict[str, Any]:
    sizes = [max(1, round(family.n * scale)) * k for k in (1, 2, 4)]
    rows = []
    for n in sizes:
        made = family.make(n, folder)
        size = sum(os.path.getsize(p) for p in made.captures)
        row: dict[str, Any] = {"n": n, "bytes": size, **_child(made, folder, runs)}
        if family.max_peak_mib is not None:
            row["cli_peak_mib"] = _cli_peak_mib(made)
        if family.memory:
            plain = _child(made, folder, 1, keylogs=False)
            row["seconds_without_keylog"] = plain["seconds"]
            row["added_mib"] = row["peak_mib"] - plain["peak_mib"]
        for path in made.captures + made.keylogs:
            os.unlink(path)
        rows.append(row)
        print(f"  {family.name} n={n}: {row}", file=sys.stderr, flush=True)
    times = [r["seconds"] for r in rows]
    ratios, ok = _judge(times, RATIO)
    out: dict[str, Any] = {
        "family": family.name,
        "finding": family.finding,
        "unit": family.unit,
        "rows": rows,
        "time_ratios": ratios,
        "time_ok": ok,
    }
    out["us_per_unit"] = rows[-1]["seconds"] / rows[-1]["n"] * 1e6  # at 4n
    if family.memory:
        added = [max(r["added_mib"], 0.0) for r in rows]
        out["memory_ok"] = added[2] <= MEMORY_GROWTH * added[1] + MEMORY_SLACK_MIB
        # F4 is a memory finding: judged by the memory the waiting records add, which must
        # stop growing. Time is reported beside the same read's without the key log: with
        # hundreds of MB of capture both grow alike (the read itself: page faults, caches)
        base = [float(r["seconds_without_keylog"]) for r in rows]
        out["time_ratios_without_keylog"], _ = _judge(base, RATIO)
        ok = out["memory_ok"]
    if family.max_peak_mib is not None:
        out["peak_ok"] = all(r["cli_peak_mib"] <= family.max_peak_mib for r in rows)
        ok = ok and out["peak_ok"]
    out["ok"] = ok
    return out


# --------------------------------------------------------------------------- report


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| family | finding | n, 2n, 4n | seconds (best) | time ratios | other | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        sizes = ", ".join(f"{row['n']:,}" for row in r["rows"])
        secs = ", ".join(f"{row['seconds']:.3f}" for row in r["rows"])
        ratios = ", ".join(f"{x:.2f}" for x in r["time_ratios"])
        other = f"{r['us_per_unit']:.1f} µs per {r['unit'].split()[-1].rstrip('s')} at 4n"
        if "peak_ok" in r:
            peaks = ", ".join(f"{row['cli_peak_mib']:.0f}" for row in r["rows"])
            other += f"; peak MiB of the command alone: {peaks}"
        if "memory_ok" in r:
            added = ", ".join(f"{row['added_mib']:.0f}" for row in r["rows"])
            other += f"; MiB added by waiting records: {added}"
        lines.append(
            f"| {r['family']} | {r['finding']} | {sizes} {r['unit']} | {secs} | {ratios} | "
            f"{other} | {'ok' if r['ok'] else '**FAILED**'} |"
        )
    return "\n".join(lines) + "\n"


def markdown(report: dict[str, Any]) -> str:
    return (
        "# Growth check (issues 31 and 42)\n\n"
        f"Command: `{report['command']}` (commit {report['commit']}, {report['cpus']} CPUs "
        "shared with other work).\n\n"
        f"Each input made at n, 2n and 4n and read in a fresh process (best of {report['runs']}"
        f" runs); time ratios must stay within {RATIO} (not judged when the larger time is "
        f"under {MIN_SECONDS} s). **{report['failed']} of {len(report['results'])} families "
        "failed.**\n\n" + table(report["results"])
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz.growth", description=__doc__.split("\n")[0])
    p.add_argument(
        "--families",
        help=f"comma-separated (default: all of {', '.join(f.name for f in FAMILIES)})",
    )
    p.add_argument("--scale", type=float, default=1.0, help="sizes times this (default 1)")
    p.add_argument("--runs", type=int, default=3, help="timings per input; the best counts")
    p.add_argument("--out", default="reports/fuzz_growth.json", help="the JSON report")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    wanted = args.families.split(",") if args.families else [f.name for f in FAMILIES]
    unknown = set(wanted) - {f.name for f in FAMILIES}
    if unknown:
        p.error(f"unknown families: {', '.join(sorted(unknown))}")
    results = []
    with tempfile.TemporaryDirectory(prefix="pulsar-growth-") as tmp:
        for family in FAMILIES:
            if family.name in wanted:
                results.append(check(family, args.scale, args.runs, Path(tmp)))
    from fuzz.campaign import _version

    report = {
        "command": " ".join(["python -m fuzz.growth", *sys.argv[1:]]),
        "commit": _version(),
        "cpus": os.cpu_count(),
        "runs": args.runs,
        "scale": args.scale,
        "failed": sum(not r["ok"] for r in results),
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(table(results))
    print(f"{report['failed']} families failed; {out}, {out.with_suffix('.md')}", file=sys.stderr)
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
