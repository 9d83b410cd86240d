"""The compiled framing stage (dissector/_core/frames.c) against the Python frame decoder.

The reference is `dissector.pulsar.framing.FrameDecoder` over a whole stream. The C scan
runs from offset 0 and, each time it stops, resumes where the Python decoder next is in
sync (after the frame it handed back, or at the frame the decoder resynchronised to).
Every frame C takes must be one the decoder emitted whole at that offset with the same
sizes, command type, checksum verdict (expected and computed values included) and scanned
field values (ids, topic, message id, counts, broker entry metadata, metadata and payload
sizes), and the decoder must have reported no anomaly for it but a bad checksum. Streams:
both directions of every bundled sample capture (reassembled by tests/support/capture.py,
with scapy, not by our TCP code), pcaps/streams/*.bin, and mutated streams
(fuzz.mutators.mutate_stream). The C scan must take every frame of the clean samples
itself (it is no use if it hands all back), fields.h must be what the generator makes from
the descriptors, and the compiled module must be loaded where a compiler was present.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from random import Random
from typing import Any

import pytest
from crc32c import crc32c

from benchmarks.bench_framing import build_stream
from dissector import _core
from dissector.anomalies import AnomalyCode
from dissector.capture import open_capture
from dissector.events import Anomaly, Frame, Segment
from dissector.net.headers import parse_layers
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from dissector.pulsar.wire import COMMAND_TYPES, MESSAGE_ID_FIELDS, SEND, SINGULAR_FIELDS
from fuzz.mutators import mutate_stream
from tests.support import frame_scan
from tests.support.capture import CaptureSummary, _streams
from tests.support.frame_scan import CHECKSUMS, Has, Stop, scan_frames

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "pcaps").glob("*.pcap*"))
RAW_STREAMS = sorted((ROOT / "pcaps" / "streams").glob("*.bin"))
#: Mutated streams compared per run of the suite.
MUTANTS = 3000

needs_frames = pytest.mark.skipif(not frame_scan.COMPILED, reason="pure-Python build")

_IDS = ("request_id", "producer_id", "consumer_id", "sequence_id")
_ID_BITS = (Has.REQUEST_ID, Has.PRODUCER_ID, Has.CONSUMER_ID, Has.SEQUENCE_ID)


@cache
def sample_streams() -> list[bytes]:
    """Both directions of every connection of every bundled sample, and the raw streams."""
    out = [p.read_bytes() for p in RAW_STREAMS]
    for path in SAMPLES:
        out += [s for s in _streams(path, broker_port(path), CaptureSummary()).values() if s]
    return out


def broker_port(path: Path) -> int:
    """The port the capture's first SYN goes to (the samples' brokers listen on any port)."""
    with open_capture(path) as reader:
        for packet in reader:
            seg = parse_layers(packet)
            if isinstance(seg, Segment) and seg.flags & 0x12 == 0x02:
                return seg.dst_port
    raise AssertionError(f"{path}: no SYN")


@contextmanager
def frames_stage(on: bool) -> Iterator[None]:
    """FrameDecoders made inside run with the compiled scan (when built) or without it."""
    saved = _core.ENABLED
    _core.ENABLED = on and _core.COMPILED
    try:
        yield
    finally:
        _core.ENABLED = saved


def python_events(stream: bytes, max_size: int = DEFAULT_MAX_FRAME_SIZE) -> list[Any]:
    """The reference: the Python decoder alone (the compiled scan off)."""
    with frames_stage(on=False):
        decoder = FrameDecoder(max_frame_size=max_size)
    return decoder.feed(stream) + decoder.close()


def expected_row(f: Frame) -> dict[str, Any]:
    """What the C row must hold, from the Python Frame and its decoded protobuf objects."""
    body, ctype = f.body, f.command_type
    row: dict[str, Any] = {"total_size": f.total_size, "command_size": f.command_size}
    row["command_type"] = ctype
    present = Has(0)
    for bit, name in zip(_ID_BITS, _IDS, strict=True):
        if name in SINGULAR_FIELDS[ctype] and body.HasField(name):
            present |= bit
            row[name] = getattr(body, name)
    if "topic" in SINGULAR_FIELDS[ctype] and body.HasField("topic"):
        present |= Has.TOPIC
        row["topic"] = body.topic
    mid = None
    if ctype in MESSAGE_ID_FIELDS:
        name, repeated = MESSAGE_ID_FIELDS[ctype]
        if repeated:
            mids = getattr(body, name)
            present |= Has.NUM_MESSAGES
            row["num_messages"] = len(mids)
            mid = mids[0] if mids else None
        elif body.HasField(name):
            mid = getattr(body, name)
    if ctype == COMMAND_TYPES["ACK"]:
        if body.ack_type == body.Cumulative:
            present |= Has.CUMULATIVE
        if mid is not None and len(mid.ack_set):
            present |= Has.ACK_SET
    if mid is not None:
        present |= Has.MESSAGE_ID
        row["ledger_id"], row["entry_id"] = mid.ledgerId, mid.entryId
    if f.metadata is not None:
        present |= Has.PAYLOAD | Has.NUM_MESSAGES
        if ctype == SEND and body.HasField("num_messages"):
            present |= Has.SEND_COUNT
            row["num_messages"] = body.num_messages
        else:
            row["num_messages"] = f.metadata.num_messages_in_batch
        row["meta_len"] = f.metadata_size
        assert f.payload is not None
        row["payload_len"] = len(f.payload)
    be = f.broker_entry
    if be is not None:
        if be.HasField("broker_timestamp"):
            present |= Has.ENTRY_TS
            row["entry_ts"] = be.broker_timestamp
        if be.HasField("index"):
            present |= Has.ENTRY_INDEX
            row["entry_index"] = be.index
    row["present"] = int(present)
    row["checksum"] = f.checksum
    if f.checksum_expected is not None:
        row["crc_expected"], row["crc_computed"] = f.checksum_expected, f.checksum_computed
    return row


def c_row(buf: bytes, cols: dict[str, Any], i: int) -> dict[str, Any]:
    """The same dict from the C columns of row i (uint64 values back from int64)."""
    present = Has(cols["present"][i])
    row: dict[str, Any] = {
        "total_size": cols["total_size"][i],
        "command_size": cols["command_size"][i],
        "command_type": cols["command_type"][i],
        "present": int(present),
        "checksum": CHECKSUMS[cols["checksum"][i]],
    }
    for bit, name in zip(_ID_BITS, _IDS, strict=True):
        if present & bit:
            row[name] = cols[name][i] & (2**64 - 1)
    if present & Has.TOPIC:
        at = cols["topic_at"][i]
        row["topic"] = buf[at : at + cols["topic_len"][i]].decode()
    if present & Has.MESSAGE_ID:
        row["ledger_id"] = cols["ledger_id"][i] & (2**64 - 1)
        row["entry_id"] = cols["entry_id"][i] & (2**64 - 1)
    if present & Has.NUM_MESSAGES:
        row["num_messages"] = cols["num_messages"][i]
    if present & Has.PAYLOAD:
        row["meta_len"] = cols["meta_len"][i]
        row["payload_len"] = cols["payload_len"][i]
        assert cols["payload_at"][i] == cols["meta_at"][i] + cols["meta_len"][i]
        assert (
            cols["payload_at"][i] + cols["payload_len"][i]
            == cols["offset"][i] + 4 + cols["total_size"][i]
        )
    for name in ("entry_ts", "entry_index"):
        if present & Has[name.upper()]:
            row[name] = cols[name][i] & (2**64 - 1)
    if row["checksum"] in CHECKSUMS[2:]:
        row["crc_expected"], row["crc_computed"] = cols["crc_expected"][i], cols["crc_computed"][i]
    return row


class Walk:
    """The C scan over one stream, handing back to the Python decoder's results."""

    def __init__(self) -> None:
        self.taken = 0  # frames C took
        self.declined_clean = 0  # frames C handed back that Python emitted with no anomaly
        self.handed_back = 0


