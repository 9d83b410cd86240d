"""The bytes one TCP direction delivered lately, kept to compare retransmissions with.

Input: `add(offset, data, keep)` for every piece of stream delivered, in stream order (offsets
only grow; a gap between two pieces is bytes never captured); `differs(offset, data)` for
retransmitted or overlapping bytes below the next one expected.
Output: `differs` gives the piece whose bytes the retransmission contradicts (the first in
stream order, clipped to the retransmission), or None.
Rules:
- What is kept is what the flow table always kept: whole pieces, the newest ones, at least
  `keep` bytes of them (the oldest dropped only while the others still hold `keep`), and
  at most `keep // MIN_PIECE_BYTES` pieces (a flood of one-byte pieces must not keep one
  entry per byte).
- The work per retransmitted segment does not depend on how much is kept: blocks are found
  by bisection and bytes compared a block at a time. A piece smaller than SMALL_PIECE is
  copied into the block before it (blocks up to BLOCK_BYTES), so that two neighbouring
  blocks hold at least SMALL_PIECE bytes between them; larger pieces are kept as they came,
  uncopied (the common path of bulk traffic). Gaps end blocks, and one segment is compared
  with at most MAX_BLOCKS_COMPARED blocks.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final, Protocol

#: Pieces smaller than this are copied into a shared block (larger ones kept as they came).
SMALL_PIECE: Final = 1024
#: The size a block of small pieces grows to at most (a memory copy per piece is bounded).
BLOCK_BYTES: Final = 4096
#: Pieces kept per direction: at most one per this many bytes of the window (bookkeeping of
#: about 80 bytes a piece stays within a few times the bytes kept).
MIN_PIECE_BYTES: Final = 32
#: Blocks one segment is compared with: a contiguous 64 KiB segment spans at most
#: 2 * 65536 / SMALL_PIECE + 2 of them; only a capture with a gap every few bytes has more
#: (the bytes past them are not checked).
MAX_BLOCKS_COMPARED: Final = 256
#: Dropped entries at the head of a list before it is compacted.
_COMPACT: Final = 1024


class Recent(Protocol):
    """What a direction keeps its recent bytes in: `RecentBytes`, or the same in C
    (dissector/_core/recent.c, chosen by dissector._core.recent_bytes)."""

    @property
    def kept(self) -> int: ...

    @property
    def compared(self) -> int: ...

    def __len__(self) -> int: ...

    def clear(self) -> None: ...

    def add(self, offset: int, data: bytes, keep: int) -> None: ...

    def differs(self, offset: int, data: bytes) -> tuple[int, int] | None: ...


class RecentBytes:
    """The pieces and bytes of one direction's window; see the module docstring.

    Bytes are kept in blocks: a piece as it came, or several small contiguous pieces copied
    into one bytearray, whose pieces' offsets `inner` keeps (only those blocks are in it).
    """

    __slots__ = (
        "blocks",
        "compared",
        "count",
        "end",
        "first",
        "head",
        "inner",
        "kept",
        "starts",
    )

    def __init__(self) -> None:
        self.starts: list[int] = []  # stream offset of each block (before `first`: dropped)
        self.blocks: list[bytes | bytearray] = []  # a piece, or (bytearray) several
        self.first = 0
        self.inner: dict[int, list[int]] = {}  # bytearray block's offset -> its pieces' offsets
        self.head = 0  # pieces of the first block kept already dropped (a bytearray block)
        self.count = 0  # pieces kept
        self.kept = 0  # bytes in the pieces kept
        self.end = -1  # stream offset just past the last piece (-1: none)
        self.compared = 0  # blocks compared, all calls together (what a test counts)

    def __len__(self) -> int:
        """The pieces kept."""
        return self.count

    def clear(self) -> None:
        self.starts.clear()
        self.blocks.clear()
        self.inner.clear()
        self.first = self.head = self.count = self.kept = 0
        self.end = -1

    def add(self, offset: int, data: bytes, keep: int) -> None:
        """Keep `data`, delivered at stream `offset`, then drop the oldest past `keep` bytes."""
        n = len(data)
        if not n:
            return
        blocks = self.blocks
        if offset == self.end and (n < SMALL_PIECE or len(blocks[-1]) < SMALL_PIECE):
            last = blocks[-1]
            if len(last) + n <= BLOCK_BYTES:
                at = self.starts[-1]
                if isinstance(last, bytearray):
                    last += data
                    self.inner[at].append(offset)
                else:
                    grown = bytearray(last)
                    grown += data
                    blocks[-1] = grown
                    self.inner[at] = [at, offset]
            else:
                self.starts.append(offset)
                blocks.append(data)
        else:
            self.starts.append(offset)
            blocks.append(data)
        self.end = offset + n
        self.count += 1
        self.kept += n
        if self.kept >= keep + n or self.count > keep // MIN_PIECE_BYTES:
            self._drop(keep)

    def _drop(self, keep: int) -> None:
        """Drop the oldest pieces while the others hold `keep` bytes, or while there are
        too many (the newest one always stays)."""
        most = keep // MIN_PIECE_BYTES
        starts, blocks, inner = self.starts, self.blocks, self.inner
        first, head, kept, count = self.first, self.head, self.kept, self.count
        while count > 1:
            block = blocks[first]
            start = starts[first]
            cuts: list[int] = []
            if isinstance(block, bytearray):
                cuts = inner[start]
                stop = cuts[head + 1] if head + 1 < len(cuts) else start + len(block)
                size = stop - cuts[head]
            else:
                size = len(block)
            if kept - size < keep and count <= most:
                break
            kept -= size
            count -= 1
            if head + 1 < len(cuts):
                head += 1
            else:
                if cuts:
                    del inner[start]
                blocks[first] = b""
                first += 1
                head = 0
        self.head, self.kept, self.count = head, kept, count
        if first >= _COMPACT and 2 * first > len(starts):
            del starts[:first]
            del blocks[:first]
            first = 0
        self.first = first

    def differs(self, offset: int, data: bytes) -> tuple[int, int] | None:
        """The stream range (start, stop) of the first kept piece whose bytes differ from
        `data` (at stream `offset`) where they overlap, clipped to `data`; None if none."""
        if not self.count or not data:
            return None
        starts, blocks = self.starts, self.blocks
        first = self.first
        base = self.inner[starts[first]][self.head] if self.head else starts[first]
        stop = offset + len(data)
        at = max(offset, base)  # bytes before the first piece kept: dropped
        k = max(bisect_right(starts, at, first) - 1, first)
        budget = MAX_BLOCKS_COMPARED
        while k < len(blocks) and budget:
            start = starts[k]
            if start >= stop:
                break
            block = blocks[k]
            lo, hi = max(start, at), min(start + len(block), stop)
            if lo < hi:
                budget -= 1
                self.compared += 1
                old = block[lo - start : hi - start]
                new = data[lo - offset : hi - offset]
                if old != new:
                    return self._piece_at(k, lo + _first_difference(old, new), offset, stop)
            k += 1
        return None

    def _piece_at(self, k: int, at: int, offset: int, stop: int) -> tuple[int, int]:
        """The piece of block `k` holding stream offset `at`, clipped to [offset, stop)."""
        start = self.starts[k]
        block = self.blocks[k]
        lo, hi = start, start + len(block)
        if isinstance(block, bytearray):
            cuts = self.inner[start]
            i = bisect_right(cuts, at) - 1
            lo = cuts[i]
            if i + 1 < len(cuts):
                hi = cuts[i + 1]
        return max(lo, offset), min(hi, stop)


def _first_difference(a: bytes | bytearray, b: bytes) -> int:
    """The index of the first byte where `a` and `b` (same length, not equal) differ."""
    x = int.from_bytes(a, "big") ^ int.from_bytes(b, "big")
    return len(a) - (x.bit_length() + 7) // 8
