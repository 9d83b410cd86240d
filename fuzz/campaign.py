"""Run a seeded, reproducible fuzzing campaign over every level and report what it found.

Input: `--inputs N` (in total, shared by the levels by `--levels` weights), `--seed S`,
`--jobs J` worker processes, `--out` the JSON report (the markdown summary goes beside it).
Output: the JSON report and `reports/fuzz_campaign.md`: inputs tried per level, distinct
failures (exception type + innermost `dissector/` frame, or the invariant broken) each with
its first reproducer, wall time, per-input times (median, p99, max, by input size, and the
slowest inputs relative to their size, timed again), peak memory (ru_maxrss) and the
anomaly codes reached.
Rules:
- Input i of level L is made from `Random(f"{S}:{L}:{i}")` alone, whatever the jobs or the
  order: `--replay L:S:I` makes it again, runs it here with its traceback, and `--save PATH`
  writes it out (capture bytes, stream bytes or encoded frames).
- Each input runs under a time limit (SIGALRM, TIME_LIMIT) and each worker under an
  address-space limit (MEMORY_LIMIT): a hang or a memory bomb is a failure, not a stuck
  or killed campaign. An exception while *making* an input is a harness error, reported
  apart from the dissector's failures.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import json
import os
import platform
import queue
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from random import Random
from types import FrameType
from typing import Any

from dissector.anomalies import REGISTRY
from fuzz.seeds import load
from fuzz.targets import LEVELS, Case, Harness, InvariantError

#: Default share of the inputs per level: the whole pipeline the largest (issue 14); the
#: levels of issue 31 cost more per input (TLS sessions, forks, a subprocess for `cli`).
WEIGHTS = {
    "pipeline": 0.33,
    "capture": 0.14,
    "tcp": 0.14,
    "framing": 0.19,
    "payload": 0.14,
    "tls": 0.03,
    "multi": 0.01,
    "cli": 0.001,
    "outputs": 0.01,
    "values": 0.01,
    "journeys": 0.01,
    "diagnose": 0.01,
}
#: Levels whose slowest inputs are not timed again (a subprocess per input: its time is
#: mostly the interpreter's start).
NOT_RETIMED = frozenset({"cli"})
#: Inputs per task handed to a worker.
BLOCK = 500
#: Seconds one input may run (the median is about a millisecond).
TIME_LIMIT = 30.0
#: Seconds without progress after which a worker is killed (native code ignores SIGALRM).
KILL_AFTER = 2 * TIME_LIMIT
#: Address space of a worker (a decompression bomb must fail, not take the machine).
MEMORY_LIMIT = 4 << 30
#: An input that raises the worker's peak RSS by more than this is listed (KiB).
RSS_JUMP_KIB = 16 * 1024
#: Inputs kept per task and level as the slowest relative to size; re-timed afterwards.
SLOW_KEPT = 10
#: A re-timed input is flagged when its time per KiB is this many times the level's median
#: and it takes more than FLAG_MS (tiny inputs are all fixed costs).
FLAG_PER_KIB = 10
FLAG_MS = 5.0
#: Runs of each slow input when it is timed again (the best counts).
RETIME_RUNS = 5
#: Size below which time per byte is not meaningful (fixed costs dominate).
MIN_SIZE = 1024
ROOT = Path(__file__).resolve().parent.parent


class Hang(BaseException):
    """The input ran past TIME_LIMIT (BaseException: no `except Exception` swallows it)."""


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise Hang(f"ran longer than {TIME_LIMIT} s")


def _shown(value: object) -> object:
    """JSON for what the report holds beside plain values: bytes (inputs' files) by size."""
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if isinstance(value, set | frozenset | tuple):
        return sorted(value, key=repr)
    return repr(value)


def failure_key(exc: BaseException) -> str:
    """Exception type and innermost `dissector/` frame, or the invariant broken."""
    if isinstance(exc, InvariantError):
        return f"invariant {exc.name}" + (f" ({exc.where})" if exc.where else "")
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/dissector/" in f.filename]
    where = ours[-1] if ours else (frames[-1] if frames else None)
    if where is None:
        return type(exc).__name__
    path = where.filename.split("/dissector/", 1)[-1]
    prefix = "dissector/" if ours else ""
    return f"{type(exc).__name__} at {prefix}{path}:{where.lineno} in {where.name}"


def input_rng(seed: int, level: str, index: int) -> Random:
    return Random(f"{seed}:{level}:{index}")


def save_case(case: Case, path: str) -> list[str]:
    """Write the input to `path` (and, for inputs of several files, beside it); the files
    written."""
    if case.level == "cli":  # a scratch folder of captures and key logs, and the arguments
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in case.settings["files"].items():
            (folder / name).write_bytes(data)
        (folder / "ARGS.json").write_text(json.dumps(case.data) + "\n")
        return [str(folder)]
    written = []
    if isinstance(case.data, list) and case.data and isinstance(case.data[0], bytes):
        for i, data in enumerate(case.data):  # multi: the capture files, in reading order
            Path(f"{path}.{i}").write_bytes(data)
            written.append(f"{path}.{i}")
    else:
        Path(path).write_bytes(case_bytes(case))
        written.append(path)
    texts = case.settings.get("keylogs") or [case.settings.get("keylog")]
    for i, text in enumerate(t for t in texts if t):
        Path(f"{path}.keys{i}").write_text(text)
        written.append(f"{path}.keys{i}")
    return written


def case_bytes(case: Case) -> bytes:
    """The input as one file: capture or stream bytes, or the encoded frames."""
    if isinstance(case.data, bytes):
        return case.data
    from fuzz.mutators import write_pcap

    data, _ = write_pcap(Random(0), case.data, [])  # tcp level: its records as a pcap
    return data


# --------------------------------------------------------------------------- workers


@dataclass
class Result:
    """What one task (a block of inputs of one level) gave."""

    level: str
    inputs: int = 0
    rejected: int = 0
    times: array[float] = field(default_factory=lambda: array("d"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    make_seconds: float = 0.0
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    harness_errors: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: Counter[str] = field(default_factory=Counter)
    slow: list[tuple[float, int, int, float]] = field(
        default_factory=list
    )  # (per byte, i, size, t)
    slowest: list[tuple[float, int, int, float]] = field(default_factory=list)  # by time
    rss_jumps: list[dict[str, Any]] = field(default_factory=list)
    maxrss_kib: int = 0
    pid: int = 0


_HARNESS: Harness | None = None
_SEED = 0


def _init_worker(seed: int, base: str) -> None:
    global _HARNESS, _SEED
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the campaign
    signal.signal(signal.SIGALRM, _alarm)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    _SEED = seed
    _HARNESS = Harness(load(), Path(base) / f"w{os.getpid()}")


def _example(case: Case, index: int, exc: BaseException, seed: int) -> dict[str, Any]:
    return {
        "level": case.level,
        "index": index,
        "replay": f"python -m fuzz.campaign --replay {case.level}:{seed}:{index}",
        "size": case.size,
        "ops": case.ops,
        "settings": {k: v for k, v in case.settings.items() if k not in ("cuts", "gaps")},
        "message": f"{type(exc).__name__}: {exc}"[:1000],
        "traceback": traceback.format_exception(exc)[-12:],
    }


def run_block(task: tuple[str, int, int], state: Any = None, slot: int = 0) -> Result:
    """Run inputs start..stop-1 of a level; `state[4 * slot:]` says which one is running
    (level, block start, input, block stop), for the parent to tell which input killed or
    hung a worker."""
    level, start, stop = task
    harness = _HARNESS
    assert harness is not None
    res = Result(level, pid=os.getpid())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    slow: list[tuple[float, int, int, float]] = []
    slowest: list[tuple[float, int, int, float]] = []  # (time, index, size, time)
    if state is not None:
        state[4 * slot : 4 * slot + 4] = [LEVELS.index(level), start, start, stop]
    for index in range(start, stop):
        if state is not None:
            state[4 * slot + 2] = index
        t0 = time.perf_counter()
        try:
            case = harness.make(level, input_rng(_SEED, level, index))
        except Exception as exc:  # a bug of the harness, not of the dissector
            key = failure_key(exc)
            error = res.harness_errors.setdefault(key, {"count": 0, "index": index})
            error["count"] += 1
            error.setdefault("traceback", traceback.format_exception(exc)[-8:])
            continue
        t1 = time.perf_counter()
        res.make_seconds += t1 - t0
        failed: BaseException | None = None
        signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
        try:
            seen = harness.run(case)
        except (Exception, Hang) as exc:
            failed = exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - t1
        if failed is None:
            elapsed -= seen.extra  # the level's own work: API and CLI cross-checks apart
        res.inputs += 1
        res.times.append(elapsed)
        res.sizes.append(case.size)
        if failed is not None:
            key = failure_key(failed)
            entry = res.failures.get(key)
            if entry is None:
                entry = res.failures[key] = {
                    "count": 0,
                    "first": _example(case, index, failed, _SEED),
                }
            entry["count"] += 1
        else:
            res.rejected += seen.rejected
            res.codes.update(seen.codes)
        per = elapsed / max(case.size, MIN_SIZE)
        item = (per, index, case.size, elapsed)
        if failed is None:  # a failure is reported as such, not timed again
            for heap, value in ((slow, item), (slowest, (elapsed, *item[1:]))):
                if len(heap) < SLOW_KEPT:
                    heapq.heappush(heap, value)
                elif value[0] > heap[0][0]:
                    heapq.heapreplace(heap, value)
        now = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if now - peak > RSS_JUMP_KIB:
            res.rss_jumps.append(
                {"level": level, "index": index, "size": case.size, "rise_kib": now - peak}
            )
        peak = max(peak, now)
    res.slow = sorted(slow, reverse=True)
    res.slowest = sorted(slowest, reverse=True)
    res.maxrss_kib = peak
    return res


def _worker(slot: int, seed: int, base: str, todo: Any, done: Any, state: Any) -> None:
    _init_worker(seed, base)
    while True:
        task = todo.get()
        if task is None:
            return
        result = run_block(task, state, slot)
        state[4 * slot] = -1  # idle: not watched for progress
        done.put(result)


# --------------------------------------------------------------------------- parent


def plan(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Inputs per level, adding up to `total`."""
    norm = sum(weights.values())
    counts = {lv: int(total * w / norm) for lv, w in weights.items()}
    first = next(iter(counts))
    counts[first] += total - sum(counts.values())
    return counts


def tasks(counts: dict[str, int], block: int) -> Iterator[tuple[str, int, int]]:
    """Blocks of every level, interleaved so that every level progresses together."""
    starts = dict.fromkeys(counts, 0)
    while any(starts[lv] < counts[lv] for lv in counts):
        for lv in counts:
            if starts[lv] < counts[lv]:
                stop = min(counts[lv], starts[lv] + block)
                yield lv, starts[lv], stop
                starts[lv] = stop


@dataclass
class Totals:
    level: str
    inputs: int = 0
    rejected: int = 0
    times: array[float] = field(default_factory=lambda: array("d"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    make_seconds: float = 0.0
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: Counter[str] = field(default_factory=Counter)
    slow: list[tuple[float, int, int, float]] = field(default_factory=list)
    slowest: list[tuple[float, int, int, float]] = field(default_factory=list)

    def add(self, r: Result) -> None:
        self.inputs += r.inputs
        self.rejected += r.rejected
        self.times.extend(r.times)
        self.sizes.extend(r.sizes)
        self.make_seconds += r.make_seconds
        self.codes.update(r.codes)
        self.slow = heapq.nlargest(SLOW_KEPT * 4, self.slow + r.slow)
        self.slowest = heapq.nlargest(SLOW_KEPT * 4, self.slowest + r.slowest)
        for key, entry in r.failures.items():
            mine = self.failures.get(key)
            if mine is None:
                self.failures[key] = {"count": entry["count"], "first": entry["first"]}
            else:
                mine["count"] += entry["count"]
                if entry["first"]["index"] < mine["first"]["index"]:
                    mine["first"] = entry["first"]


def _died(t: Totals, index: int, exitcode: int | None, killed: bool, seed: int) -> None:
    """A worker died on input `index` of level t.level (a native crash, or killed hung)."""
    if killed:
        key, message = "process hung", f"no progress for {KILL_AFTER} s: killed"
    else:
        code = exitcode or 0
        name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
        key, message = f"process died ({name})", f"the worker process died ({name})"
    t.inputs += 1
    entry = t.failures.setdefault(key, {"count": 0, "first": None})
    entry["count"] += 1
    if entry["first"] is None or index < entry["first"]["index"]:
        entry["first"] = {
            "level": t.level,
            "index": index,
            "replay": f"python -m fuzz.campaign --replay {t.level}:{seed}:{index}",
            "size": None,
            "ops": [],
            "settings": {},
            "message": message,
            "traceback": [],
        }


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _time_stats(t: Totals) -> dict[str, Any]:
    times = sorted(t.times)
    per_kib = sorted(x / max(s, MIN_SIZE) * 1024 for x, s in zip(t.times, t.sizes, strict=True))
    sizes = sorted(t.sizes)
    buckets: dict[int, list[float]] = {}
    for x, s in zip(t.times, t.sizes, strict=True):
        buckets.setdefault(max(s, 1).bit_length(), []).append(x)
    by_size = [
        {
            "size_from": 1 << (b - 1),
            "size_to": (1 << b) - 1,
            "inputs": len(v),
            "median_ms": round(statistics.median(v) * 1e3, 3),
            "max_ms": round(max(v) * 1e3, 3),
        }
        for b, v in sorted(buckets.items())
    ]
    return {
        "median_ms": round(_quantile(times, 0.5) * 1e3, 4),
        "p90_ms": round(_quantile(times, 0.9) * 1e3, 4),
        "p99_ms": round(_quantile(times, 0.99) * 1e3, 4),
        "max_ms": round(times[-1] * 1e3, 3) if times else 0,
        "mean_ms": round(statistics.fmean(times) * 1e3, 4) if times else 0,
        "total_run_s": round(sum(times), 1),
        "make_s": round(t.make_seconds, 1),
        "median_us_per_kib": round(_quantile(per_kib, 0.5) * 1e6, 2),
        "p99_us_per_kib": round(_quantile(per_kib, 0.99) * 1e6, 2),
        "size_median": int(_quantile([float(s) for s in sizes], 0.5)),
        "size_max": sizes[-1] if sizes else 0,
        "by_size": by_size,
    }


def _best_time(harness: Harness, case: Case, runs: int) -> float:
    """The shortest of `runs` runs of the input, cross-checks (API, command line) apart."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        extra = 0.0
        with contextlib.suppress(Exception):  # a failure: reported with the failures
            extra = harness.run(case).extra
        best = min(best, time.perf_counter() - t0 - extra)
    return best


def _retime(
    harness: Harness,
    seed: int,
    level: str,
    median_per_kib_us: float,
    items: list[tuple[float, int, int, float]],
) -> list[dict[str, Any]]:
    """Inputs timed again (best of RETIME_RUNS) in this process: the campaign's times include
    whatever else the machine did meanwhile. `flagged`: still above FLAG_PER_KIB times the
    level's median time per KiB and above FLAG_MS, and again after a pause (a busy moment
    of a shared machine can last the few milliseconds of one round)."""

    def too_slow(best: float, size: int) -> bool:
        per_kib = best / max(size, MIN_SIZE) * 1024 * 1e6
        return bool(
            median_per_kib_us
            and per_kib > FLAG_PER_KIB * median_per_kib_us
            and best * 1e3 > FLAG_MS
        )

    out = []
    for _key, index, size, elapsed in sorted(items, reverse=True)[:SLOW_KEPT]:
        case = harness.make(level, input_rng(seed, level, index))
        best = _best_time(harness, case, RETIME_RUNS)
        if too_slow(best, size):
            time.sleep(1.0)
            best = min(best, _best_time(harness, case, RETIME_RUNS))
        per_kib = best / max(size, MIN_SIZE) * 1024 * 1e6
        out.append(
            {
                "index": index,
                "size": size,
                "campaign_ms": round(elapsed * 1e3, 3),
                "retimed_ms": round(best * 1e3, 3),
                "us_per_kib": round(per_kib, 1),
                "x_median_per_kib": round(per_kib / median_per_kib_us, 1)
                if median_per_kib_us
                else None,
                "flagged": too_slow(best, size),
                "ops": case.ops[:8],
                "replay": f"python -m fuzz.campaign --replay {level}:{seed}:{index}",
            }
        )
    return out


def retime_report(path: Path, md: Path) -> dict[str, Any]:
    """Time the slowest inputs of a finished report again and rewrite it (and its markdown)."""
    report: dict[str, Any] = json.loads(path.read_text())
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    harness = Harness(load(), Path(tempfile.mkdtemp(prefix="pulsar-fuzz-retime-", dir=shm)))
    try:
        for level, d in report["levels"].items():
            median = d["time"]["median_us_per_kib"]
            for name in ("slowest_relative_to_size", "slowest"):
                items = []
                for s in d[name]:
                    took = s["campaign_ms"] / 1e3
                    key = took / max(s["size"], MIN_SIZE) if name != "slowest" else took
                    items.append((key, s["index"], s["size"], took))
                d[name] = _retime(harness, report["seed"], level, median, items)
    finally:
        shutil.rmtree(harness.workdir, ignore_errors=True)
    path.write_text(json.dumps(report, indent=1, default=_shown) + "\n")
    md.write_text(markdown(report), errors="backslashreplace")  # file names: any bytes
    return report


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _version() -> str:
    """The commit the campaign started on, `+changes` when dissector/ differs from it."""
    commit = _git("rev-parse", "HEAD") or "unknown"
    return commit + ("+changes" if _git("status", "--porcelain", "--", "dissector") else "")


def _compiled() -> bool:
    import dissector.pipeline

    return str(dissector.pipeline.__file__).endswith(".so")


def campaign(args: argparse.Namespace) -> dict[str, Any]:
    weights = dict(WEIGHTS)
    if args.levels:
        weights = {}
        for part in args.levels.split(","):
            name, _, w = part.partition("=")
            if name not in LEVELS:
                raise SystemExit(f"unknown level {name!r}; choose from {', '.join(LEVELS)}")
            weights[name] = float(w or 1)
    counts = plan(args.inputs, weights)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    base = tempfile.mkdtemp(prefix="pulsar-fuzz-", dir=shm)
    totals = {lv: Totals(lv) for lv in counts}
    harness_errors: dict[str, dict[str, Any]] = {}
    rss_jumps: list[dict[str, Any]] = []
    worker_rss: dict[int, int] = {}
    started = time.time()
    version = _version()
    t0 = time.perf_counter()
    done = 0
    last = t0
    ctx = get_context("fork")
    todo, results = ctx.Queue(), ctx.Queue()
    state = ctx.RawArray("q", 4 * args.jobs)
    pending = 0
    for task in tasks(counts, args.block):
        todo.put(task)
        pending += 1

    def start(slot: int) -> Any:
        state[4 * slot : 4 * slot + 4] = [-1, 0, 0, 0]
        # not daemonic: the multi level forks the parallel reader's workers from a worker
        # (daemonic processes may not); the parent stops every worker on its way out, and a
        # worker whose parent died gets EOF on the task queue
        proc = ctx.Process(
            target=_worker, args=(slot, args.seed, base, todo, results, state), daemon=False
        )
        proc.start()
        return proc

    workers = {slot: start(slot) for slot in range(args.jobs)}
    watch = {slot: (-1, -1, time.perf_counter()) for slot in workers}
    try:
        while pending:
            try:
                res = results.get(timeout=1.0)
            except queue.Empty:
                res = None
            if res is not None:
                pending -= 1
                totals[res.level].add(res)
                for key, entry in res.harness_errors.items():
                    mine = harness_errors.setdefault(key, {**entry, "count": 0, "level": res.level})
                    mine["count"] += entry["count"]
                rss_jumps.extend(res.rss_jumps)
                worker_rss[res.pid] = max(worker_rss.get(res.pid, 0), res.maxrss_kib)
                done += res.inputs
            now = time.perf_counter()
            for slot, proc in workers.items():
                lv, begin, index, stop = state[4 * slot : 4 * slot + 4]
                if proc.is_alive():
                    if watch[slot][:2] != (lv, index):
                        watch[slot] = (lv, index, now)
                    elif lv >= 0 and watch[slot][2] >= 0 and now - watch[slot][2] > KILL_AFTER:
                        proc.kill()  # stuck where SIGALRM cannot reach (native code)
                        proc.join()
                        watch[slot] = (lv, index, -1.0)
                    continue
                if lv < 0:
                    raise RuntimeError(
                        f"worker {slot} exited with {proc.exitcode} before any input"
                    )
                killed = watch[slot][2] < 0
                _died(totals[LEVELS[lv]], index, proc.exitcode, killed, args.seed)
                done += 1
                # The rest of its block, and what it had done (its result died with it).
                pending -= 1
                for part in ((begin, index), (index + 1, stop)):
                    if part[1] > part[0]:
                        todo.put((LEVELS[lv], *part))
                        pending += 1
                workers[slot] = start(slot)
                watch[slot] = (-1, -1, now)
            if now - last > args.progress:
                last = now
                fails = sum(len(t.failures) for t in totals.values())
                print(
                    f"{done:>9} inputs  {now - t0:7.1f} s  {done / (now - t0):7.0f}/s  "
                    f"{fails} distinct failures",
                    file=sys.stderr,
                    flush=True,
                )
        for _ in workers:
            todo.put(None)
        for proc in workers.values():
            proc.join(timeout=10)
    finally:
        for proc in workers.values():
            if proc.is_alive():
                proc.kill()
        shutil.rmtree(base, ignore_errors=True)
    wall = time.perf_counter() - t0
    children_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # The slowest inputs relative to their size, timed again here, one at a time.
    harness = Harness(load(), Path(tempfile.mkdtemp(prefix="pulsar-fuzz-retime-", dir=shm)))
    levels: dict[str, Any] = {}
    failures = []
    for lv, t in totals.items():
        stats = _time_stats(t)
        median = stats["median_us_per_kib"]
        retimed = lv not in NOT_RETIMED
        levels[lv] = {
            "inputs": t.inputs,
            "rejected_as_not_a_capture": t.rejected,
            "failed_inputs": sum(e["count"] for e in t.failures.values()),
            "time": stats,
            "slowest_relative_to_size": _retime(harness, args.seed, lv, median, t.slow)
            if retimed
            else [],
            "slowest": _retime(harness, args.seed, lv, median, t.slowest) if retimed else [],
            "anomaly_codes": dict(t.codes.most_common()),
        }
        for key, entry in t.failures.items():
            failures.append({"key": key, "level": lv, "count": entry["count"], **entry["first"]})
    shutil.rmtree(harness.workdir, ignore_errors=True)
    reached = set().union(*(t.codes for t in totals.values()))
    return {
        "command": " ".join(["python -m fuzz.campaign", *sys.argv[1:]]),
        "seed": args.seed,
        "jobs": args.jobs,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "commit": version,
        "compiled_modules": _compiled(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "inputs": sum(t.inputs for t in totals.values()),
        "inputs_per_level": {lv: t.inputs for lv, t in totals.items()},
        "wall_seconds": round(wall, 1),
        "distinct_failures": len(failures),
        "failures": sorted(failures, key=lambda f: -f["count"]),
        "harness_errors": harness_errors,
        "memory": {
            "peak_rss_mib_largest_worker": round(children_rss / 1024, 1),
            "peak_rss_mib_per_worker": sorted(round(v / 1024, 1) for v in worker_rss.values()),
            "limit_mib": MEMORY_LIMIT >> 20,
            "rss_jumps_over_mib": RSS_JUMP_KIB >> 10,
            "rss_jumps": sorted(rss_jumps, key=lambda j: -j["rise_kib"])[:20],
        },
        "levels": levels,
        "anomaly_codes_never_reached": sorted(set(REGISTRY) - reached),
    }


# --------------------------------------------------------------------------- report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Fuzzing campaign (issues 14, 31 and 42)",
        "",
        f"Command: `{report['command']}` (code: commit {report['commit']}, Python "
        f"{report['python']}, {report['cpus']} CPUs shared with other work, mypyc-compiled "
        f"modules: {'yes' if report['compiled_modules'] else 'no'}).",
        "",
        f"**{report['inputs']:,} inputs** in {report['wall_seconds']:,} s wall with "
        f"{report['jobs']} workers; **{report['distinct_failures']} distinct failures**; "
        f"peak RSS of the largest worker {report['memory']['peak_rss_mib_largest_worker']} MiB "
        f"(limit {report['memory']['limit_mib']} MiB).",
        "",
        "| level | inputs | rejected (not a capture) | failed | median ms | p99 ms | max ms "
        "| median µs/KiB | median size | max size |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lv, d in report["levels"].items():
        t = d["time"]
        lines.append(
            f"| {lv} | {d['inputs']:,} | {d['rejected_as_not_a_capture']:,} | "
            f"{d['failed_inputs']:,} | {t['median_ms']} | {t['p99_ms']} | {t['max_ms']} | "
            f"{t['median_us_per_kib']} | {t['size_median']:,} | {t['size_max']:,} |"
        )
    lines += ["", "## Failures", ""]
    if not report["failures"]:
        lines.append("None.")
    for f in report["failures"]:
        lines += [
            f"- **{f['key']}** ({f['level']}, {f['count']} inputs): {f['message'][:300]}",
            f"  first: `{f['replay']}`; made by {', '.join(map(str, f['ops'][:8]))}",
        ]
    if report["harness_errors"]:
        lines += ["", "Harness errors (bugs of fuzz/, not of the dissector):", ""]
        lines += [f"- {k}: {v['count']}" for k, v in report["harness_errors"].items()]
    lines += [
        "",
        "## Time against input size",
        "",
        "Median and maximum time per input for each size range (bytes, powers of two): "
        "growth with size should be at most proportional.",
        "",
    ]
    for lv, d in report["levels"].items():
        cells = ", ".join(
            f"{b['size_from']:,}+: {b['median_ms']} / {b['max_ms']} ms ({b['inputs']:,})"
            for b in d["time"]["by_size"]
        )
        lines.append(f"- {lv}: {cells}")
    lines += [
        "",
        "## Slowest inputs, timed again",
        "",
        "The campaign's own times include whatever else the machine did meanwhile: the "
        "slowest inputs of each level, absolute and relative to their size, are timed again "
        f"(best of {RETIME_RUNS}). Flagged: still above {FLAG_PER_KIB} times the level's "
        f"median µs/KiB and {FLAG_MS} ms, and again after a pause.",
        "",
        "| level | list | input | size | campaign ms | again ms | µs/KiB "
        "| times the median µs/KiB | flagged |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for lv, d in report["levels"].items():
        for title, name in (("per KiB", "slowest_relative_to_size"), ("absolute", "slowest")):
            for s in d[name][:3]:
                lines.append(
                    f"| {lv} | {title} | {s['index']} | {s['size']:,} | {s['campaign_ms']} | "
                    f"{s['retimed_ms']} | {s['us_per_kib']} | {s['x_median_per_kib']} | "
                    f"{'**yes**' if s['flagged'] else 'no'} |"
                )
    flagged = [
        (lv, s)
        for lv, d in report["levels"].items()
        for name in ("slowest_relative_to_size", "slowest")
        for s in d[name]
        if s["flagged"]
    ]
    lines += ["", f"Flagged inputs: {len(flagged)}."]
    lines += [f"- {lv} {s['index']}: `{s['replay']}` ({', '.join(s['ops'])})" for lv, s in flagged]
    mem = report["memory"]
    lines += [
        "",
        "## Memory",
        "",
        f"Peak RSS per worker: {', '.join(str(m) for m in mem['peak_rss_mib_per_worker'])} MiB. "
        f"Inputs that raised a worker's peak by more than {mem['rss_jumps_over_mib']} MiB: "
        f"{len(mem['rss_jumps'])}"
        + (
            " (largest: "
            + ", ".join(
                f"{j['level']} {j['index']} (+{j['rise_kib'] >> 10} MiB, {j['size']:,} B)"
                for j in mem["rss_jumps"][:5]
            )
            + ")"
            if mem["rss_jumps"]
            else ""
        )
        + ".",
        "",
        "## Anomaly codes never produced",
        "",
        ", ".join(f"`{c}`" for c in report["anomaly_codes_never_reached"]) or "None.",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- replay


def replay(spec: str, save: str | None) -> int:
    level, seed, index = spec.split(":")
    harness = Harness(load(), Path(tempfile.mkdtemp(prefix="pulsar-fuzz-replay-")))
    case = harness.make(level, input_rng(int(seed), level, int(index)))
    print(f"{level} input {index} of seed {seed}: {case.size} bytes; {case.ops}")
    print(f"settings: { {k: v for k, v in case.settings.items() if k not in ('cuts',)} }")
    if save:
        print(f"written to {', '.join(save_case(case, save))}")
    try:
        t0 = time.perf_counter()
        seen = harness.run(case)
        print(f"ok in {(time.perf_counter() - t0) * 1e3:.2f} ms; codes {sorted(seen.codes)}")
        return 0
    except Exception as exc:
        traceback.print_exc()
        print(f"FAILURE: {failure_key(exc)}")
        return 1
    finally:
        shutil.rmtree(harness.workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz.campaign", description=__doc__.split("\n")[0])
    p.add_argument("--inputs", type=int, default=10_000, help="inputs in total")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1, help="worker processes (at most 2 here)")
    p.add_argument("--levels", help="weights, e.g. pipeline=3,framing=1 (default: all)")
    p.add_argument("--block", type=int, default=BLOCK, help="inputs per task")
    p.add_argument("--out", default="reports/fuzz_campaign.json", help="the JSON report")
    p.add_argument("--md", help="the markdown summary (default: --out with .md)")
    p.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--replay", metavar="LEVEL:SEED:INDEX", help="make and run one input")
    p.add_argument("--save", help="with --replay: write the input to this file")
    p.add_argument(
        "--retime",
        action="store_true",
        help="time the slowest inputs of the --out report again and rewrite it and its markdown",
    )
    args = p.parse_args(argv)
    if args.replay:
        return replay(args.replay, args.save)
    if args.retime:
        out = Path(args.out)
        report = retime_report(out, Path(args.md) if args.md else out.with_suffix(".md"))
        flagged = sum(
            s["flagged"]
            for d in report["levels"].values()
            for name in ("slowest_relative_to_size", "slowest")
            for s in d[name]
        )
        print(f"{out}: slowest inputs timed again; {flagged} flagged", file=sys.stderr)
        return 0
    if args.inputs < 1 or args.jobs < 1:
        p.error("--inputs and --jobs must be at least 1")
    report = campaign(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=_shown) + "\n")
    md = Path(args.md) if args.md else out.with_suffix(".md")
    md.write_text(markdown(report), errors="backslashreplace")  # file names: any bytes
    print(
        f"{report['inputs']} inputs in {report['wall_seconds']} s: "
        f"{report['distinct_failures']} distinct failures; {out}, {md}",
        file=sys.stderr,
    )
    return 1 if report["failures"] or report["harness_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
