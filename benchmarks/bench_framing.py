"""Benchmark: FrameDecoder throughput on a stream of small frames, one core.

Input: none (builds a synthetic stream of typical small frames with the encoder).
Output: frames/s and MB/s printed, and written to reports/bench_framing.json.
Rule: measures the frame decoder alone (no capture reading, no TCP), in-process; whole
commands against tshark are benchmarks/run.py's job.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from benchmarks.synthetic import small_frames
from dissector import FrameDecoder

CHUNK = 65536  # feed size: a loopback-sized TCP segment


def build_stream(rounds: int) -> tuple[bytes, int]:
    """Both directions' typical small frames, interleaved, repeated `rounds` times."""
    c2b, b2c = small_frames()
    mix = [frame for pair in zip(c2b, b2c, strict=True) for frame in pair]
    return b"".join(mix) * rounds, len(mix) * rounds


def run(rounds: int = 100_000, repeats: int = 3) -> dict[str, object]:
    stream, frames = build_stream(rounds)
    best = float("inf")
    for _ in range(repeats):
        dec = FrameDecoder()
        start = time.perf_counter()
        count = 0
        for i in range(0, len(stream), CHUNK):
            count += len(dec.feed(stream[i : i + CHUNK]))
        count += len(dec.close())
        best = min(best, time.perf_counter() - start)
        assert count == frames, (count, frames)
    return {
        "benchmark": "framing",
        "frames": frames,
        "bytes": len(stream),
        "seconds": round(best, 4),
        "frames_per_s": round(frames / best),
        "mb_per_s": round(len(stream) / best / 1e6, 1),
    }


def main() -> None:
    result = {**run(), "python": platform.python_version(), "cpus": os.cpu_count()}
    text = json.dumps(result, indent=2)
    print(text)
    out = Path(__file__).resolve().parent.parent / "reports" / "bench_framing.json"
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
