"""Frame runs (dissector.pulsar.frame_runs): the frames and entities tables, made from the
compiled scan's column blocks, are the pure-Python tables.

The reference is the same build read with `PULSAR_DISSECTOR_CORE=0`: no C walk, no C scan,
a `Frame` per frame and the frames table's row function. With the core on, a read of the
frames and entities tables only (no pairs, no messages: the CLI, `read_capture` and Spark
ask for exactly that) gets SEND, SEND_RECEIPT, MESSAGE and simple ACK frames as
`FrameRun`s. Compared as Arrow IPC bytes: every bundled sample and crafted capture, crafted
TCP scenarios with loss, reordering and idle pauses, mutated captures, sharded and merged
reads; record batches cut at the same rows with a small batch size; what pending requests
and acknowledged ids hold, after every packet; the block layout against the extension's own
column names. A count of the frames the runs carried shows they did the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa
import pytest

from dissector import _core
from dissector.capture import open_capture
from dissector.pipeline import Pipeline
from dissector.read import ReaderOptions, read_tables
from dissector.read.tables import stream_tables
from dissector.tables import builders
from fuzz.mutators import mutate_capture
from tests.core.test_tables import SAMPLES, _records, every_capture, ipc
from tests.support import scenes
from tests.support.core_captures import tcp_scenarios
from tests.support.scenes import Scene

pytestmark = pytest.mark.skipif(not _core.COMPILED, reason="pure-Python build: nothing to compare")

TABLES = ("frames", "entities")
#: frames and entities only: what makes a read take runs
PLAIN = ReaderOptions(messages=False, pairs=False)


class RunCount:
    """Frames the run scan took, counted through `dissector._core.frames_block`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.frames = 0
        make = _core.frames_block

        def counted() -> Any:
            scan = make()
            if scan is None:
                return None

            def run(*args: Any) -> Any:
                result = scan(*args)
                self.frames += result[2]
                return result

            return run

        monkeypatch.setattr(_core, "frames_block", counted)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> RunCount:
    return RunCount(monkeypatch)


def _tables(
    monkeypatch: pytest.MonkeyPatch, paths: Sequence[Path], options: ReaderOptions, on: bool
) -> dict[str, bytes]:
    monkeypatch.setattr(_core, "ENABLED", on)
    made = read_tables([str(p) for p in paths], options, TABLES)
    return {name: ipc(table) for name, table in made.items()}


def same(
    monkeypatch: pytest.MonkeyPatch,
    runs: RunCount,
    paths: Sequence[Path],
    options: ReaderOptions = PLAIN,
) -> int:
    """Both tables alike with runs and in pure Python; the frames the runs carried."""
    before = runs.frames
    off = _tables(monkeypatch, paths, options, on=False)
    assert runs.frames == before, "turned off, yet the run scan ran"
    on = _tables(monkeypatch, paths, options, on=True)
    for name in TABLES:
        assert on[name] == off[name], (name, [p.name for p in paths], options)
    return runs.frames - before


def test_samples_and_crafted_captures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: RunCount
) -> None:
    for folder in ("links", "faults"):
        (tmp_path / folder).mkdir()
    for path in every_capture(tmp_path):
        same(monkeypatch, runs, [path])
    # the samples' SEND, SEND_RECEIPT and MESSAGE frames (hundreds) came in runs
    assert runs.frames > 300, runs.frames


@pytest.mark.parametrize("options", [PLAIN, replace(PLAIN, shard=(1, 2), idle_timeout=1.0)])
def test_tcp_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: RunCount, options: ReaderOptions
) -> None:
    for path in tcp_scenarios(tmp_path, 40, seed=27):
        same(monkeypatch, runs, [path], options)
    assert runs.frames > (10 if options.shard else 40)  # a shard reads some connections


def test_captures_merged_by_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: RunCount
) -> None:
    paths = tcp_scenarios(tmp_path, 4, seed=3)
    for pair in pairwise(paths):
        same(monkeypatch, runs, list(pair))
    assert runs.frames > 0


def test_mutated_captures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: RunCount) -> None:
    samples = [_records(p) for p in SAMPLES]
    rng = Random(2705)
    path = tmp_path / "mutant"
    for n in range(200):
        records, donor = rng.choice(samples), rng.choice(samples)
        data, _, ops = mutate_capture(rng, records, donor)
        path.write_bytes(data)
        try:
            same(monkeypatch, runs, [path])
        except AssertionError as exc:
            raise AssertionError(f"mutant {n}: {ops}") from exc
        except Exception as exc:  # an unusable file must be refused alike both ways
            if type(exc).__name__ != "InputError":
                raise
    assert runs.frames > 50  # mutants that keep frames in sync


def _into(batches: list[pa.RecordBatch]) -> Any:
    return lambda _, batch: batches.append(batch)


