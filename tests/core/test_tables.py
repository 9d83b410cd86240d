"""Every table, byte for byte, with the compiled stages on and turned off.

The reference is the same build read with `PULSAR_DISSECTOR_CORE=0` (dissector._core.SWITCH):
the readers then never call the C walk and every packet goes through `Pipeline.feed`
(headers parsed in Python, the shard told from the bytes), and the frame decoders never call
the C frame scan. With the stages on, the packets the walk parsed go through
`Pipeline.feed_parsed` and runs of whole frames in sync are scanned in C. All six tables,
written as Arrow IPC streams, must be the same bytes: on every bundled sample, on crafted
captures (every link type, byte order and timestamp resolution, pcapng interface rules, IP
fragments, payload faults, reordered/repeated/lost segments of several connections with
idle pauses), on mutated captures (fuzz/mutators.py), with the reading settings that change
the packet path (sharding, idle timeout, merging of captures taken at the same time). A
count of the
segments made in C and of the frames the C scan took shows that both compiled stages did
the work when on, and none when off; so does a count of the stream pieces the compiled
recent bytes (dissector/_core/recent.c: the retransmission check's memory) kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa
import pytest

from dissector import _core
from dissector.capture import open_capture
from dissector.events import Segment
from dissector.read import ReaderOptions, read_tables
from dissector.tables.schema import TABLES
from fuzz.mutators import Rec, mutate_capture
from tests.core.test_frames_wired import Scanned
from tests.support.core_captures import link_captures, odd_pcapng, tcp_scenarios
from tests.support.crafted import C2B, Session, msg, write_pcap
from tests.support.payload_faults import crafted as payload_faults

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "pcaps").glob("*.pcap*"))
#: Mutated captures read both ways per run of the suite.
MUTANTS = 400
#: Crafted TCP scenarios (tests/support/core_captures.tcp_scenarios) read both ways.
SCENARIOS = 60
#: Reading settings that change what happens to a packet before TCP.
SETTINGS = {
    "default": ReaderOptions(),
    "shard0of2": ReaderOptions(shard=(0, 2)),
    "shard1of2": ReaderOptions(shard=(1, 2)),
    "idle": ReaderOptions(idle_timeout=1.0),
    # the clock of other shards' packets: connections of this one end at the same packet
    "idle-shard": ReaderOptions(idle_timeout=1.0, shard=(1, 2)),
    "fields": ReaderOptions(fields=True, frame_bytes=True, payload_preview=8),
}

SHARDED = ("shard0of2", "shard1of2", "idle-shard")

pytestmark = pytest.mark.skipif(not _core.COMPILED, reason="pure-Python build: nothing to compare")


class Counted:
    """Segments the C walks gave (or, dealing, skipped: other shards') and frames the C
    scan gave, counted through `dissector._core`'s walk and scan factories."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.segments = 0
        pcap_walk, pcapng_walk = _core.pcap_walk, _core.pcapng_walk

        def counted(walk: Any) -> Any:
            def run(*args: Any) -> Any:
                skipped = _core.stats()["packets_skipped"]
                result = walk(*args)
                # those of this shard a dealing walk dealt (flow.shard.Dealt) included
                self.segments += sum(isinstance(item, Segment) for item in result[-1])
                self.segments += _core.stats()["packets_skipped"] - skipped
                return result

            return run

        monkeypatch.setattr(_core, "pcap_walk", lambda *a: counted(pcap_walk(*a)))
        monkeypatch.setattr(_core, "pcapng_walk", lambda *a: counted(pcapng_walk(*a)))
        self.scanned = Scanned(monkeypatch)

    @property
    def frames(self) -> int:
        return self.scanned.frames

    @property
    def recent(self) -> int:
        """Pieces the compiled recent bytes (dissector/_core/recent.c) kept."""
        return _core.stats()["recent_pieces"]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(monkeypatch)


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def tables(
    monkeypatch: pytest.MonkeyPatch, paths: Sequence[Path], options: ReaderOptions, on: bool
) -> dict[str, bytes]:
    monkeypatch.setattr(_core, "ENABLED", on)  # both stages: walk and frame scan
    made = read_tables([str(p) for p in paths], options)
    assert set(made) == set(TABLES)
    return {name: ipc(table) for name, table in made.items()}


def same_both_ways(
    monkeypatch: pytest.MonkeyPatch,
    counted: Counted,
    paths: Sequence[Path],
    options: ReaderOptions,
) -> int:
    """Compare every table both ways; the segments the compiled stage made."""
    before, frames_before, recent_before = counted.segments, counted.frames, counted.recent
    off = tables(monkeypatch, paths, options, on=False)
    assert counted.segments == before, "turned off, yet the C walk ran"
    assert counted.frames == frames_before, "turned off, yet the C frame scan ran"
    assert counted.recent == recent_before, "turned off, yet the C recent bytes ran"
    on = tables(monkeypatch, paths, options, on=True)
    for name in TABLES:
        assert on[name] == off[name], (name, [p.name for p in paths], options)
    return counted.segments - before


def every_capture(tmp_path: Path) -> Iterator[Path]:
    yield from SAMPLES
    yield from link_captures(tmp_path / "links")
    yield odd_pcapng(tmp_path)
    yield from (path for path, _ in payload_faults(tmp_path / "faults").values())


@pytest.mark.parametrize("setting", SETTINGS)
def test_samples_and_crafted_captures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: Counted, setting: str
) -> None:
    for folder in ("links", "faults"):
        (tmp_path / folder).mkdir()
    made = 0
    recent_before = counted.recent
    for path in every_capture(tmp_path):
        made += same_both_ways(monkeypatch, counted, [path], SETTINGS[setting])
    # every packet of the samples is a plain Ethernet TCP segment; the crafted ones add more
    assert made > sum(len(_records(p)) for p in SAMPLES)
    # the stream pieces delivered were kept by the compiled recent bytes (the samples: over
    # 1,000; shard 1 of 2: 39)
    assert counted.recent - recent_before > (30 if setting in SHARDED else 1000)
    # the samples' frames (675 in both directions) went through the C frame scan; a shard
    # reads some connections only (shard 1 of 2: 39 frames)
    assert counted.frames > (30 if setting in SHARDED else 600), counted.frames


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize("setting", ["default", "shard1of2", "idle", "idle-shard"])
def test_tcp_scenarios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: Counted, setting: str
) -> None:
    made = 0
    recent_before = counted.recent
    for path in tcp_scenarios(tmp_path, SCENARIOS):
        made += same_both_ways(monkeypatch, counted, [path], SETTINGS[setting])
    assert made > SCENARIOS * 10
    assert counted.frames > SCENARIOS
    assert counted.recent - recent_before > SCENARIOS * 5


