"""The fuzzing seeds: the sample captures read with the project's own reader.

Input: pcaps/*.pcap* (plain or gzip) and pcaps/streams/*.bin (one direction's raw bytes).
Output: a `Corpus`: each capture's packet records, every reassembled Pulsar byte stream with
the offsets of its frames, and runs of payload frames (SEND/MESSAGE) per stream.
Rule: seeds are what the project itself reads from the samples (`open_capture`, the TCP
reassembler, the frame decoder); a sample the reader rejects is left out, loudly.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dissector.capture import open_capture
from dissector.events import Frame, Segment, StreamData
from dissector.flow.tcp import Reassembler
from dissector.net.headers import parse_packet
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import PAYLOAD_TYPES
from fuzz.mutators import PayloadFrame, Rec

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
#: Bytes of one reassembled stream kept as a seed (the large samples' streams are MiBs).
MAX_SEED_STREAM = 512 * 1024
#: Payload frames kept per run (consecutive frames of one stream).
MAX_RUN = 12


@dataclass(frozen=True)
class CaptureSeed:
    name: str
    records: tuple[Rec, ...]
    gz: bool


@dataclass(frozen=True)
class StreamSeed:
    name: str
    data: bytes
    offsets: tuple[int, ...]  # where its frames start


@dataclass
class Corpus:
    captures: list[CaptureSeed] = field(default_factory=list)
    streams: list[StreamSeed] = field(default_factory=list)
    payload_runs: list[tuple[PayloadFrame, ...]] = field(default_factory=list)


def _records(path: Path) -> tuple[tuple[Rec, ...], bool]:
    with open_capture(path) as reader:
        recs = tuple(Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader)
        return recs, reader.gzip


def _streams(name: str, recs: tuple[Rec, ...]) -> dict[str, bytes]:
    """Every direction of every TCP connection, reassembled (the samples have no loss)."""
    from dissector.events import RawPacket

    tcp = Reassembler()
    parts: dict[str, list[bytes]] = defaultdict(list)
    for number, rec in enumerate(recs, start=1):
        seg = parse_packet(RawPacket(number, rec.ts, rec.linktype, rec.data, rec.orig_len))
        if not isinstance(seg, Segment):
            continue
        for ev in tcp.feed(seg):
            if isinstance(ev, StreamData):
                key = f"{name}#{ev.conn_id}.{ev.direction.name[0].lower()}"
                parts[key].append(ev.data)
    tcp.close()
    return {k: b"".join(v)[:MAX_SEED_STREAM] for k, v in parts.items()}


def _frames(data: bytes) -> tuple[list[int], list[PayloadFrame]]:
    dec = FrameDecoder()
    frames = [e for e in dec.feed(data) + dec.close() if isinstance(e, Frame)]
    payload = [
        PayloadFrame(
            f.command.SerializeToString(),
            f.metadata.SerializeToString(),
            bytes(f.payload),
            None if f.broker_entry is None else f.broker_entry.SerializeToString(),
            f.checksum is not None and f.checksum.value == "valid",
        )
        for f in frames
        if f.command_type in PAYLOAD_TYPES and f.metadata is not None and f.payload is not None
    ]
    return [f.stream_offset for f in frames], payload


def load(pcaps: Path = PCAPS) -> Corpus:
    """The corpus of every sample in `pcaps` (and its streams/ folder)."""
    corpus = Corpus()
    streams: dict[str, bytes] = {}
    for path in sorted(pcaps.glob("*.pcap*")):
        recs, gz = _records(path)
        if not recs:
            raise RuntimeError(f"seed {path} has no packets")
        name = path.name.split(".")[0]
        corpus.captures.append(CaptureSeed(name, recs, gz))
        streams.update(_streams(name, recs))
    for path in sorted((pcaps / "streams").glob("*.bin")):
        streams[path.name] = path.read_bytes()[:MAX_SEED_STREAM]
    for name, data in sorted(streams.items()):
        offsets, payload = _frames(data)
        if not offsets:
            continue
        corpus.streams.append(StreamSeed(name, data, tuple(offsets)))
        for i in range(0, len(payload), MAX_RUN):
            corpus.payload_runs.append(tuple(payload[i : i + MAX_RUN]))
    if not corpus.captures or not corpus.streams or not corpus.payload_runs:
        raise RuntimeError(f"no usable seeds in {pcaps}")
    return corpus