def test_batches_cut_at_the_same_rows(monkeypatch: pytest.MonkeyPatch, runs: RunCount) -> None:
    """Rows of runs and of single frames interleaved, batches of 7 rows: the same batches."""
    monkeypatch.setattr(builders, "BATCH_ROWS", 7)
    made: dict[bool, list[pa.RecordBatch]] = {}
    for on in (False, True):
        monkeypatch.setattr(_core, "ENABLED", on)
        batches: list[pa.RecordBatch] = []
        stream_tables([str(p) for p in SAMPLES[:4]], PLAIN, ["frames"], _into(batches))
        made[on] = batches
    assert len(made[False]) > 10  # the small batch size took effect
    assert [b.num_rows for b in made[True]] == [b.num_rows for b in made[False]]
    for a, b in zip(made[True], made[False], strict=True):
        assert a.equals(b)
    assert runs.frames > 0


def _state(pipe: Pipeline) -> dict[int, Any]:
    """What every open connection's state holds: the pending count, the SENDs and deliveries
    waiting (none without pairs), the entities."""

    def when(item: Any) -> tuple[int, int]:
        return (item.last_ts, item.stream_offset)

    out = {}
    for conn_id, conv in pipe._convs.items():
        st = conv.state
        out[conn_id] = (
            st._pending,
            {k: [when(f) for f in q] for k, q in st._sends.items()},
            {c: [(k, when(f)) for k, f in d.live.items()] for c, d in st._delivered.items()},
            {c: list(d.items()) for c, d in st._acked_ids.items()},
            [repr(e) for e in [*st.producers.values(), *st.consumers.values()]],
        )
    return out


def test_pending_requests_as_shedding_reads_them(runs: RunCount) -> None:
    """After every packet, the state a run leaves (the count of pending requests; no SEND or
    delivery waits without pairs; the entities and their counts) is what its frames leave
    one by one."""
    for path in SAMPLES:
        pipes = [Pipeline(pairs=False, frame_runs=on) for on in (False, True)]
        with open_capture(path) as reader:
            for pkt in reader:
                for pipe in pipes:
                    pipe.feed(pkt)
                assert _state(pipes[0]) == _state(pipes[1]), path.name
    assert runs.frames > 150


def _diagnosed_scene(path: Path) -> Path:
    """One connection that produces (a receipt out of order, a SEND never answered) and
    consumes (deliveries, a redelivery after an individual and a cumulative ack)."""
    s = Scene()
    s.open()
    for m in [*scenes.producer(), *scenes.subscribe(), scenes.flow(100)]:
        s.at(0.1, m)
    for seq in range(6):
        s.at(0.2 + seq / 100, scenes.send(seq))
    for seq in (1, 0, 2, 3, 4):
        s.at(0.3 + seq / 100, scenes.receipt(seq, entry=seq))
    for entry in range(5):
        s.at(0.4 + entry / 100, scenes.message(entry))
    s.at(0.5, scenes.ack(0))
    s.at(0.51, scenes.ack(2, cumulative=True))
    s.at(0.6, scenes.message(1))  # delivered again after the cumulative ack
    s.close(40.0)
    return s.write(path)


def test_findings_read_one_frame_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: RunCount
) -> None:
    """A read that makes findings takes no runs (the rules read frames one by one): its
    findings are the pure-Python ones, and its frames those of a frames read with runs."""
    path = _diagnosed_scene(tmp_path / "scene.pcap")
    monkeypatch.setattr(_core, "ENABLED", True)
    both = read_tables([str(path)], PLAIN, ("frames", "findings"))
    assert runs.frames == 0, "a read that makes findings took frame runs"
    alone = read_tables([str(path)], PLAIN, ("frames",))
    assert runs.frames > 10  # this capture's SENDs, receipts, deliveries and acks
    monkeypatch.setattr(_core, "ENABLED", False)
    pure = read_tables([str(path)], PLAIN, ("frames", "findings"))
    assert ipc(both["frames"]) == ipc(alone["frames"]) == ipc(pure["frames"])
    assert ipc(both["findings"]) == ipc(pure["findings"])
    codes = set(both["findings"].column("code").to_pylist())
    # what the scene did: a receipt for sequence 1 while 0 was the oldest pending, a
    # delivery of an id its subscription had acknowledged (cumulatively)
    assert {"producer.receipt_out_of_order", "consumer.redelivered_after_ack"} <= codes


def test_journeys_read_one_frame_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: RunCount
) -> None:
    """A read that makes journeys takes no runs (the joiner reads frames one by one): its
    journeys are the pure-Python ones."""
    path = _diagnosed_scene(tmp_path / "scene.pcap")
    monkeypatch.setattr(_core, "ENABLED", True)
    both = read_tables([str(path)], PLAIN, ("frames", "journeys"))
    assert runs.frames == 0, "a read that makes journeys took frame runs"
    monkeypatch.setattr(_core, "ENABLED", False)
    pure = read_tables([str(path)], PLAIN, ("frames", "journeys"))
    assert ipc(both["frames"]) == ipc(pure["frames"])
    assert ipc(both["journeys"]) == ipc(pure["journeys"])
    rows = both["journeys"].to_pylist()
    # what the scene did: six SENDs, five receipted and delivered, entry 1 delivered twice
    assert sorted(r["sequence_id"] for r in rows) == list(range(6))
    assert {r["entry_id"]: r["deliveries"] for r in rows} == {
        0: 1, 1: 2, 2: 1, 3: 1, 4: 1, None: 0
    }  # fmt: skip
