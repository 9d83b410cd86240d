"""The fuzzing campaign's generators and invariants under Hypothesis, deterministic, in `make test`.

Input: the sample captures (fuzz.seeds); per example a Random driven by Hypothesis
(`st.randoms`, derandomized: the same examples every run, and shrinkable) from which
fuzz.mutators makes a damaged capture file, packet list, byte stream or payload run.
Output: pass or fail, per level: the whole pipeline (capture bytes -> every Arrow table and
the text view), the capture readers, TCP reassembly, the frame decoder, payload decoding.
Rule: the invariants are fuzz.targets' (what `python -m fuzz.campaign` checks on a million
inputs): no exception but `InputError` for an unusable file; every anomaly code registered;
every string column valid UTF-8 and every time column a date; for every direction of every
connection frame + skipped + gap (+ preamble) bytes = stream bytes; contiguous TCP stream
offsets; the same frames however a stream is split. The last tests check the mutators do the
damage they name, with expectations from what was put in.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.capture import open_capture
from dissector.events import Conversation
from dissector.read import ReaderOptions, iter_events
from fuzz import mutators as mu
from fuzz.campaign import input_rng
from fuzz.seeds import Corpus, load
from fuzz.targets import SAMPLE_LEVELS, Harness

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RANDOMS = st.randoms(use_true_random=False)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load()


@pytest.fixture(scope="module")
def harness(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(corpus, tmp_path_factory.mktemp("fuzz"))


@pytest.mark.slow  # Hypothesis examples through every table (~5 s)
@settings(FUZZ, max_examples=400)
@given(rng=RANDOMS)
def test_pipeline_any_damaged_capture_gives_every_table(harness: Harness, rng: Any) -> None:
    harness.run(harness.make("pipeline", rng))


@settings(FUZZ, max_examples=300)
@given(rng=RANDOMS)
def test_capture_readers_on_damaged_files(harness: Harness, rng: Any) -> None:
    harness.run(harness.make("capture", rng))


@settings(FUZZ, max_examples=300)
@given(rng=RANDOMS)
def test_tcp_reassembly_on_damaged_packets(harness: Harness, rng: Any) -> None:
    harness.run(harness.make("tcp", rng))


@settings(FUZZ, max_examples=400)
@given(rng=RANDOMS)
def test_frame_decoder_on_damaged_streams(harness: Harness, rng: Any) -> None:
    harness.run(harness.make("framing", rng))


@settings(FUZZ, max_examples=300)
@given(rng=RANDOMS)
def test_payload_decoding_on_damaged_frames(harness: Harness, rng: Any) -> None:
    harness.run(harness.make("payload", rng))


@pytest.mark.parametrize("level", SAMPLE_LEVELS)  # the built levels: test_fuzz_levels.py
@settings(FUZZ, max_examples=150)
@given(index=st.integers(0, 10**9))
def test_campaign_inputs(harness: Harness, level: str, index: int) -> None:
    """Inputs exactly as `python -m fuzz.campaign --seed 0` makes them: a failure here
    replays with `python -m fuzz.campaign --replay LEVEL:0:INDEX`."""
    harness.run(harness.make(level, input_rng(0, level, index)))


# ------------------------------------------------------------ the mutators do what they say


def _stats(path: Path) -> list[Conversation]:
    return [ev for _, ev in iter_events(path, ReaderOptions()) if isinstance(ev, Conversation)]


def _produce_consume(corpus: Corpus) -> list[mu.Rec]:
    (seed,) = [c for c in corpus.captures if c.name == "produce_consume"]
    return list(seed.records)


def test_payload_insert_is_a_stream_edit_not_a_gap(corpus: Corpus, tmp_path: Path) -> None:
    """`edit_payload` moves later sequence numbers: the stream grows by what was inserted,
    with no gap, and every byte is still accounted for."""
    recs = _produce_consume(corpus)
    clean = tmp_path / "clean.pcap"
    clean.write_bytes(mu.write_pcap(random.Random(0), recs, [])[0])
    # A packet after the handshake (the sample's broker port is told by its CONNECT).
    i = [i for i, r in enumerate(recs) if (s := mu.tcp_span(r)) and s.end - s.payload > 20][5]
    span = mu.tcp_span(recs[i])
    assert span is not None
    old = recs[i].data[span.payload : span.end]
    mu.edit_payload(recs, i, old[:10] + b"\xff" * 7 + old[10:])
    edited = tmp_path / "edited.pcap"
    edited.write_bytes(mu.write_pcap(random.Random(0), recs, [])[0])
    (before,), (after,) = _stats(clean), _stats(edited)
    side, other = ("c2b", "b2c") if after.c2b != before.c2b else ("b2c", "c2b")
    a, b = getattr(after, side), getattr(before, side)
    assert getattr(after, other) == getattr(before, other)
    assert a.stream_bytes == b.stream_bytes + 7
    assert a.gap_bytes == 0
    assert a.frame_bytes + a.skipped_bytes + a.preamble_bytes == a.stream_bytes


@pytest.mark.parametrize("caplen", [1 << 31, 0xFFFFFFFF, 1000])
def test_lying_caplen_ends_the_reading_with_the_packets_before(
    corpus: Corpus, tmp_path: Path, caplen: int
) -> None:
    """A record header whose caplen runs past the file end (or above 2**31): the packets
    before it are read, then one issue; never an exception."""
    recs = _produce_consume(corpus)[:5]
    data, layout = mu.write_pcap(random.Random(0), recs, [])
    at = layout.spans[3][0]
    assert layout.order == "<"
    path = tmp_path / "lies.pcap"
    path.write_bytes(data[: at + 8] + struct.pack("<I", caplen) + data[at + 12 :])
    with open_capture(path) as reader:
        packets = list(reader)
    assert [p.data for p in packets] == [r.data for r in recs[:3]]
    assert len(reader.issues) == 1
    assert reader.issues[0].code in ("capture.truncated", "capture.corrupt_record")
    assert reader.issues[0].offset == at


def test_seq_wrap_keeps_the_stream_whole(corpus: Corpus, tmp_path: Path) -> None:
    """Sequence numbers moved to wrap past 2**32 mid-window: the same stream, no gap."""
    recs = _produce_consume(corpus)
    clean = tmp_path / "clean.pcap"
    clean.write_bytes(mu.write_pcap(random.Random(0), recs, [])[0])
    assert mu.op_seq_wrap(random.Random(3), recs, []) is not None
    wrapped = tmp_path / "wrapped.pcap"
    wrapped.write_bytes(mu.write_pcap(random.Random(0), recs, [])[0])
    (before,), (after,) = _stats(clean), _stats(wrapped)
    assert (after.c2b, after.b2c) == (before.c2b, before.b2c)
