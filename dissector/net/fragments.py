"""IP fragment reassembly: fragments of IPv4 and IPv6 datagrams in, whole datagrams out.

Input: `Fragment`s (from `headers.parse_layers`) in capture order; `expire(now)` and
`close()` to end datagrams that will not complete.
Output: a `Datagram` (the reassembled payload, stamped with the packet that completed it)
once every byte of it is known, and `NetIssue`s for faults.
Rules:
- A datagram is keyed by (source, destination, identification, protocol), as RFC 791 and
  RFC 8200 key them; it is complete when the last fragment (no "more fragments") has been
  seen and the bytes from 0 to its end are all present.
- Overlaps: the first copy of a byte wins; a later fragment whose overlapping bytes differ,
  or which contradicts the datagram's end (a second, different end; bytes beyond the end),
  is reported (`net.ip_fragment_overlap`) and its differing part dropped.
- Bytes cut off by the snap length are known by their length only: the datagram completes
  with its captured bytes up to the first lost one, the rest counted in `Datagram.length`.
- Bounds: a datagram may take at most `timeout` µs of capture time from its first fragment
  to its last, MAX_FRAGMENTS fragments (copies included) and MAX_DATAGRAM_SIZE bytes; at most
  `max_datagrams` datagrams and `max_bytes` buffered bytes are in progress at once (past
  either, the oldest is dropped). A fragment is placed among its datagram's byte ranges by
  bisection: it looks at the ranges it overlaps, not at every range before them. A datagram
  dropped or left incomplete when the capture ends is reported as one `net.ip_fragment` per
  fragment received (its packet, its offset), when it may concern Pulsar: TCP (with the
  ports, when its first fragment was seen, so that the caller can tell whether it was ours),
  a tunnel (GRE, IP in IP) or UDP to a tunnel port.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from socket import AF_INET, AF_INET6, inet_ntop
from typing import NamedTuple

from dissector.anomalies import AnomalyCode
from dissector.events import NetIssue
from dissector.net.decap import GENEVE_PORT, VXLAN_PORTS

PROTO_IPIP, PROTO_TCP, PROTO_UDP, PROTO_IPV6, PROTO_GRE = 4, 6, 17, 41, 47
#: IP protocols whose fragments are reassembled: TCP and what may carry TCP.
CARRIED = frozenset({PROTO_TCP, PROTO_UDP, PROTO_GRE, PROTO_IPIP, PROTO_IPV6})
_TUNNEL_PORTS = VXLAN_PORTS | {GENEVE_PORT}

#: Datagrams in progress at once.
MAX_DATAGRAMS = 1024
#: Bytes buffered in datagrams in progress, all together.
MAX_BUFFERED = 8 << 20
#: Capture time from a datagram's first fragment to its last (Linux's ipfrag_time).
FRAGMENT_TIMEOUT_US = 30_000_000
#: Fragments (copies included) one datagram may be made of.
MAX_FRAGMENTS = 256
#: The largest datagram payload IPv4 or IPv6 (without jumbograms) can describe.
MAX_DATAGRAM_SIZE = 65535

_NEVER = 1 << 62


class Fragment(NamedTuple):
    """One fragment of an IP datagram, as a packet carried it."""

    number: int  # packet number (provenance)
    ts: int  # microseconds since the Unix epoch
    src: bytes  # 4 or 16 address bytes
    dst: bytes
    ident: int  # identification (16 bits in IPv4, 32 in IPv6)
    proto: int  # upper-layer protocol (IPv6: the Next Header of the Fragment header)
    offset: int  # byte offset of `data` in the datagram's payload
    more: bool  # the "more fragments" flag
    data: bytes  # the captured bytes of the fragment's payload
    lost: int  # bytes of the fragment after `data`: on the wire, not captured (snap length)
    depth: int  # encapsulation layers around it (net.headers bounds them)

    def issue(self, code: str = AnomalyCode.NET_IP_FRAGMENT, why: str = "") -> NetIssue:
        """This fragment as a `NetIssue` (addresses, and nothing of the datagram)."""
        version = 4 if len(self.src) == 4 else 6
        detail = f"IPv{version} fragment (offset {self.offset}, more={int(self.more)}){why}"
        return NetIssue(code, detail, self.number, self.ts, _text(self.src), _text(self.dst))


class Datagram(NamedTuple):
    """A reassembled datagram's payload (what follows the IP header or Fragment header)."""

    number: int  # the packet that completed it
    ts: int
    src: bytes
    dst: bytes
    proto: int
    data: bytes  # the captured bytes from the start, up to the first one lost
    length: int  # its length on the wire (>= len(data))
    depth: int


