"""FrameDecoder with the compiled frame scan wired in, against FrameDecoder without it.

The reference is the same decoder with the scan turned off (`dissector._core.ENABLED` False,
the Python code alone). Both get the same stream in the same pieces (random sizes, from one
byte to several frames), some with a gap, some with `keep_raw`, some with a small frame
size limit; every event (frames with their protobuf parts, payload views and provenance,
anomalies) and the byte accounting must be equal. Streams: both directions of every bundled
sample, pcaps/streams/*.bin, the framing benchmark's stream, streams with a bad checksum made
by hand, and mutated streams (fuzz.mutators.mutate_stream). A count of the frames the scan
returned shows it did the work (and that a bad checksum verdict went through it).
"""

from __future__ import annotations

from random import Random
from typing import Any

import pytest

from benchmarks.bench_framing import build_stream
from dissector import _core
from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly, Checksum, Frame
from dissector.pulsar.framing import FrameDecoder
from fuzz.mutators import mutate_stream
from tests.core.test_frames_differential import frames_stage, python_events, sample_streams

#: Mutated streams decoded both ways per run of the suite.
MUTANTS = 1500
_INVALID = 3  # frames.h PD_CHECKSUM_INVALID

pytestmark = pytest.mark.skipif(_core.frames_native is None, reason="pure-Python build")


class Scanned:
    """Frames the compiled scan returned, counted through `dissector._core.frames_scan`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.frames = self.bad_checksums = 0
        make = _core.frames_scan

        def counting() -> Any:
            scan = make()
            if scan is None:
                return None

            def run(*args: Any) -> Any:
                result = scan(*args)
                self.frames += len(result[2])
                self.bad_checksums += sum(row[3] == _INVALID for row in result[2])
                return result

            return run

        monkeypatch.setattr(_core, "frames_scan", counting)


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> Scanned:
    return Scanned(monkeypatch)


def decode(stream: bytes, plan: list[int], *, on: bool, **options: Any) -> tuple[list[Any], Any]:
    """Events and stats of one decoder fed `stream` in pieces; a negative size is a gap."""
    with frames_stage(on):
        decoder = FrameDecoder(**options)
    events: list[Any] = []
    pos = 0
    for n, size in enumerate(plan):
        if size < 0:
            events += decoder.gap(-size)
            pos -= size
        else:
            events += decoder.feed(stream[pos : pos + size], packet=n + 1, ts=1000 * n)
            pos += size
    events += decoder.feed(stream[pos:], packet=len(plan) + 1)
    events += decoder.close()
    return events, decoder.stats


def pieces(rng: Random, length: int, gap: bool) -> list[int]:
    plan: list[int] = []
    left = length
    while left > 0 and len(plan) < 400:
        size = min(
            left, rng.choice((rng.randint(1, 40), rng.randint(40, 600), rng.randint(600, 9000)))
        )
        if gap and rng.random() < 0.02:
            size = -size
        plan.append(size)
        left -= abs(size)
    return plan


def same_both_ways(stream: bytes, rng: Random) -> None:
    plan = pieces(rng, len(stream), gap=rng.random() < 0.3)
    options: dict[str, Any] = {"keep_raw": rng.random() < 0.3, "conn_id": 7}
    if rng.random() < 0.1:
        options["max_frame_size"] = rng.choice((64, 300))
    off = decode(stream, plan, on=False, **options)
    on = decode(stream, plan, on=True, **options)
    assert on[0] == off[0], (plan, options)
    assert on[1] == off[1]


def test_sample_streams(scanned: Scanned) -> None:
    rng = Random(4)
    streams = [*sample_streams(), build_stream(20)[0]]
    for stream in streams:
        for _ in range(3):
            same_both_ways(stream, rng)
    assert scanned.frames > 3 * 600, vars(scanned)


def test_a_bad_checksum_is_the_same_anomaly(scanned: Scanned) -> None:
    """A payload byte flipped in each checksummed frame of a sample stream: the scan takes
    the frames and gives the verdict; the decoder makes the same anomalies and frames."""
    stream = max(sample_streams(), key=lambda s: s.count(b"\x0e\x01"))
    frames = [e for e in python_events(stream) if isinstance(e, Frame)]
    damaged = bytearray(stream)
    flipped = 0
    for f in frames:
        if f.checksum is Checksum.VALID:
            damaged[f.stream_offset + 4 + f.total_size - 1] ^= 0x40  # the payload's last byte
            flipped += 1
    assert flipped > 5
    rng = Random(5)
    for _ in range(3):
        same_both_ways(bytes(damaged), rng)
    events, _ = decode(bytes(damaged), [len(damaged)], on=True)
    bad = [
        e for e in events if isinstance(e, Anomaly) and e.code == AnomalyCode.PULSAR_BAD_CHECKSUM
    ]
    assert len(bad) == flipped
    assert scanned.bad_checksums >= 4 * flipped, vars(scanned)


def test_mutated_streams(scanned: Scanned) -> None:
    streams = sample_streams()
    rng = Random(2727)
    for n in range(MUTANTS):
        stream = rng.choice(streams)
        offsets = [e.stream_offset for e in python_events(stream) if isinstance(e, Frame)]
        data, ops = mutate_stream(rng, stream, offsets, rng.choice(streams))
        try:
            same_both_ways(data, rng)
        except AssertionError as exc:
            raise AssertionError(f"mutant {n}: {ops}") from exc
    assert scanned.frames > 10 * MUTANTS, vars(scanned)


def test_turned_off_the_scan_never_runs(scanned: Scanned) -> None:
    for stream in sample_streams()[:4]:
        decode(stream, [len(stream)], on=False)
    assert scanned.frames == 0
