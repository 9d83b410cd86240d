"""Property tests of the frame decoder: round trips, split invariance, garbage and corruption."""

from __future__ import annotations

import itertools
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector import Anomaly, Checksum, Frame, FrameDecoder, command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from tests.support.framehelpers import accounted, anomaly_key, decode, frame_key

U64 = st.integers(min_value=0, max_value=2**64 - 1)
SMALL = st.integers(min_value=0, max_value=2**31 - 1)
TEXT = st.text(max_size=40)


@st.composite
def simple_commands(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["PING", "PONG", "FLOW", "LOOKUP", "PRODUCER", "ACK", "CLOSE"]))
    if kind in ("PING", "PONG"):
        cmd = command(kind)
    elif kind == "FLOW":
        cmd = command("FLOW", consumer_id=draw(U64), messagePermits=draw(SMALL))
    elif kind == "LOOKUP":
        cmd = command("LOOKUP", topic=draw(TEXT), request_id=draw(U64))
    elif kind == "PRODUCER":
        cmd = command("PRODUCER", topic=draw(TEXT), producer_id=draw(U64), request_id=draw(U64))
    elif kind == "ACK":
        ids = draw(st.lists(st.tuples(U64, U64), min_size=1, max_size=5))
        cmd = command(
            "ACK",
            consumer_id=draw(U64),
            ack_type=draw(st.sampled_from([0, 1])),
            message_id=[{"ledgerId": a, "entryId": b} for a, b in ids],
        )
    else:
        cmd = command("CLOSE_PRODUCER", producer_id=draw(U64), request_id=draw(U64))
    return encode_frame(cmd)


@st.composite
def payload_frames(draw: st.DrawFn) -> bytes:
    meta = MessageMetadata(
        producer_name=draw(TEXT),
        sequence_id=draw(U64),
        publish_time=draw(U64),
        num_messages_in_batch=draw(st.integers(1, 100)),
    )
    payload = draw(st.binary(max_size=300))
    checksum = draw(st.sampled_from([True, True, False]))
    if draw(st.booleans()):
        cmd = command("SEND", producer_id=draw(U64), sequence_id=draw(U64))
        return encode_frame(cmd, metadata=meta, payload=payload, checksum=checksum)
    cmd = command(
        "MESSAGE", consumer_id=draw(U64), message_id={"ledgerId": draw(U64), "entryId": draw(U64)}
    )
    entry = draw(st.none() | st.binary(max_size=0).map(lambda _: b"\x08\x01\x10\x02"))
    return encode_frame(cmd, metadata=meta, payload=payload, checksum=checksum, broker_entry=entry)


FRAMES = st.lists(simple_commands() | payload_frames(), min_size=1, max_size=12)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@given(FRAMES)
def test_round_trip(frames: list[bytes]) -> None:
    stream = b"".join(frames)
    decoded, anomalies, dec = decode([stream])
    assert anomalies == []
    assert len(decoded) == len(frames)
    offset = 0
    for raw, f in zip(frames, decoded, strict=True):
        assert f.stream_offset == offset and f.wire_size == len(raw)
        assert (
            encode_frame(
                f.command,
                metadata=f.metadata,
                payload=bytes(f.payload or b""),
                checksum=f.checksum is Checksum.VALID,
                broker_entry=f.broker_entry,
            )
            == raw
        )
        offset += len(raw)
    assert accounted(dec, len(stream))


@given(FRAMES, st.lists(st.integers(min_value=0), max_size=30))
def test_any_split_gives_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frames)
    whole, _, _ = decode([stream])
    pieces, anomalies, dec = decode(split(stream, cuts))
    assert anomalies == []
    assert [frame_key(f) for f in pieces] == [frame_key(f) for f in whole]
    assert accounted(dec, len(stream))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4000), st.lists(st.integers(min_value=0), max_size=10), st.booleans())
def test_garbage_gives_only_events(data: bytes, cuts: list[int], synced: bool) -> None:
    dec = FrameDecoder(synced=synced)
    events = []
    for piece in split(data, cuts):
        events.extend(dec.feed(piece))
    events.extend(dec.close())
    assert all(isinstance(e, Frame | Anomaly) for e in events)
    assert accounted(dec, len(data))


@st.composite
def corrupted_streams(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(draw(FRAMES)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif data:
            del data[i : i + draw(st.integers(1, 16))]
    return bytes(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(corrupted_streams(), st.lists(st.integers(min_value=0), max_size=10))
def test_corruption_gives_only_events_and_same_result_whatever_the_split(
    data: bytes, cuts: list[int]
) -> None:
    whole, whole_anomalies, dec = decode([data])
    pieces, piece_anomalies, dec2 = decode(split(data, cuts))
    assert accounted(dec, len(data)) and accounted(dec2, len(data))
    assert [frame_key(f) for f in pieces] == [frame_key(f) for f in whole]
    assert [anomaly_key(a) for a in piece_anomalies] == [anomaly_key(a) for a in whole_anomalies]


@given(FRAMES, st.integers(min_value=1, max_value=200), st.integers(min_value=0))
def test_gap_accounting(frames: list[bytes], gap: int, where: int) -> None:
    stream = b"".join(frames)
    cut = where % (len(stream) + 1)
    end = min(len(stream), cut + gap)
    dec = FrameDecoder()
    events = dec.feed(stream[:cut]) + dec.gap(end - cut) + dec.feed(stream[end:]) + dec.close()
    assert all(isinstance(e, Frame | Anomaly) for e in events)
    assert accounted(dec, len(stream))
    # Every frame wholly before the gap is decoded exactly.
    expected_before = 0
    offset = 0
    for raw in frames:
        if offset + len(raw) <= cut:
            expected_before += 1
        offset += len(raw)
    got = [e for e in events if isinstance(e, Frame) and e.complete]
    assert len(got) >= expected_before


@pytest.mark.slow  # 6.4 MB of resync under tracemalloc (~6 s)
def test_bounded_memory_on_adversarial_input() -> None:
    # Every 32 bytes a header claiming a near-limit frame whose command decodes: during resync
    # each candidate must be buffered until it can be checked, but never more than one
    # maximal frame at a time, and every byte is still accounted for.
    unit = b"\x00\x50\x00\x00" + b"\x00\x00\x00\x05" + bytes.fromhex("08 12 92 01 00")
    data = (unit + b"\x00" * (32 - len(unit))) * 200_000  # 6.4 MB
    tracemalloc.start()
    dec = FrameDecoder(synced=False)
    events = []
    for i in range(0, len(data), 65536):
        events.extend(dec.feed(data[i : i + 65536]))
    events.extend(dec.close())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert accounted(dec, len(data))
    assert dec.stats.frames == 0
    assert [e.code for e in events if isinstance(e, Anomaly)] == ["pulsar.skipped_bytes"]
    assert peak < 4 * dec.max_frame_size