Key = tuple[bytes, bytes, int, int]
#: A byte range of a datagram: start, stop, its bytes (b"" when lost to the snap length).
Piece = tuple[int, int, bytes, bool]
#: A fragment received: packet number, time, offset, more fragments.
Seen = tuple[int, int, int, bool]


class _Partial:
    __slots__ = ("end", "first_ts", "have", "pieces", "seen", "stored")

    def __init__(self, ts: int) -> None:
        self.first_ts = ts
        self.pieces: list[Piece] = []  # sorted, never overlapping
        self.seen: list[Seen] = []
        self.end = -1  # the datagram's length, once its last fragment is seen
        self.have = 0  # bytes covered by pieces (captured or lost)
        self.stored = 0  # captured bytes held


class FragmentReassembler:
    """Reassemble IP datagrams; see the module docstring."""

    def __init__(
        self,
        *,
        max_datagrams: int = MAX_DATAGRAMS,
        max_bytes: int = MAX_BUFFERED,
        timeout: int = FRAGMENT_TIMEOUT_US,
    ) -> None:
        self.max_datagrams = max_datagrams
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.buffered = 0
        self.scanned = 0  # pieces looked at to place fragments, all together (tests count it)
        #: capture time past which the oldest datagram in progress times out
        self.deadline = _NEVER
        self._partial: dict[Key, _Partial] = {}  # oldest first

    def __len__(self) -> int:
        return len(self._partial)

    def feed(self, frag: Fragment) -> list[Datagram | NetIssue]:
        out: list[Datagram | NetIssue] = []
        if frag.ts >= self.deadline:
            out.extend(self.expire(frag.ts))
        key: Key = (frag.src, frag.dst, frag.ident, frag.proto)
        partial = self._partial.get(key)
        if partial is None:
            partial = self._partial[key] = _Partial(frag.ts)
            if len(self._partial) == 1:
                self.deadline = frag.ts + self.timeout
        partial.seen.append((frag.number, frag.ts, frag.offset, frag.more))
        conflict = self._add(partial, frag)
        if conflict:
            issue = frag.issue(AnomalyCode.NET_IP_FRAGMENT_OVERLAP, f": {conflict}")
            if _reportable(key, partial):
                out.append(_with_ports(issue, partial, key))
        if partial.have == partial.end:
            self._forget(key, partial)
            out.append(_assemble(frag, partial))
            return out
        if len(partial.seen) > MAX_FRAGMENTS:
            out.extend(self._drop(key, f"more than {MAX_FRAGMENTS} fragments"))
        while self._partial and (
            len(self._partial) > self.max_datagrams or self.buffered > self.max_bytes
        ):
            oldest = next(iter(self._partial))
            why = f"dropped: over {self.max_datagrams} datagrams or {self.max_bytes} bytes"
            out.extend(self._drop(oldest, why))
        return out

    def expire(self, now: int) -> list[NetIssue]:
        """Drop the datagrams whose first fragment is older than the timeout at `now`."""
        out: list[NetIssue] = []
        partials = self._partial
        while partials:
            key, partial = next(iter(partials.items()))
            if partial.first_ts + self.timeout > now:
                break
            out.extend(self._drop(key, f"timed out after {self.timeout / 1e6:g} s"))
        return out

    def close(self) -> list[NetIssue]:
        """Drop every datagram still in progress: the capture has ended."""
        out: list[NetIssue] = []
        while self._partial:
            out.extend(self._drop(next(iter(self._partial)), "the capture ended"))
        return out

    # ------------------------------------------------------------------ internals

    def _add(self, partial: _Partial, frag: Fragment) -> str:
        """Add `frag`'s bytes to `partial`; what it contradicts ("" when nothing)."""
        start = frag.offset
        stop = start + len(frag.data) + frag.lost
        if stop > MAX_DATAGRAM_SIZE:
            return f"ends at {stop}, past {MAX_DATAGRAM_SIZE}"
        known = partial.end
        if known >= 0 and stop > known:
            return f"ends at {stop}, past the datagram's end {known}"
        if not frag.more:
            if known >= 0 and stop != known:
                return f"last fragment ends at {stop}, an earlier one at {known}"
            if partial.pieces and partial.pieces[-1][1] > stop:
                return (
                    f"last fragment ends at {stop}, bytes were seen up to {partial.pieces[-1][1]}"
                )
            partial.end = stop
        differ = self._cover(partial, start, start + len(frag.data), frag.data, False)
        if frag.lost:
            at = start + len(frag.data)
            self._cover(partial, at, at + frag.lost, b"", True)
        return "overlapping bytes differ from an earlier fragment's" if differ else ""

    def _cover(self, partial: _Partial, start: int, stop: int, data: bytes, lost: bool) -> bool:
        """Add the parts of [start, stop) no piece covers yet; True if captured bytes that
        overlap a piece differ from it (the piece's are kept)."""
        differ = False
        at = start
        new: list[Piece] = []
        pieces = partial.pieces
        # the pieces are sorted and disjoint: the first that may overlap is found by bisection
        # (only the one before it may reach into [start, stop)), not by a scan from the first
        k = max(bisect_left(pieces, start, key=_start) - 1, 0)
        for i in range(k, len(pieces)):
            p_start, p_stop, p_data, p_lost = pieces[i]
            self.scanned += 1
            if p_stop <= at:
                continue
            if p_start >= stop:
                break
            if p_start > at:
                new.append(_piece(at, p_start, data, start, lost))
            lo, hi = max(p_start, at), min(p_stop, stop)
            same = (
                lost
                or p_lost
                or data[lo - start : hi - start] == p_data[lo - p_start : hi - p_start]
            )
            differ = differ or not same
            at = hi
        if at < stop:
            new.append(_piece(at, stop, data, start, lost))
        for piece in new:
            insort(pieces, piece)
            partial.have += piece[1] - piece[0]
            size = len(piece[2])
            partial.stored += size
            self.buffered += size
        return differ

    def _forget(self, key: Key, partial: _Partial) -> None:
        del self._partial[key]
        self.buffered -= partial.stored
        if self._partial:
            self.deadline = next(iter(self._partial.values())).first_ts + self.timeout
        else:
            self.deadline = _NEVER

    def _drop(self, key: Key, why: str) -> list[NetIssue]:
        partial = self._partial[key]
        self._forget(key, partial)
        if not _reportable(key, partial):
            return []
        src, dst, _ident, _proto = key
        total = "?" if partial.end < 0 else str(partial.end)
        detail = f" of a datagram never completed ({why}; {partial.have} of {total} bytes)"
        version = 4 if len(src) == 4 else 6
        out = []
        for number, ts, offset, more in partial.seen:
            text = f"IPv{version} fragment (offset {offset}, more={int(more)}){detail}"
            issue = NetIssue(AnomalyCode.NET_IP_FRAGMENT, text, number, ts, _text(src), _text(dst))
            out.append(_with_ports(issue, partial, key))
        return out


