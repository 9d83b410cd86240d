"""The compiled stage (C, dissector/_core/*.c) and how the Python readers call it.

Input: a capture reader's buffer, position and counters (dissector.capture.pcap/pcapng call
the walks made here at the top of their record loops).
Output: `pcap_walk(header)` / `pcapng_walk()`: functions that walk the complete, common
records from a position and return, per packet, a `Segment` (a plain Ethernet/VLAN/IPv4/IPv6
TCP segment, parsed in C) or a `RawPacket` (anything else: the Python stages parse it);
`None` when the extension is not built (the pure-Python package: the readers then walk every
record themselves). Given a `dealer` (`dealer(shard, clock)`, a -j worker's), the walks deal
packets to shards themselves and skip other shards' (dissector.flow.shard).
Rule: the compiled stage only ever takes a record or a packet it can give exactly as the
Python stages would (tests/core/ compares them on every sample, crafted and mutated
capture); everything else stays with the Python code, which is the reference.
`COMPILED` says whether the extension was loaded (a test fails if a compiler was present at
install and it was not: a build that silently fell back to Python). `ENABLED` (and
`active()`) says whether reads use it: chosen once, when this module is imported, from the
one switch `PULSAR_DISSECTOR_CORE` ("0": the Python stages alone, in a build that has the
compiled ones; the benchmark compares both ways in one build, the differential tests set
`ENABLED` itself).
`stats()`: what the compiled stages made in this process (segments and raw packets of the
walk, packets a dealing walk skipped, frames the scan took), so a test can prove that a read
took the compiled path.
`frames_scan()`: the compiled frame scan (dissector/_core/frames.c) a new
`dissector.pulsar.framing.FrameDecoder` runs over its synced stream, or None (pure Python,
or `PULSAR_DISSECTOR_CORE=0`).
`frames_block()`: the same scan for frame runs (dissector.pulsar.frame_runs): only the
command types of a mask, every frame's columns in one bytes block; None as frames_scan.
`recent_bytes()`: the compiled memory of a TCP direction's recent bytes
(dissector/_core/recent.c) for a new flow table, or None (pure Python, or
`PULSAR_DISSECTOR_CORE=0`: dissector.flow.recent's RecentBytes then).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from dissector.events import Dealt, DealtRaw, RawPacket, Segment, Skipped

if TYPE_CHECKING:
    from dissector.capture.pcap import PcapHeader, PcapWalk
    from dissector.capture.pcapng import PcapngWalk

native: ModuleType | None
try:
    native = importlib.import_module("dissector._core._walk")
except ImportError:  # the pure-Python package (no C compiler, or PULSAR_DISSECTOR_PURE=1)
    native = None

frames_native: ModuleType | None
try:
    frames_native = importlib.import_module("dissector._core._frames")
except ImportError:
    frames_native = None

recent_native: ModuleType | None
try:
    recent_native = importlib.import_module("dissector._core._recent")
except ImportError:
    recent_native = None

COMPILED = native is not None
if native is not None:
    native.set_types(Segment, RawPacket, Dealt, DealtRaw, Skipped)

#: The link type whose packets the compiled dealer keys (deal.c).
ETHERNET = 1
#: Set to "0" to read with the Python stages alone in a build that has the compiled one.
SWITCH = "PULSAR_DISSECTOR_CORE"
#: Whether reads use the compiled stages, chosen once per process (tests may set it).
ENABLED: bool = COMPILED and os.environ.get(SWITCH) != "0"

#: One frame taken by the compiled scan, as `scan_rows` gives it: (offset, total_size,
#: command_size, checksum verdict (frames.h PD_CHECKSUM_*, 0: no payload), crc_expected,
#: crc_computed, meta_at, meta_len); offsets from the start of the buffer scanned.
ScannedFrame = tuple[int, int, int, int, int, int, int, int]
#: scan(buf, pos, max_frame_size) -> (where it stopped, why (PD_STOP_*), frames taken).
FrameScan = Callable[[bytes, int, int], tuple[int, int, list[ScannedFrame]]]


def active() -> bool:
    """Whether reads use the compiled stage: built, and not turned off by `SWITCH`."""
    return ENABLED


#: scan_block(buf, pos, max_frame_size, only_types) -> (where it stopped, why, frames
#: taken, their rows: n * len(COLUMNS) native int64, row-major).
FrameBlockScan = Callable[[bytes, int, int, int], tuple[int, int, int, bytes]]


def frames_block() -> FrameBlockScan | None:
    """The compiled scan of frame runs, or None (as `frames_scan`)."""
    if frames_scan() is None:
        return None
    assert frames_native is not None
    scan: FrameBlockScan = frames_native.scan_block
    return scan


def stats() -> dict[str, int]:
    """What the compiled stages made since they were loaded in this process: `segments` and
    `raw_packets` the walk gave, `packets_skipped` (other shards'), `frames_taken` by the
    frame scan, `recent_pieces` kept by the compiled recent bytes; {} in the pure package."""
    out: dict[str, int] = {}
    for module in (native, frames_native, recent_native):
        if module is not None:
            out.update(module.stats())
    return out


def frames_scan() -> FrameScan | None:
    """The compiled frame scan for a new frame decoder, or None (not built, or switched off)."""
    if frames_native is None or not ENABLED:
        return None
    scan: FrameScan = frames_native.scan_rows
    return scan


def recent_bytes() -> type | None:
    """The compiled type a new flow table keeps each direction's recent bytes in (the same
    interface as dissector.flow.recent.RecentBytes), or None (not built, or switched off)."""
    if recent_native is None or not active():
        return None
    kind: type = recent_native.RecentBytes
    return kind


#: What a walk gives per packet: parsed in C, or to be parsed by dissector.net.headers;
#: with a dealer, this shard's packets it dealt and runs of other shards' it skipped.
Walked = Segment | RawPacket | Skipped


class Dealer(Protocol):
    """The compiled dealer (_walk.Dealer, dissector/_core/deal.h)."""

    def deal(self, a: bytes, a_port: int, b: bytes, b_port: int) -> int: ...


def dealer(shard: tuple[int, int], capacity: int, clock: bool) -> Dealer | None:
    """A compiled dealer for shard (k, n) remembering `capacity` connections (one per group
    of a read: it holds the dealing), or None where reads do not use the compiled stage.
    clock: the pipeline keeps an idle clock (its steps among skipped packets are told)."""
    if native is None or not active():
        return None
    made: Dealer = native.Dealer(shard[1], shard[0], capacity, clock)
    return made


def pcap_walk(header: PcapHeader, deal: Dealer | None = None) -> PcapWalk[Walked] | None:
    """The compiled walk of a pcap file with this header, or None (pure Python)."""
    if native is None:
        return None
    scan = native.scan_pcap
    little = header.order == "<"
    frac_div = 1000 if header.nanosecond else 1
    linktype = header.linktype
    if linktype != ETHERNET:
        deal = None  # no packet of it keyed in C: the walk would stop at each one

    def walk(buf: bytes, pos: int, number: int) -> tuple[int, int, list[Walked]]:
        result: tuple[int, int, list[Walked]] = scan(
            buf, pos, little, frac_div, linktype, number, dealer=deal
        )
        return result

    return walk


def pcapng_walk(deal: Dealer | None = None) -> PcapngWalk[Walked] | None:
    """The compiled walk of Enhanced Packet Blocks, or None (pure Python)."""
    if native is None:
        return None
    scan = native.scan_pcapng
    if deal is None:
        plain: PcapngWalk[Walked] = scan
        return plain

    def walk(
        buf: bytes, pos: int, little: bool, interfaces: object, number: int, last_ts: int
    ) -> tuple[int, int, int, list[Walked]]:
        result: tuple[int, int, int, list[Walked]] = scan(
            buf, pos, little, interfaces, number, last_ts, dealer=deal
        )
        return result

    return walk
