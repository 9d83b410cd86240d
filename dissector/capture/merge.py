"""Several capture series read as one run: those that overlap in time merge by timestamp.

Input: series of capture files (each a list of paths read in order as one capture: see
dissector.capture.series).
Output: `merged(series)`: every packet of every series as (group, series index, path,
packet) and, after each file's packets, the issue that ended its reading as (group, series
index, path, CaptureIssue). Packets are numbered from 1 within their group. With
`parsed=True`, packets the compiled stage parsed come as their `Segment`
(`CaptureReader.parsed()`), the others as `RawPacket`s; numbered and ordered the same.
Rules (mergecap's, for captures taken at the same time on several hosts):
- A group is a set of series whose time spans overlap (a chain of overlaps included): its
  packets come in timestamp order, ties in the order of the series (a series joins when the
  merged stream reaches its first packet's time). Series that overlap nothing are groups of
  their own, packets numbered as in the file, as Wireshark numbers them.
- Groups come in time order (of their first packet), so times never run backwards from one
  capture to the next; series without a packet come first, in name order.
- Within a series, files and packets keep their order, whatever their times.
- Inputs that are not regular files (standard input, a pipe) can be read only once: with
  one among them nothing merges, and series come in the given order; so too when merging is
  turned off (`merge=False`, as mergecap -a concatenates).
- `dealers` (a -j worker's, where nothing merges: `merges` says): series index -> the
  compiled dealer its walk deals with (dissector.flow.shard): the other shards' packets
  come as `Skipped` runs or not at all.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Protocol

from dissector._core import Dealer
from dissector.capture._source import CaptureIssue
from dissector.capture.files import open_capture
from dissector.capture.locations import rereadable, size_of
from dissector.events import RawPacket, Segment, Skipped

#: Packets between two updates of a Progress.
PROGRESS_EVERY = 8192

#: A packet as read, or as the compiled stage parsed it (`parsed=True`).
Packet = RawPacket | Segment | Skipped
#: series index -> the compiled dealer of its walk (-j workers), or None.
Dealers = Callable[[int], Dealer | None]
Item = tuple[int, int, str, Packet | CaptureIssue]


class Progress(Protocol):
    """Where reading counts the bytes of capture files read (e.g. a shared RawValue)."""

    value: int


def first_time(files: list[str], s3_endpoint: str | None = None) -> int | None:
    """The time (µs) of a series' first packet; None when its first file holds none."""
    with open_capture(files[0], s3_endpoint) as reader:
        for packet in reader:
            return int(packet.ts)
    return None


def series_items(
    files: list[str],
    progress: Progress | None = None,
    s3_endpoint: str | None = None,
    index: int = 0,
    parsed: bool = False,
    dealer: Dealer | None = None,
) -> Iterator[Item]:
    """A series' packets file after file (numbered on across files), each file's issues
    after its packets, as (index, index, path, item): the series read as a group of its own."""
    offset = 0
    for path in files:
        count = counted = told = 0  # packets of this file; bytes of it added to progress
        with open_capture(path, s3_endpoint) as reader:
            for pkt in reader.parsed(dealer) if parsed else reader:
                count = pkt.number
                yield (
                    index,
                    index,
                    path,
                    _numbered_on(pkt, offset) if offset else pkt,
                )
                if progress is not None and count - told >= PROGRESS_EVERY:
                    told = count
                    at = reader.position
                    progress.value += at - counted
                    counted = at
            if progress is not None:
                progress.value += size_of(path, s3_endpoint) - counted
            for issue in reader.issues:
                yield index, index, path, issue._replace(packet=issue.packet + offset)
        offset += count


def _numbered_on(pkt: Packet, offset: int) -> Packet:
    """A packet of a series' later file, numbered on from the files before it."""
    if type(pkt) is Skipped:
        return pkt._replace(number=pkt.number + offset, at=pkt.at + offset)
    return pkt._replace(number=pkt.number + offset)


def merged(
    series: list[list[str]],
    progress: Progress | None = None,
    s3_endpoint: str | None = None,
    merge: bool = True,
    parsed: bool = False,
    dealers: Dealers | None = None,
) -> Iterator[Item]:
    """(group, series index, path, packet or issue) of every series; see the module rules."""
    if not merges(series, merge):
        for index, files in enumerate(series):
            dealer = None if dealers is None else dealers(index)
            yield from series_items(files, progress, s3_endpoint, index, parsed, dealer)
        return
    assert dealers is None, "the dealing walk numbers packets as one series does"
    starts = [(first_time(files, s3_endpoint), index) for index, files in enumerate(series)]
    order = sorted(starts, key=lambda s: (-1 if s[0] is None else s[0], s[1]))
    pending = [(-1 if t is None else t, index) for t, index in reversed(order)]  # a stack
    group = -1
    while pending:
        group += 1
        first, index = pending.pop()
        heap: list[tuple[int, int, int, str, Packet | CaptureIssue]] = []
        sources: dict[int, Iterator[Item]] = {}
        last_ts = first
        number = 0

        sources[index] = series_items(series[index], progress, s3_endpoint, index, parsed)
        _push(heap, index, sources[index], last_ts)
        while heap:
            ts, rank, index, path, item = heapq.heappop(heap)
            while pending and pending[-1][0] <= ts:  # a series that starts by now joins
                joining = pending.pop()[1]
                sources[joining] = series_items(
                    series[joining], progress, s3_endpoint, joining, parsed
                )
                _push(heap, joining, sources[joining], last_ts)
                if heap[0][:2] < (ts, rank):
                    heapq.heappush(heap, (ts, rank, index, path, item))
                    ts, rank, index, path, item = heapq.heappop(heap)
            if isinstance(item, CaptureIssue):
                item = item._replace(packet=number)
            else:
                assert type(item) is RawPacket or type(item) is Segment
                number += 1
                last_ts = item.ts
                if item.number != number:
                    item = item._replace(number=number)
            yield group, index, path, item
            _push(heap, index, sources[index], last_ts)


def merges(series: list[list[str]], merge: bool = True) -> bool:
    """Whether `merged` merges these series by timestamp (see the module rules)."""
    return merge and len(series) >= 2 and all(rereadable(files[0]) for files in series)


def _push(
    heap: list[tuple[int, int, int, str, Packet | CaptureIssue]],
    index: int,
    it: Iterator[Item],
    last_ts: int,
) -> None:
    """The next item of a series onto the heap (an issue sorts at the time reached)."""
    for _, _, path, item in it:
        ts = last_ts if isinstance(item, CaptureIssue) else item.ts
        heapq.heappush(heap, (ts, index, index, path, item))
        return
