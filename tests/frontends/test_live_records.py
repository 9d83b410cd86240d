"""The records `live` passes from its capturing to its dissecting process, and their walk.

The reference for each packet is `dissector.net.headers.parse_layers` of the RawPacket the
live path made before the compiled walk (number, time, the source's link type, bytes, their
length); the compiled walk of the records must give the same parse result per packet (a
Segment made in C, or the RawPacket itself for the Python path), on every bundled sample,
crafted captures of every link type, and mutated packets (fuzz/mutators.py).
"""

from __future__ import annotations

from pathlib import Path
from random import Random

import pytest

from dissector import _core
from dissector._core import Walked
from dissector.capture import open_capture
from dissector.errors import InputError
from dissector.events import RawPacket, Segment
from dissector.frontends.live.records import RECORD, Walk, records, split_records, whole
from dissector.net.headers import parse_layers
from fuzz.mutators import Rec, mutate_capture
from tests.support.core_captures import link_captures

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "pcaps").glob("*.pcap*"))
MUTANTS = 1500  # mutated captures whose packets are walked per run of the suite
U32_SECONDS = 1 << 32  # what a record's seconds hold (the kernel's clock: until 2106)

needs_core = pytest.mark.skipif(not _core.COMPILED, reason="pure-Python build: no compiled stage")

Packets = list[tuple[int, bytes]]


def packets_of(path: Path) -> dict[int, Packets]:
    """The packets of a capture by link type, as a live source would give them."""
    out: dict[int, Packets] = {}
    with open_capture(path) as reader:
        for p in reader:
            if 0 <= p.ts < U32_SECONDS * 1_000_000:
                out.setdefault(p.linktype, []).append((p.ts, p.data))
    return out


def compare(linktype: int, batch: Packets, first: int = 0) -> list[Walked]:
    """The compiled walk of `batch` against the Python parse, packet by packet."""
    got = Walk(linktype, compiled=True)(records(batch), first)
    assert len(got) == len(batch)
    for number, ((ts, data), item) in enumerate(zip(batch, got, strict=True), first + 1):
        raw = RawPacket(number, ts, linktype, data, len(data))
        if type(item) is Segment:
            assert item == parse_layers(raw), number
        else:
            assert item == raw, number
    return got


def test_records_round_trip_and_only_whole_ones_are_taken() -> None:
    batch = [(1_700_000_000_123_456, b"abc"), (0, b""), (4_294_967_295_999_999, b"x" * 300)]
    buf = records(batch)
    # 1,700,000,000 s = 0x6553F100, 123,456 µs = 0x1E240, little-endian
    assert buf[: RECORD.size] == bytes.fromhex("00f1536540e201000300000003000000")
    assert split_records(buf) == batch
    ends = {0, 19, 35, 351}  # record boundaries: 16 + 3, + 16 + 0, + 16 + 300
    for cut in range(len(buf) + 1):
        assert whole(buf[:cut]) == max(e for e in ends if e <= cut)


def test_without_the_compiled_walk_every_packet_is_a_raw_packet() -> None:
    batch = [(5, b"\x00" * 60), (6, b"\x01" * 20)]
    got = Walk(1, compiled=False)(records(batch), 41)
    assert got == [RawPacket(42, 5, 1, b"\x00" * 60, 60), RawPacket(43, 6, 1, b"\x01" * 20, 20)]


@needs_core
@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample(path: Path) -> None:
    for linktype, batch in packets_of(path).items():
        got = compare(linktype, batch, 1000)
        if linktype == 1:  # Ethernet: the plain segments are parsed in C
            assert any(type(i) is Segment for i in got)


@needs_core
def test_crafted_captures_of_every_link_type(tmp_path: Path) -> None:
    for path in link_captures(tmp_path):
        for linktype, batch in packets_of(path).items():
            compare(linktype, batch)


@needs_core
def test_mutated_packets(tmp_path: Path) -> None:
    samples = []
    for path in SAMPLES:
        with open_capture(path) as reader:
            samples.append([Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader])
    rng = Random(39)
    path = tmp_path / "mutant.pcap"
    for n in range(MUTANTS):
        data, _, ops = mutate_capture(rng, rng.choice(samples), rng.choice(samples))
        path.write_bytes(data)
        try:
            by_link = packets_of(path)
        except InputError:
            continue
        for linktype, batch in by_link.items():
            try:
                compare(linktype, batch)
            except AssertionError as exc:
                raise AssertionError(f"mutant {n}: {ops}") from exc
