"""EDGE: what the command line asks of a read's inputs before and after it: usable, how big,
when it starts, and what to say when no Pulsar was found.

Input: capture paths and the read's settings; after a read, what it counted.
Output: InputError for the first unusable input (`check_captures`); the bytes a read's
progress counts up to (`capture_bytes`); the time of the first packet (`first_packet_time`);
a one-line hint when no Pulsar frame was found (`no_pulsar_hint`).
Rule: pipes and devices are read once, so they are never opened ahead of the read: they are
judged when read, and give no first packet time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from dissector.capture import open_capture, series
from dissector.capture.locations import rereadable, size_of
from dissector.capture.merge import first_time
from dissector.errors import DissectorError
from dissector.read.options import PathLike, ReaderOptions, as_paths
from dissector.read.tables import ReadCounts


def capture_bytes(paths: PathLike | Iterable[PathLike], s3_endpoint: str | None = None) -> int:
    """The size of the capture files (what a read's Progress counts up to)."""
    return sum(size_of(p, s3_endpoint) for p in as_paths(paths))


def check_captures(paths: PathLike | Iterable[PathLike], s3_endpoint: str | None = None) -> None:
    """Every input is usable, checked before any is read (its header opened, then closed):
    InputError for the first that is not. Pipes and devices are read once, so they are
    checked when they are read."""
    for path in as_paths(paths):
        if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
            continue
        with open_capture(path, s3_endpoint):
            pass


def first_packet_time(
    paths: PathLike | Iterable[PathLike], options: ReaderOptions | None = None
) -> int | None:
    """The time (µs) of the first packet a read of `paths` meets, or None when the first
    file is not a regular file (a pipe must not be read twice) or holds no packet."""
    options = options or ReaderOptions()
    groups = series.group(as_paths(paths), options.series)
    if not groups or not all(rereadable(files[0]) for files in groups):
        return None
    try:
        times = [first_time(files, options.s3_endpoint) for files in groups]
    except DissectorError:
        return None
    known = [t for t in times if t is not None]
    return min(known) if known else None


def no_pulsar_hint(counts: ReadCounts, ports: Iterable[int]) -> str | None:
    """When a read found no Pulsar frame: one line saying so, and which --port to try when
    TCP conversations were seen on other ports; None when frames were found."""
    if counts.rows["frames"]:
        return None
    broker = ", ".join(str(p) for p in sorted(ports))
    other = counts.other_ports
    if not other:
        return f"no Pulsar frame found on the broker ports ({broker})"
    listed = ", ".join(f"{port} ({n})" for port, n in other.most_common(5))
    best = other.most_common(1)[0][0]
    return (
        f"no Pulsar frame found on the broker ports ({broker}); TCP conversations on "
        f"other ports: {listed}; if Pulsar listens there, try --port {best}"
    )
