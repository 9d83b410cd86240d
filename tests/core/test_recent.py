"""The compiled recent bytes (dissector/_core/recent.c) against dissector/flow/recent.py.

The reference is the Python `RecentBytes`. Both get the same random operations: pieces of a
stream added in order (contiguous or after a jump, of one byte to 70 KB, so that small
pieces share blocks and large ones are kept as they came), with a `keep` that changes as
the flow table's window does (down to 0 and odd values, so that both the byte and the piece
limit drop pieces), retransmissions compared (the stream's own bytes, some changed, some
before the first piece kept or past the last), and clears. After every operation both must
give the same `differs` answer, pieces kept (`len`), bytes kept and blocks compared. The
flow table must use the compiled type where the compiled stage is active and the Python one
with PULSAR_DISSECTOR_CORE=0; tests/core/test_tables.py compares whole reads both ways.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from random import Random

import pytest

from dissector import _core
from dissector.events import Direction
from dissector.flow.reassembly import HalfStream
from dissector.flow.recent import Recent, RecentBytes

needs_recent = pytest.mark.skipif(_core.recent_native is None, reason="pure-Python build")

ROOT = Path(__file__).resolve().parents[2]
#: Random operation sequences compared per run of the suite.
SEQUENCES = 1500
_KEEPS = (0, 1, 31, 32, 33, 100, 1000, 4096, 5000, 65536, 262144)


def compiled() -> Recent:
    assert _core.recent_native is not None
    made: Recent = _core.recent_native.RecentBytes()
    return made


def _size(rng: Random) -> int:
    pick = rng.random()
    if pick < 0.5:
        return rng.randint(1, 40)
    if pick < 0.8:
        return rng.randint(41, 1100)
    if pick < 0.97:
        return rng.randint(1000, 5000)
    return rng.randint(5000, 70000)


def _run(seed: int) -> int:
    """One random sequence on both; the number of differences found (both agreeing)."""
    rng = Random(seed)
    stream = rng.randbytes(1 << 17)
    stream += stream  # any offset's next 70 KB, at offset % (1 << 17)
    ref, c = RecentBytes(), compiled()
    keep = rng.choice(_KEEPS)
    offset = rng.randint(0, 50)
    start = offset
    found = 0
    for _ in range(rng.randint(1, 400)):
        op = rng.random()
        if op < 0.6:
            if rng.random() < 0.15:
                offset += rng.randint(1, 5000)
            n = _size(rng)
            piece = stream[offset % (1 << 17) :][:n]
            if rng.random() < 0.2:
                keep = rng.choice(_KEEPS)
            ref.add(offset, piece, keep)
            c.add(offset, piece, keep)
            offset += n
        elif op < 0.95:
            at = rng.randint(start - 100, offset + 10)
            n = _size(rng)
            data = bytearray(stream[at % (1 << 17) :][:n])
            for _ in range(rng.choice((0, 0, 1, 3))):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            want = ref.differs(at, bytes(data))
            assert c.differs(at, bytes(data)) == want, (seed, at, n)
            found += want is not None
        else:
            ref.clear()
            c.clear()
            start = offset
        assert (len(c), c.kept, c.compared) == (len(ref), ref.kept, ref.compared), seed
    return found


@needs_recent
def test_the_compiled_recent_bytes_are_built_from_their_sources() -> None:
    assert _core.recent_native is not None
    where = _core.recent_native.__file__ or ""
    assert where.endswith(".so"), where
    for name in ("recent.c", "recent.h", "_recentmodule.c"):
        source = ROOT / "dissector" / "_core" / name
        assert os.path.getmtime(where) >= source.stat().st_mtime, f"stale: {name}"


@needs_recent
def test_the_compiled_recent_bytes_answer_as_the_python_ones() -> None:
    found = sum(_run(seed) for seed in range(SEQUENCES))
    assert found > 1000  # the sequences do contradict kept bytes, often


@needs_recent
def test_pieces_kept_as_they_came_are_released_when_dropped() -> None:
    c = compiled()
    piece = bytes(range(200)) * 20  # 4,000 bytes: kept as it came
    before = sys.getrefcount(piece)
    c.add(0, piece, 4096)
    assert sys.getrefcount(piece) == before + 1
    c.add(4000, b"x" * 5000, 4000)  # the first piece is dropped (the second holds 4000)
    assert sys.getrefcount(piece) == before
    c.add(9000, piece, 4096)
    c.clear()
    assert sys.getrefcount(piece) == before
    c.add(0, bytearray(b"abc"), 4096)  # type: ignore[arg-type]  # other bytes-likes: copied
    assert c.differs(0, b"abd") == (0, 3)


@needs_recent
def test_the_flow_table_keeps_them_in_c_where_the_stage_is_active(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _core.recent_native is not None
    native = _core.recent_native.RecentBytes
    before = _core.stats()["recent_pieces"]
    half = HalfStream(1, Direction.CLIENT_TO_BROKER)
    assert type(half.recent) is native
    half.next_seq = 0
    half.deliver(b"abc", 0, 1, 0, [])
    assert _core.stats()["recent_pieces"] == before + 1
    monkeypatch.setattr(_core, "ENABLED", False)
    assert type(HalfStream(1, half.direction).recent) is RecentBytes
