"""Coverage-guided runs (atheris, optional) of the sans-IO stages, on their pure-Python source.

Input: `--target framing|payload|capture`, libFuzzer options after them (`-runs=N`,
`-seed=S`, `-max_total_time=T`), atheris installed (`pip install atheris`: not a dependency).
Output: libFuzzer's statistics on stderr; a failure prints its traceback, writes the input
as `crash-*` (libFuzzer's naming, or `-artifact_prefix=`) and exits non-zero. The corpus
libFuzzer grows lives in a temporary folder, removed when the run ends.
Rules:
- atheris measures coverage by instrumenting Python bytecode, and the per-packet modules are
  mypyc-compiled C extensions it cannot see. So this loads `dissector` from a copy of its
  sources without the compiled modules (the same behaviour: the test suite runs on both,
  tests/test_pure_python.py) and instruments that copy.
- libFuzzer keeps the inputs that reach new code; each input is mutated by libFuzzer's own
  byte mutations or, half the time, by fuzz.mutators' structure-aware ones. Seeds are the
  samples' streams (framing), payload runs (payload) or capture windows (capture).
- The invariants are fuzz.targets': the same checks as the campaign.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from random import Random
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("framing", "payload", "capture")


def pure_copy(work: Path) -> Path:
    """A folder holding `dissector` as Python source only (no compiled modules)."""
    dest = work / "pure"
    shutil.copytree(ROOT / "dissector", dest / "dissector", ignore=shutil.ignore_patterns("*.so"))
    return dest


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv if argv is None else argv)
    if "--target" not in args[:-1]:
        print(f"usage: python -m fuzz.coverage --target {{{','.join(TARGETS)}}} [-runs=N]")
        return 2
    at = args.index("--target")
    target = args[at + 1]
    del args[at : at + 2]
    if target not in TARGETS:
        print(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
        return 2
    work = Path(tempfile.mkdtemp(prefix="pulsar-fuzz-cov-"))
    pid = os.fork()  # libFuzzer ends the process with C exit(): clean up from the parent
    if pid:
        _, status = os.waitpid(pid, 0)
        shutil.rmtree(work, ignore_errors=True)
        return os.waitstatus_to_exitcode(status)
    try:
        _fuzz(target, args, work)  # libFuzzer ends the process: returns only on setup errors
    except BaseException:
        traceback.print_exc()
    os._exit(1)


def _fuzz(target: str, args: list[str], work: Path) -> None:
    """Set up the pure-Python copy, the seeds and the callbacks; hand over to libFuzzer."""
    import atheris

    sys.path.insert(0, str(pure_copy(work)))
    for name in [m for m in sys.modules if m == "dissector" or m.startswith("dissector.")]:
        del sys.modules[name]  # loaded before the copy was on the path
    with atheris.instrument_imports(include=["dissector"]):
        import dissector.pulsar.framing as framing
        from fuzz import mutators as mu
        from fuzz.seeds import load
        from fuzz.targets import Case, Harness
    assert str(framing.__file__).endswith(".py"), framing.__file__
    corpus = load()
    harness = Harness(corpus, work / "inputs")
    seeds = _seed_inputs(target, corpus, mu)

    def one(data: bytes) -> None:
        if target == "capture":
            settings: dict[str, Any] = {}
            harness.run(Case("pipeline", len(data), [], data, settings))
            return
        rng = Random(len(data))
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(8)))
        settings = {
            "synced": bool(len(data) % 3),
            "max_frame_size": framing.DEFAULT_MAX_FRAME_SIZE,
            "cuts": cuts,
            "gaps": set(),
            "split_check": True,
            "max_uncompressed": 1 << 20,
            "preview": 8,
            "codec": len(data) % 6,
            "size": None,
            "count": 3,
        }
        harness.run(Case(target, len(data), [], data, settings))

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = Random(seed)
        if not data or rng.random() < 0.5:
            data = data or rng.choice(seeds)
            return bytes(atheris.Mutate(data, max_size))
        donor = rng.choice(seeds)
        if target == "capture":
            out = _capture_mutant(mu, rng, data, donor)
        else:
            out, _ = mu.mutate_stream(rng, data, [0], donor)
        return out[:max_size]

    corpus_dir = work / "corpus"  # the seeds, then what libFuzzer keeps (removed at exit)
    corpus_dir.mkdir()
    for i, seed in enumerate(seeds):
        (corpus_dir / f"seed{i}").write_bytes(seed)
    atheris.Setup([args[0], *args[1:], str(corpus_dir)], one, custom_mutator=mutate)
    atheris.Fuzz()


def _seed_inputs(target: str, corpus: Any, mu: Any) -> list[bytes]:
    if target == "framing":
        return [s.data[:8192] for s in corpus.streams]
    if target == "payload":
        return [mu.encode_payload_frames(run) for run in corpus.payload_runs]
    out = []
    for seed in corpus.captures:
        data, _ = mu.write_pcap(Random(0), seed.records[:20], [])
        out.append(data)
    return out


def _capture_mutant(mu: Any, rng: Random, data: bytes, donor: bytes) -> bytes:
    """Structure-aware damage of a capture given as bytes: read back its records when it
    still reads, else splice it with a seed."""
    import os

    from dissector.capture import open_capture
    from dissector.errors import InputError

    fd, name = tempfile.mkstemp(suffix=".pcap")
    try:
        os.write(fd, data)
        os.close(fd)
        with open_capture(name) as reader:
            recs = [mu.Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader]
    except InputError:
        recs = []
    finally:
        os.unlink(name)
    if not recs:
        return bytes(donor[: rng.randrange(len(donor) + 1)] + data)
    out, _, _ = mu.mutate_capture(rng, recs, recs)
    return bytes(out)


if __name__ == "__main__":
    sys.exit(main())
