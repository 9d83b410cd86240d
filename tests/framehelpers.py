"""Test helpers: feed a stream to a FrameDecoder in given pieces and collect what comes out."""

from __future__ import annotations

from collections.abc import Iterable

from dissector import Anomaly, Frame, FrameDecoder


def decode(
    pieces: Iterable[bytes], *, decoder: FrameDecoder | None = None, close: bool = True
) -> tuple[list[Frame], list[Anomaly], FrameDecoder]:
    dec = decoder or FrameDecoder()
    events = []
    for i, piece in enumerate(pieces, start=1):
        events.extend(dec.feed(piece, packet=i, ts=i * 1000))
    if close:
        events.extend(dec.close())
    frames = [e for e in events if isinstance(e, Frame)]
    anomalies = [e for e in events if isinstance(e, Anomaly)]
    assert len(frames) + len(anomalies) == len(events)
    return frames, anomalies, dec


def accounted(dec: FrameDecoder, stream_length: int) -> bool:
    s = dec.stats
    return s.frame_bytes + s.skipped_bytes + s.gap_bytes + dec.pending == stream_length


def one_byte_at_a_time(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def frame_key(f: Frame) -> tuple[object, ...]:
    """What must not depend on how the stream was split."""
    return (
        f.stream_offset,
        f.total_size,
        f.command_size,
        f.command_name,
        f.command.SerializePartialToString(),
        f.checksum,
        f.checksum_expected,
        f.checksum_computed,
        None if f.metadata is None else f.metadata.SerializePartialToString(),
        None if f.payload is None else bytes(f.payload),
        f.complete,
    )


def anomaly_key(a: Anomaly) -> tuple[object, ...]:
    return (a.code, a.stream_offset, a.length)


def names(events: Iterable[Frame | Anomaly]) -> list[str]:
    """Command name of each frame and code of each anomaly, in order."""
    return [e.command_name if isinstance(e, Frame) else e.code for e in events]
