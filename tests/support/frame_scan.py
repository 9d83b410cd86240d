"""The compiled framing stage (dissector/_core/frames.c) as columns, for tests and benchmarks.

Input: one direction's stream bytes from a frame boundary (where the Python `FrameDecoder`
is in sync), a position and the frame size limit.
Output: `FrameBatch`: where the scan stopped, why (`Stop`), and the frames it took as
columns (`COLUMNS`, from dissector._core.layout, names them; each a sequence of int64,
absent values 0 with their `Has` bit clear in `present`); `None` from `scan_frames` when
the extension is not built.
Rule: the C scan takes a frame only when the Python decoder would emit it whole with no
anomaly but a bad checksum, and stops before any other: that frame, and any resync after
it, stay with `dissector.pulsar.framing` (tests/core/test_frames_differential.py checks it
on every sample stream and on mutated streams). The pipeline's `FrameDecoder` calls the
same scan through `dissector._core.frames_scan` (rows rather than columns).
`Has`, `Stop` and `COLUMNS` are re-exported from dissector._core.layout.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

from dissector._core.layout import FRAME_COLUMNS as COLUMNS
from dissector._core.layout import Has, Stop
from dissector.events import Checksum
from dissector.pulsar.frame_events import CHECKSUM_VERDICTS
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE

native: ModuleType | None
try:
    native = importlib.import_module("dissector._core._frames")
except ImportError:  # the pure-Python package
    native = None

COMPILED = native is not None
__all__ = [
    "CHECKSUMS",
    "COLUMNS",
    "COMPILED",
    "FrameBatch",
    "Has",
    "Stop",
    "crc32c",
    "native",
    "scan_frames",
]

#: The `checksum` column's values (frames.h PD_CHECKSUM_*): None for commands without payload.
CHECKSUMS: tuple[Checksum | None, ...] = CHECKSUM_VERDICTS


class FrameBatch(NamedTuple):
    pos: int  # where the scan stopped
    stop: Stop
    columns: dict[str, Sequence[int]]  # name -> one int64 per frame taken

    @property
    def rows(self) -> int:
        return len(self.columns["offset"]) if self.columns else 0


def scan_frames(
    buf: bytes, pos: int = 0, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, rows: int = 1024
) -> FrameBatch | None:
    """Frames of `buf` from `pos` (a frame boundary), at most `rows`; None if not built."""
    if native is None:
        return None
    end, stop, cols = native.scan_frames(buf, pos, max_frame_size, rows)
    columns = {name: memoryview(col).cast("q") for name, col in zip(COLUMNS, cols, strict=True)}
    return FrameBatch(end, Stop(stop), columns)  # type: ignore[arg-type]  # memoryview[int]


def crc32c(data: bytes, *, software: bool = False) -> int | None:
    """The compiled CRC32C (software=True: the table path even where SSE4.2 is)."""
    if native is None:
        return None
    value: int = native.crc32c(data, software)
    return value