def compare(stream: bytes, walk: Walk, *, rows: int = 1024, max_size: int = 0) -> None:
    max_size = max_size or DEFAULT_MAX_FRAME_SIZE
    events = python_events(stream, max_size)
    frames = {e.stream_offset: e for e in events if isinstance(e, Frame) and e.complete}
    starts = sorted(frames)
    faults: dict[int, list[str]] = {}
    for e in events:
        if isinstance(e, Anomaly) and e.stream_offset is not None:
            faults.setdefault(e.stream_offset, []).append(e.code)
    ends = {o: o + 4 + f.total_size for o, f in frames.items()}

    def problems(o: int) -> list[str]:
        return [c for at, codes in faults.items() if o <= at < ends[o] for c in codes]

    pos = 0
    while True:
        batch = scan_frames(stream, pos, max_size, rows)
        assert batch is not None
        cols = batch.columns
        for i in range(batch.rows):
            o = cols["offset"][i]
            assert o in frames, f"C took a frame at {o} that Python did not emit whole"
            got, want = c_row(stream, cols, i), expected_row(frames[o])
            assert got == want, (o, got, want)
            allowed = [AnomalyCode.PULSAR_BAD_CHECKSUM] if got["checksum"] == CHECKSUMS[3] else []
            assert problems(o) == allowed, (o, problems(o))
            walk.taken += 1
        assert batch.pos >= pos
        pos = batch.pos
        if batch.stop is Stop.FULL:
            assert batch.rows == rows
            continue
        if batch.stop is Stop.END:
            assert pos == len(stream)
            return
        later = [o for o in starts if o >= pos]
        if batch.stop is Stop.MORE:
            assert not later, f"C waits at {pos}, Python emitted a whole frame at {later[0]}"
            return
        walk.handed_back += 1
        if pos in frames:  # Python emitted the frame C handed back: resume after it
            walk.declined_clean += not problems(pos)
            pos = ends[pos]
        elif later:  # Python resynchronised: resume at the frame it found
            pos = later[0]
        else:
            return


