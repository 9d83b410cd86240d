"""Benchmark: FrameDecoder throughput on a stream of small frames, one core.

Input: none (builds a synthetic stream of typical small frames with the encoder).
Output: frames/s and MB/s printed, and written to reports/bench_framing.json.
Rule: measures the frame decoder alone (no capture reading, no TCP); the whole-pipeline
comparison against tshark lives in the capture benchmark.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from dissector import FrameDecoder, command, encode_frame
from dissector.wire import MessageMetadata

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 65536  # feed size: a loopback-sized TCP segment


def build_stream(rounds: int) -> tuple[bytes, int]:
    meta = MessageMetadata(
        producer_name="bench-producer", sequence_id=1, publish_time=1700000000000
    )
    mix = [
        encode_frame(
            command("SEND", producer_id=1, sequence_id=1), metadata=meta, payload=b"x" * 100
        ),
        encode_frame(
            command(
                "SEND_RECEIPT",
                producer_id=1,
                sequence_id=1,
                message_id={"ledgerId": 9, "entryId": 1},
            )
        ),
        encode_frame(
            command("MESSAGE", consumer_id=2, message_id={"ledgerId": 9, "entryId": 1}),
            metadata=meta,
            payload=b"y" * 100,
            checksum=False,
        ),
        encode_frame(
            command("ACK", consumer_id=2, ack_type=0, message_id=[{"ledgerId": 9, "entryId": 1}])
        ),
        encode_frame(command("FLOW", consumer_id=2, messagePermits=1000)),
    ]
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
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main() -> None:
    result = run()
    print(json.dumps(result, indent=2))
    out = ROOT / "reports" / "bench_framing.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