def test_captures_merged_by_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: Counted
) -> None:
    """Captures taken at the same time merge into one group: packets renumbered, C segments
    and Python packets interleaved by timestamp."""
    paths = tcp_scenarios(tmp_path, 6, seed=2)
    for pair in pairwise(paths):
        assert same_both_ways(monkeypatch, counted, list(pair), ReaderOptions()) > 0
    assert same_both_ways(monkeypatch, counted, SAMPLES[:3], ReaderOptions(shard=(1, 2))) > 0


def test_retransmissions_that_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: Counted
) -> None:
    """Retransmitted and overlapping segments, some with changed bytes, over pieces the
    recent bytes merge (small frames) and keep as they came (large ones): the same
    `tcp.retransmission_mismatch` rows both ways, one per changed copy."""
    rng = Random(39)
    s = Session()
    s.handshake()
    s.frames([msg(C2B, "CONNECT", client_version="c")])
    segs = []
    for k in range(40):
        payload = rng.randbytes(rng.choice((3, 40, 900, 2000, 5000)))
        segs += s.frames([msg(C2B, "SEND", producer_id=1, sequence_id=k, payload=payload)])
    changed = 0
    for k in rng.sample(range(len(segs) - 1), 16):
        old = segs[k].payload + segs[k + 1].payload  # one segment, or two overlapped
        data = bytearray(old if rng.random() < 0.5 else segs[k].payload)
        if rng.random() < 0.7:
            data[rng.randrange(len(data))] ^= 0x40
            changed += 1
        s.send(C2B, bytes(data), at=segs[k].offset)
    s.frames([msg(C2B, "PING")])
    path = write_pcap(tmp_path / "resent.pcap", s.segs).path
    before = counted.recent
    assert same_both_ways(monkeypatch, counted, [path], ReaderOptions()) > 0
    assert counted.recent - before >= len(segs)
    anomalies = read_tables([str(path)], ReaderOptions())["anomalies"].to_pylist()
    codes = [row["code"] for row in anomalies]
    assert codes.count("tcp.retransmission_mismatch") == changed > 5


def _records(path: Path) -> list[Rec]:
    with open_capture(path) as reader:
        return [Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader]


def test_mutated_captures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: Counted
) -> None:
    samples = [_records(p) for p in SAMPLES]
    rng = Random(272)
    path = tmp_path / "mutant"
    made = 0
    for n in range(MUTANTS):
        records, donor = rng.choice(samples), rng.choice(samples)
        data, _, ops = mutate_capture(rng, records, donor)
        path.write_bytes(data)
        options = SETTINGS[("default", "idle", "shard1of2", "idle-shard")[n % 4]]
        try:
            made += same_both_ways(monkeypatch, counted, [path], options)
        except AssertionError as exc:
            raise AssertionError(f"mutant {n}: {ops}") from exc
        except Exception as exc:  # an unusable file must be refused alike both ways
            if type(exc).__name__ != "InputError":
                raise
    assert made > MUTANTS
    assert counted.frames > MUTANTS
