"""The compiled stage alone: reader + header parse, pure Python against dissector._core.

Input: a capture path (default: benchmarks.captures.small written to /tmp).
Output: µs per packet of the pure reader + `parse_layers` and of `CaptureReader.parsed()`
(C segments, Python for the rest), printed; two rounds, same process, same file.
Rule: the driver's GC threshold, as a read has it (dissector.read.driver.GC_THRESHOLD).
Run: `.venv/bin/python -m benchmarks.core_stage [CAPTURE]`.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

from benchmarks.captures import small
from dissector.capture import open_capture
from dissector.events import Segment
from dissector.net.headers import parse_layers
from dissector.read.driver import GC_THRESHOLD


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/core-small.pcap")
    if not path.exists():
        small(path)
    gc.set_threshold(GC_THRESHOLD)
    for _ in range(2):
        start, n = time.perf_counter(), 0
        with open_capture(path) as reader:
            for pkt in reader:
                parse_layers(pkt)
                n += 1
        mid = time.perf_counter()
        with open_capture(path) as reader:
            for item in reader.parsed():
                if type(item) is not Segment:
                    parse_layers(item)
        end = time.perf_counter()
        pure, compiled = (mid - start) / n * 1e6, (end - mid) / n * 1e6
        print(f"{n} packets: pure {pure:.2f} µs/packet, compiled stage {compiled:.2f} µs/packet")


if __name__ == "__main__":
    main()
