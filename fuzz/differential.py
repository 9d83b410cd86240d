"""The compiled core against the Python stages on mutated captures: every table, both ways.

Input: a seed, a number of inputs, a report path (`python -m fuzz.differential --inputs N
--seed S --out reports/fuzz_differential.md`).
Output: the report: inputs, reads compared, failures with the operations that made each
input and the replay command; exit 1 on any difference. (That the compiled stages did the
work is counted by tests/core, not here.)
Rule: each input is a capture mutated from the bundled samples (fuzz.mutators.mutate_capture,
a function of the seed and the input's index), read in this process twice per setting with
`dissector._core.ENABLED` on and off: all six tables with the default settings, and the
frames and entities tables alone (the read that takes frame runs, dissector.pulsar.
frame_runs), and messages with values, journeys and findings (issue 42's surfaces), and every
fourth input also as both shards of a `-j 2` read, compared as Arrow IPC bytes. An input the
reader refuses must be refused alike both ways. The sample of this in `make test` is
tests/core/test_tables.py and tests/core/test_frame_runs.py (600 mutants); this runs the
campaign's hundreds of thousands.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from random import Random

import pyarrow as pa

from dissector import _core
from dissector.capture import open_capture
from dissector.read import ReaderOptions, read_tables
from fuzz.mutators import Rec, mutate_capture

ROOT = Path(__file__).resolve().parents[1]
#: (name, tables, options) of the reads compared
READS = (
    ("all", None, ReaderOptions()),
    ("frames", ("frames", "entities"), ReaderOptions(messages=False, pairs=False)),
    # issue 42's surfaces: messages with values, journeys, findings
    ("values", ("messages", "journeys", "findings"), ReaderOptions(values=True)),
)
#: Every SHARD_EVERY-th input is also read as the two shards of a `-j 2` read (every table),
#: where the compiled walk deals packets to shards.
SHARDS = tuple((f"shard {k} of 2", None, ReaderOptions(shard=(k, 2))) for k in range(2))
SHARD_EVERY = 4


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _read(path: Path, tables: tuple[str, ...] | None, options: ReaderOptions, on: bool) -> object:
    _core.ENABLED = on and _core.COMPILED  # the one switch, as PULSAR_DISSECTOR_CORE sets it
    try:
        made = read_tables([str(path)], options, tables)
    except Exception as exc:  # refused: compared by kind and message
        return (type(exc).__name__, str(exc))
    return {name: _ipc(t) for name, t in made.items()}


def _records(path: Path) -> list[Rec]:
    with open_capture(path) as reader:
        return [Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader]


def run(inputs: int, seed: int, start: int = 0) -> tuple[int, int, list[str]]:
    """Compare `inputs` mutants from index `start`; (reads compared, inputs read rather
    than refused, failures)."""
    samples = [_records(p) for p in sorted((ROOT / "pcaps").glob("*.pcap*"))]
    failures: list[str] = []
    compared = 0
    read_ok = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutant"
        for n in range(start, start + inputs):
            rng = Random(f"{seed}:{n}")
            records, donor = rng.choice(samples), rng.choice(samples)
            data, _, ops = mutate_capture(rng, records, donor)
            path.write_bytes(data)
            for name, tables, options in READS + (SHARDS if n % SHARD_EVERY == 0 else ()):
                off = _read(path, tables, options, on=False)
                on = _read(path, tables, options, on=True)
                compared += 1
                if on != off:
                    failures.append(
                        f"input {n} ({name}): {ops}; replay: python -m fuzz.differential "
                        f"--seed {seed} --start {n} --inputs 1"
                    )
            if isinstance(on, dict):
                read_ok += 1
    return compared, read_ok, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if not _core.COMPILED:
        print("fuzz.differential: the compiled core is not built: nothing to compare")
        return 1
    began = time.monotonic()
    compared, read_ok, failures = run(args.inputs, args.seed, args.start)
    took = time.monotonic() - began
    lines = [
        "# Differential fuzzing: compiled core against the Python stages",
        "",
        f"`python -m fuzz.differential --inputs {args.inputs} --seed {args.seed}"
        f" --start {args.start}`",
        "",
        f"- mutated captures: {args.inputs:,} (read by both: {read_ok:,}; the rest refused"
        " alike both ways or compared as refusals)",
        f"- reads compared (every table; frames and entities with frame runs; messages with"
        f" values, journeys and findings; every {SHARD_EVERY}th input as both shards of 2):"
        f" {compared:,}",
        f"- differences: **{len(failures)}**",
        f"- time: {took:,.0f} s",
        "",
        *(f"- {f}" for f in failures[:50]),
    ]
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
