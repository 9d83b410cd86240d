"""Issue 27's targets (the compiled core), judged on the measured results of one benchmark run.

Input: case results by key (status, median time, rates, peak memory).
Output: one row per target: what is measured, the value, the goal, and met (True/False), or
None with the reason when a command it needs did not run correctly.
Rules: throughput targets use the median wall time of whole processes; ratios compare
medians of the same run on the same file; memory targets use the peak RSS of the whole
process tree (benchmarks.measure); a command that failed or whose output did not check out
meets no target. "Independent of capture size": the full capture's peak within
max(25 MB, 10%) of the half capture's.
"""

from __future__ import annotations

from typing import Any

Result = dict[str, Any]

RSS_LIMIT_MB = 300.0
SAME_RSS_SLACK = (25.0, 0.10)  # MB, fraction


def _get(results: dict[str, Result], *keys: str) -> tuple[list[Result], str]:
    """The results of `keys`, and why not when one of them is missing or failed."""
    found = [results.get(k) for k in keys]
    for key, r in zip(keys, found, strict=True):
        if r is None:
            return [], f"{key} not run"
        if r["status"] != "ok":
            return [], f"{key}: {r['status']}: {r['detail']}"
    return [r for r in found if r is not None], ""


def _row(
    name: str, measured: str, goal: str, value: float | None, met: bool | None, why: str
) -> dict[str, Any]:
    return {
        "target": name,
        "measured": measured,
        "goal": goal,
        "value": value,
        "met": met,
        "note": why,
    }


def _at_least(
    name: str, measured: str, goal: float, unit: str, value: float | None, why: str
) -> dict[str, Any]:
    met = None if value is None else value >= goal
    return _row(name, measured, f">= {goal:,.10g} {unit}", value, met, why)


def _ratio(results: dict[str, Result], slow: str, fast: str) -> tuple[float | None, str]:
    """How many times faster `fast` ran than `slow` (median wall times, same run)."""
    got, why = _get(results, fast, slow)
    return (got[1]["summary"]["median_s"] / got[0]["summary"]["median_s"] if got else None), why


def _rate(results: dict[str, Result], key: str, rate: str) -> tuple[float | None, str]:
    got, why = _get(results, key)
    return (got[0]["rates"][rate] if got else None), why


def evaluate(results: dict[str, Result]) -> list[dict[str, Any]]:
    rows = []
    value, why = _rate(results, "ours.small.j1", "packets_per_s")
    rows.append(
        _at_least(
            "small capture to a frames parquet, -j 1", "packets/s", 300_000, "packets/s", value, why
        )
    )
    value, why = _ratio(results, "tshark.small.fields", "ours.small.j1")
    rows.append(
        _at_least(
            "the same, against tshark + Lua + protobuf", "times faster", 30, "times", value, why
        )
    )
    value, why = _ratio(results, "tshark.small.tcp", "ours.small.j1")
    rows.append(
        _at_least(
            "the same, against tshark reading TCP only", "times faster", 5, "times", value, why
        )
    )
    value, why = _rate(results, "ours.small.all1", "packets_per_s")
    rows.append(
        _at_least(
            "small capture to all six tables (-o DIR), -j 1",
            "packets/s",
            150_000,
            "packets/s",
            value,
            why,
        )
    )
    value, why = _rate(results, "ours.large.j1", "mb_per_s")
    rows.append(
        _at_least("1.2 GB capture to a frames parquet, -j 1", "MB/s", 600, "MB/s", value, why)
    )

    for key, what in (
        ("ours.large.frames", "1.2 GB capture to a frames parquet"),
        ("ours.half.frames", "half of it to a frames parquet"),
        ("ours.large.summary", "summary of the 1.2 GB capture"),
        ("ours.large.all", "1.2 GB capture to all six tables (-o DIR)"),
    ):
        got, why = _get(results, key)
        value = got[0]["summary"]["peak_mb"] if got else None
        met = None if value is None else value < RSS_LIMIT_MB
        rows.append(_row(what, "peak memory MB", f"< {RSS_LIMIT_MB:.0f} MB", value, met, why))

    got, why = _get(results, "ours.large.frames", "ours.half.frames")
    value = got[0]["summary"]["peak_mb"] - got[1]["summary"]["peak_mb"] if got else None
    slack = max(SAME_RSS_SLACK[0], SAME_RSS_SLACK[1] * got[1]["summary"]["peak_mb"]) if got else 0
    met = None if value is None else abs(value) <= slack
    goal = f"within max({SAME_RSS_SLACK[0]:.0f} MB, {SAME_RSS_SLACK[1]:.0%})"
    rows.append(
        _row("peak RSS independent of capture size (full - half)", "MB", goal, value, met, why)
    )

    got, why = _get(results, "ours.large.j1", "ours.large.j2")
    value = got[0]["summary"]["median_s"] / got[1]["summary"]["median_s"] if got else None
    rows.append(
        _at_least("1.2 GB capture, -j 2 against -j 1", "speed-up", 1.8, "times", value, why)
    )

    got, why = _get(results, "ours.mib.messages")
    value = got[0]["rates"]["mb_per_s"] if got else None
    rows.append(
        _at_least(
            "1 MiB messages to a messages parquet", "MB/s of capture", 1000, "MB/s", value, why
        )
    )
    return rows
