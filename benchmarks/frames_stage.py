"""The compiled framing stage alone: FrameDecoder (Python) against dissector._core._frames.

Input: none. Streams: benchmarks.bench_framing's typical small frames (SEND, ACK, FLOW,
PONG, SEND_RECEIPT, MESSAGE, SUCCESS, PING), repeated; and pcaps/streams/*.bin (a real
client's recorded connection) concatenated, repeated (each ends on a frame boundary).
Output: µs per frame and MB/s, printed: the Python decoder fed in 64 KiB pieces (as
bench_framing does) and in one piece, and the C scan over the whole buffer (columns out,
batches of BATCH_FRAMES); best of three rounds, same process.
Rule: the stages alone, no capture reading or TCP; not wired into the pipeline yet, so the
C figure is what the frame path can gain at most here (the Python side still has to turn
columns into rows). Run: `.venv/bin/python -m benchmarks.frames_stage`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.bench_framing import CHUNK, build_stream
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from tests.support.frame_scan import Stop, native

ROOT = Path(__file__).resolve().parent.parent
TARGET_BYTES = 20_000_000  # about 20 MB per stream: long enough for a steady rate


def python_chunked(stream: bytes) -> int:
    dec = FrameDecoder()
    n = 0
    for i in range(0, len(stream), CHUNK):
        n += sum(1 for e in dec.feed(stream[i : i + CHUNK]) if type(e).__name__ == "Frame")
    return n


def python_whole(stream: bytes) -> int:
    dec = FrameDecoder()
    return sum(1 for e in dec.feed(stream) if type(e).__name__ == "Frame")


def compiled(stream: bytes) -> int:
    assert native is not None
    pos = n = 0
    while True:
        pos, stop, cols = native.scan_frames(stream, pos, DEFAULT_MAX_FRAME_SIZE)
        n += len(cols[0]) // 8
        if stop != Stop.FULL:
            assert stop == Stop.END, stop
            return n


def best(fn: Callable[[bytes], int], stream: bytes) -> tuple[float, int]:
    times = []
    frames = 0
    for _ in range(3):
        gc.collect()
        start = time.perf_counter()
        frames = fn(stream)
        times.append(time.perf_counter() - start)
    return min(times), frames


def main() -> None:
    small, _ = build_stream(1)
    recorded = b"".join(p.read_bytes() for p in sorted((ROOT / "pcaps/streams").glob("*.bin")))
    for name, unit in (("small frames (bench_framing)", small), ("recorded client", recorded)):
        stream = unit * (TARGET_BYTES // len(unit) + 1)
        print(f"{name}: {len(stream) / 1e6:.1f} MB")
        counts = set()
        for label, fn in (
            ("Python FrameDecoder, 64 KiB pieces", python_chunked),
            ("Python FrameDecoder, one piece", python_whole),
            ("C scan (columns)", compiled),
        ):
            seconds, frames = best(fn, stream)
            counts.add(frames)
            print(
                f"  {label}: {frames} frames, {seconds * 1e6 / frames:.3f} µs/frame, "
                f"{len(stream) / seconds / 1e6:.0f} MB/s"
            )
        assert len(counts) == 1, counts


if __name__ == "__main__":
    main()