def _start(piece: Piece) -> int:
    return piece[0]


def _piece(lo: int, hi: int, data: bytes, start: int, lost: bool) -> Piece:
    return (lo, hi, b"" if lost else data[lo - start : hi - start], lost)


def _assemble(last: Fragment, partial: _Partial) -> Datagram:
    parts: list[bytes] = []
    for _start, _stop, data, lost in partial.pieces:
        if lost:
            break
        parts.append(data)
    src, dst, proto = last.src, last.dst, last.proto
    return Datagram(
        last.number, last.ts, src, dst, proto, b"".join(parts), partial.end, last.depth + 1
    )


def _head(partial: _Partial) -> bytes:
    """The captured bytes at the start of the datagram (b"" without its first fragment)."""
    pieces = partial.pieces
    if not pieces or pieces[0][0] != 0 or pieces[0][3]:
        return b""
    return pieces[0][2]


def _reportable(key: Key, partial: _Partial) -> bool:
    """May this datagram concern Pulsar? (TCP is decided by its ports, by the caller.)"""
    proto = key[3]
    if proto != PROTO_UDP:
        return True
    head = _head(partial)
    return len(head) >= 4 and (head[2] << 8 | head[3]) in _TUNNEL_PORTS


def _with_ports(issue: NetIssue, partial: _Partial, key: Key) -> NetIssue:
    """`issue` with a TCP datagram's ports, when its first fragment was seen."""
    head = _head(partial)
    if key[3] != PROTO_TCP or len(head) < 4:
        return issue
    return issue._replace(src_port=head[0] << 8 | head[1], dst_port=head[2] << 8 | head[3])


def _text(raw: bytes) -> str:
    return inet_ntop(AF_INET if len(raw) == 4 else AF_INET6, raw)
