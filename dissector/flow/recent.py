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
- The work per retransmitted segment does not depend on how much is kept: the pieces and
  the blocks are found by bisection, and bytes are compared a block at a time. A piece
  smaller than SMALL_PIECE is copied into the block before it (blocks up to BLOCK_BYTES),
  so that two neighbouring blocks hold at least SMALL_PIECE bytes between them; larger
  pieces are kept as they came, uncopied (the common path of bulk traffic). Gaps end
  blocks, and one segment is compared with at most MAX_BLOCKS_COMPARED blocks.
"""

from __future__ import annotations

from bisect import bisect_right

#: Pieces smaller than this are copied into a shared block (larger ones kept as they came).
SMALL_PIECE = 1024
#: The size a block of small pieces grows to at most (a memory copy per piece is bounded).
BLOCK_BYTES = 4096
#: Pieces kept per direction: at most one per this many bytes of the window (bookkeeping of
#: about 80 bytes a piece stays within a few times the bytes kept).
MIN_PIECE_BYTES = 32
#: Blocks one segment is compared with: a contiguous 64 KiB segment spans at most
#: 2 * 65536 / SMALL_PIECE + 2 of them; only a capture with a gap every few bytes has more
#: (the bytes past them are not checked).
MAX_BLOCKS_COMPARED = 256
#: Dropped entries at the head of a list before it is compacted.
_COMPACT = 1024


class RecentBytes:
    """The pieces and bytes of one direction's window; see the module docstring."""

    __slots__ = (
        "b_first",
        "b_starts",
        "blocks",
        "compared",
        "end",
        "first",
        "kept",
        "sizes",
        "starts",
    )

    def __init__(self) -> None:
        self.starts: list[int] = []  # stream offset of each piece (those before `first` dropped)
        self.sizes: list[int] = []  # its length
        self.first = 0
        self.kept = 0  # bytes in the pieces kept
        self.b_starts: list[int] = []  # stream offset of each block (before `b_first`: dropped)
        self.blocks: list[bytes | bytearray] = []  # contiguous bytes of one or more pieces
        self.b_first = 0
        self.end = -1  # stream offset just past the last piece (-1: none)
        self.compared = 0  # blocks compared, all calls together (what a test counts)

    def __len__(self) -> int:
        """The pieces kept."""
        return len(self.starts) - self.first

    def clear(self) -> None:
        self.starts.clear()
        self.sizes.clear()
        self.blocks.clear()
        self.b_starts.clear()
        self.first = self.b_first = self.kept = 0
        self.end = -1

    def add(self, offset: int, data: bytes, keep: int) -> None:
        """Keep `data`, delivered at stream `offset`, then drop the oldest past `keep` bytes."""
        n = len(data)
        if not n:
            return
        self.starts.append(offset)
        self.sizes.append(n)
        self.kept += n
        blocks = self.blocks
        if offset == self.end and (n < SMALL_PIECE or len(blocks[-1]) < SMALL_PIECE):
            last = blocks[-1]
            if len(last) + n <= BLOCK_BYTES:
                if isinstance(last, bytearray):
                    last += data
                else:
                    grown = bytearray(last)
                    grown += data
                    blocks[-1] = grown
            else:
                self.b_starts.append(offset)
                blocks.append(data)
        else:
            self.b_starts.append(offset)
            blocks.append(data)
        self.end = offset + n
        count = keep // MIN_PIECE_BYTES
        if self.kept >= keep + n or len(self.starts) - self.first > count:
            self._drop(keep, count)

    def _drop(self, keep: int, count: int) -> None:
        starts, sizes = self.starts, self.sizes
        first, kept, last = self.first, self.kept, len(starts) - 1
        while first < last and (kept - sizes[first] >= keep or last - first >= count):
            kept -= sizes[first]
            first += 1
        self.first, self.kept = first, kept
        base = starts[first]
        b_starts, blocks = self.b_starts, self.blocks
        b_first = self.b_first
        while b_starts[b_first] + len(blocks[b_first]) <= base:
            blocks[b_first] = b""
            b_first += 1
        self.b_first = b_first
        if first >= _COMPACT and 2 * first > len(starts):
            del starts[:first]
            del sizes[:first]
            self.first = 0
        if b_first >= _COMPACT and 2 * b_first > len(blocks):
            del b_starts[:b_first]
            del blocks[:b_first]
            self.b_first = 0

    def differs(self, offset: int, data: bytes) -> tuple[int, int] | None:
        """The stream range (start, stop) of the first kept piece whose bytes differ from
        `data` (at stream `offset`) where they overlap, clipped to `data`; None if none."""
        starts = self.starts
        if len(starts) == self.first or not data:
            return None
        stop = offset + len(data)
        at = max(offset, starts[self.first])  # bytes before the first piece kept: dropped
        b_starts, blocks = self.b_starts, self.blocks
        k = max(bisect_right(b_starts, at, self.b_first) - 1, self.b_first)
        budget = MAX_BLOCKS_COMPARED
        while k < len(blocks) and budget:
            start = b_starts[k]
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
                    return self._piece_at(lo + _first_difference(old, new), offset, stop)
            k += 1
        return None

    def _piece_at(self, at: int, offset: int, stop: int) -> tuple[int, int]:
        """The kept piece holding stream offset `at`, clipped to [offset, stop)."""
        i = bisect_right(self.starts, at, self.first) - 1
        start = self.starts[i]
        return max(start, offset), min(start + self.sizes[i], stop)


def _first_difference(a: bytes | bytearray, b: bytes) -> int:
    """The index of the first byte where `a` and `b` (same length, not equal) differ."""
    x = int.from_bytes(a, "big") ^ int.from_bytes(b, "big")
    return len(a) - (x.bit_length() + 7) // 8