@needs_frames
def test_crc32c_matches_the_package() -> None:
    rng = Random(32)
    # the hardware path runs three streams of 8,192 bytes, then of 256, then one: every
    # boundary between them, and a 1 MiB payload's length
    lanes = [3 * 256 * k + d for k in (1, 2, 31, 32, 33) for d in (-1, 0, 1, 9)]
    lanes += [3 * 8192 * k + d for k in (1, 2) for d in (-1, 0, 1, 3 * 256 + 5)]
    for n in [*range(40), 1000, 4099, 65536 + 7, *lanes, (1 << 20) + 35]:
        data = rng.randbytes(n)
        assert frame_scan.crc32c(data) == crc32c(data), n
        assert frame_scan.crc32c(data, software=True) == crc32c(data), n
    assert frame_scan.crc32c(b"123456789") == 0xE3069283  # RFC 3720 check value


@needs_frames
def test_sample_streams_frame_by_frame() -> None:
    streams = sample_streams()
    assert len(streams) >= 2 * len(SAMPLES)
    walk = Walk()
    for stream in streams:
        compare(stream, walk)
    # the C scan takes every frame of the clean samples itself: nothing handed back
    assert walk.handed_back == 0 and walk.taken > 500, vars(walk)


@needs_frames
def test_batches_and_prefixes_stop_where_python_waits() -> None:
    """Small batches (FULL), every prefix of a stream (MORE), a small frame size limit."""
    stream = RAW_STREAMS[0].read_bytes()
    walk = Walk()
    compare(stream, walk, rows=1)
    for cut in range(0, len(stream), 7):
        compare(stream[:cut], walk)
    compare(stream, walk, max_size=64)
    assert walk.handed_back > 0
    # the framing benchmark's stream: MESSAGE without checksum, ACK, FLOW, PING, PONG ...
    compare(build_stream(20)[0], walk)


@needs_frames
def test_mutated_streams() -> None:
    streams = sample_streams()
    rng = Random(27)
    walk = Walk()
    for _ in range(MUTANTS):
        stream = rng.choice(streams)
        offsets = [e.stream_offset for e in python_events(stream) if isinstance(e, Frame)]
        data, _ops = mutate_stream(rng, stream, offsets, rng.choice(streams))
        compare(data, walk)
    # mutants exercise both sides: frames C takes, and frames it leaves to Python
    assert walk.taken > 10 * MUTANTS and walk.handed_back > MUTANTS // 2, vars(walk)


def test_the_compiled_frames_stage_is_loaded_where_a_compiler_is() -> None:
    compiler = shutil.which(os.environ.get("CC", "cc")) is not None
    expected = compiler and os.environ.get("PULSAR_DISSECTOR_PURE") != "1"
    assert expected == frame_scan.COMPILED, "make install (or PULSAR_DISSECTOR_PURE=1 for both)"
    if expected:
        assert frame_scan.native is not None
        where = frame_scan.native.__file__ or ""
        assert where.endswith(".so"), where
        for source in (ROOT / "dissector" / "_core").glob("*.[ch]"):
            if source.name.startswith(("walk", "_walk", "deal", "_dealer", "recent", "_recent")):
                continue  # the other extensions' (their own tests check them)
            assert os.path.getmtime(where) >= source.stat().st_mtime, f"stale: {source.name}"
