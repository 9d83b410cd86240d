"""Latency statistics, defined once: the summary, the report and the fleet job use these.

Input: timeline record batches (as a read streams them), or one request command's latencies
in microseconds.
Output: per request command (`Latencies`): the latencies of its answered requests, and their
statistics (`describe`): COUNT, one column per PERCENTILES (`percentile_name`) and MAX, in
milliseconds (`latency_ms`).
Rules:
- Only answered pairs count (outcome in ANSWERED: success or error); an unanswered request has
  no latency, an unmatched response no request.
- Percentiles are exact, with linear interpolation between the closest ranks: for the n
  values sorted, x[0] <= ... <= x[n-1], the percentile p (0 to 1) is x[i] + f * (x[i+1] - x[i])
  where i + f = (n - 1) * p (i whole, 0 <= f < 1). This is numpy's default method ("linear"),
  pandas' `quantile` and Spark SQL's exact `percentile`, so the local commands (numpy, here)
  and the fleet job (Spark, dissector.frontends.fleet, with these constants and column names)
  give the same numbers; tests/frontends/test_spark_lake.py compares them.
- Milliseconds are microseconds / 1000 rounded to 3 decimals (whole microseconds: nothing is
  lost), after the percentile is taken in microseconds.
- Memory: one 8-byte integer per answered request (exact percentiles need every value).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dissector.events import Outcome

#: The percentiles shown, as fractions (the column names say p50, p90, p99).
PERCENTILES = (0.5, 0.9, 0.99)
#: Outcomes that have a latency: a request and its response were both seen.
ANSWERED = (Outcome.SUCCESS.value, Outcome.ERROR.value)
#: Names of the statistics of one request command, as `describe` and the fleet job give them.
COUNT = "count"
MAX = "max_ms"


def percentile_name(p: float) -> str:
    """The name of percentile `p` (a fraction): 0.5 -> p50_ms."""
    return f"p{round(p * 100)}_ms"


#: Statistics in milliseconds (every name but COUNT), in the order they are shown.
MS_NAMES = (*(percentile_name(p) for p in PERCENTILES), MAX)


def latency_ms(us: float) -> float:
    """A latency in microseconds as the summaries show it: milliseconds, 3 decimals."""
    return round(float(us) / 1000, 3)


def describe(us: np.ndarray) -> dict[str, float | int]:
    """COUNT, the PERCENTILES and MAX of one command's latencies (µs, at least one)."""
    values = us.astype("float64")
    stats: dict[str, float | int] = {COUNT: len(values)}
    for p in PERCENTILES:
        stats[percentile_name(p)] = latency_ms(float(np.quantile(values, p, method="linear")))
    stats[MAX] = latency_ms(float(values.max()))
    return stats


class Latencies:
    """The latencies of answered requests, per request command, from timeline batches."""

    def __init__(self) -> None:
        self._parts: dict[str, list[np.ndarray]] = {}  # command -> int64 arrays, in order

    def __bool__(self) -> bool:
        return bool(self._parts)

    def add(
        self, batch: pa.RecordBatch, outcome: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Keep the latencies of a timeline batch's answered rows (outcome: the batch's
        outcome column as an object array, when the caller has it already); returns which
        rows are answered and their latencies (µs, int64)."""
        if outcome is None:
            outcome = np.asarray(batch.column("outcome").to_pylist(), dtype=object)
        answered = np.zeros(len(outcome), dtype=bool)
        for value in ANSWERED:
            answered |= outcome == value
        if not answered.any():
            return answered, np.empty(0, np.int64)
        column = batch.column("latency_us").to_numpy(zero_copy_only=False)
        latency = column[answered].astype(np.int64)
        request = np.asarray(batch.column("request_command").to_pylist(), dtype=object)
        commands = request[answered]
        # new commands are keyed by name: never in a set's order, which changes with the
        # hash seed from one run to the next (the report's ties, the summary's JSON)
        for command in sorted(set(commands.tolist()), key=str):
            self._parts.setdefault(str(command), []).append(latency[commands == command])
        return answered, latency

    def values(self) -> dict[str, np.ndarray]:
        """command -> every latency kept (µs, int64), commands in the order first keyed."""
        return {command: np.concatenate(parts) for command, parts in self._parts.items()}

    def stats(self) -> dict[str, dict[str, float | int]]:
        """command -> `describe` of its latencies, commands in the order first keyed."""
        return {command: describe(us) for command, us in self.values().items()}
