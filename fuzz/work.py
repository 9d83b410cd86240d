"""Work counted without a clock: Python lines the dissector runs, and its growth with size.

Input: a function (a read), or a maker of an input at a size n.
Output: `count_lines(fn)` gives fn's result and the lines of `dissector/` source it ran
(`sys.settrace` line events: a loop's every turn counts, comprehensions included);
`check_growth` requires the lines added from 2n to 4n to stay within GROWTH times those
added from n to 2n, as the bytes grew.
Rules: deterministic (the same input runs the same lines), so the levels can assert on it;
only code that runs as Python counts: when the package's per-packet modules are the compiled
build (mypyc, setup.py's HOT) their loops are invisible, so `countable()` says whether the
counts mean anything and the levels skip the check otherwise. The cost is a trace call per
line of the dissector (other code is not traced): the levels use it on small inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from dissector.read import ReaderOptions, read_tables
from fuzz.checks import Seen, require

T = TypeVar("T")
#: Lines added from 2n to 4n over lines added from n to 2n, over the same for the bytes: 1
#: for a linear cost, towards 2 for a quadratic one.
GROWTH = 1.15
#: Lines the increments may differ by whatever the sizes (a share of the lines at n).
SLACK = 0.02
_MARK = "/dissector/"


def countable() -> bool:
    """Whether the dissector's per-packet modules run as Python (not the compiled build)."""
    from dissector.facts import machine as pairing

    return (pairing.__file__ or "").endswith(".py")


def count_lines(fn: Callable[[], T]) -> tuple[T, int]:
    """fn's result and the lines of the dissector's Python source it ran."""
    lines = 0
    codes: dict[Any, bool] = {}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
        return local

    def glob(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        ours = codes.get(code)
        if ours is None:
            ours = codes[code] = _MARK in code.co_filename
        return local if ours else None

    old = sys.gettrace()
    sys.settrace(glob)
    try:
        out = fn()
    finally:
        sys.settrace(old)
    return out, lines


def check_growth(what: str, points: list[tuple[int, int]], bound: float = GROWTH) -> None:
    """(lines, input bytes) at n, 2n and 4n: the lines added from 2n to 4n are at most
    `bound` times those added from n to 2n, times how the bytes grew (the fixed costs cancel:
    a linear cost gives 1 exactly, a quadratic one nearly 2; inputs whose bytes stay put while
    a count in them doubles must cost no more at 4n than at 2n, SLACK aside)."""
    (l1, b1), (l2, b2), (l4, b4) = points
    grew = (b4 - b2) / (b2 - b1) if b2 > b1 else 1.0
    allowed = bound * max(grew, 1.0) * max(l2 - l1, 0) + SLACK * l1 + 1000
    require(
        l4 - l2 <= allowed,
        "work_growth",
        f"{what}: lines {l1:,} {l2:,} {l4:,} for bytes {b1:,} {b2:,} {b4:,}",
        what,
    )


def growth_points(
    make: Callable[[int], bytes], n: int, folder: Path, options: ReaderOptions
) -> list[tuple[int, int]]:
    """(lines, bytes) of every table read from make(n), make(2n) and make(4n)."""
    path = folder / "growth.pcap"
    points = []
    for size in (n, 2 * n, 4 * n):
        data = make(size)
        path.write_bytes(data)
        _, lines = count_lines(lambda: read_tables(str(path), options))
        points.append((lines, len(data)))
    return points


def growth_case(
    what: str, make: Callable[[int], bytes], n: int, folder: Path, options: ReaderOptions
) -> Seen:
    """A level's growth case: make(n), make(2n), make(4n) read and judged (`check_growth`)
    where lines can be counted (the pure package); nothing seen otherwise."""
    if countable():
        check_growth(what, growth_points(make, n, folder, options))
    return Seen()
