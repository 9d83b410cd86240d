"""Adversarial captures: each attack of issue 14 crafted, read whole, and checked against
what was crafted.

Every capture here is hostile on purpose (sizes that lie, counts of 2^31, endless chunks,
100,000 connections never closed, bombs). The rule for all of them: the read finishes, in
time and memory that follow the input's size; the damage is reported as registered anomaly
rows; every string is text; and for every direction of every connection, frame + skipped +
gap bytes (+ the PROXY preamble) = stream bytes. Expected counts come from the crafting
(frames put in, connections opened, bytes dropped), never from our own output.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import cramjam
import pyarrow as pa
import pytest

from dissector.anomalies import REGISTRY
from dissector.flow.tcp import MAX_OPEN_FLOWS
from dissector.pulsar.decompression import LZ4, SNAPPY, ZLIB, ZSTD
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from dissector.read import read_tables
from tests.support.crafted import C2B, T0_US, Conn, Session, msg, write_pcap

PING = encode_frame(command("PING"))
MB = 1 << 20
SEGMENT = 60_000  # payload bytes per segment: an IPv4 packet holds at most 65,535


# --------------------------------------------------------------------------- checks


def invariants(tables: dict[str, pa.Table]) -> None:
    """What holds for any input: registered codes, text strings, exact byte accounting."""
    assert set(tables["anomalies"].column("code").to_pylist()) <= set(REGISTRY)
    for table in tables.values():
        for i, column in enumerate(table.columns):
            if pa.types.is_string(table.schema.field(i).type):
                assert all(v is None or isinstance(v, str) for v in column.to_pylist())
    for conv in tables["conversations"].to_pylist():
        for side in ("c2b", "b2c"):
            parts = sum(conv[f"{k}_bytes_{side}"] for k in ("frame", "skipped", "gap"))
            preamble = conv["preamble_bytes"] if side == "c2b" else 0
            assert parts + preamble == conv[f"stream_bytes_{side}"], (conv, side)


def codes(tables: dict[str, pa.Table]) -> list[str]:
    return [str(c) for c in tables["anomalies"].column("code").to_pylist()]


def read(path: Path) -> dict[str, pa.Table]:
    tables = read_tables(path)
    invariants(tables)
    return tables


def payload_session(*frames: bytes) -> Session:
    """A connection that opens (handshake, CONNECT) and then sends `frames` C2B."""
    s = Session()
    s.handshake()
    s.exchange([msg(C2B, "CONNECT", client_version="adversary", protocol_version=21)])
    for f in frames:
        for at in range(0, len(f), SEGMENT):
            s.send(C2B, f[at : at + SEGMENT])
    return s


def send(metadata: MessageMetadata, payload: bytes, sequence_id: int = 0) -> bytes:
    cmd = command("SEND", producer_id=1, sequence_id=sequence_id)
    return encode_frame(cmd, metadata=metadata, payload=payload)


def meta(**fields: Any) -> MessageMetadata:
    return MessageMetadata(
        producer_name="adversary", sequence_id=0, publish_time=T0_US // 1000, **fields
    )


#: Runs the CLI, then writes the process's own peak RSS (VmHWM, kB: this process's memory
#: alone, unlike rusage, which a child inherits from the parent it was forked from).
_MEASURED = """
import runpy, sys
report, sys.argv = sys.argv[1], ["pulsar-dissect", *sys.argv[2:]]
try:
    runpy.run_module("dissector.frontends.cli", run_name="__main__")
finally:
    with open("/proc/self/status") as status, open(report, "w") as out:
        out.write(next(l for l in status if l.startswith("VmHWM:")).split()[1])
"""


def run_cli_measured(*args: str) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """The CLI (-j 1: one process) in a child: its result, wall seconds and peak RSS in MB."""
    with tempfile.NamedTemporaryFile("r") as report:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-c", _MEASURED, report.name, *args, "-j", "1"],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        seconds = time.monotonic() - started
        peak_kb = int(report.read() or 0)
    return result, seconds, peak_kb // 1024


# --------------------------------------------------------------------------- frames


def test_a_frame_claiming_4_gib_then_dribbling_bytes(tmp_path: Path) -> None:
    """totalSize = 0xFFFFFFF0, then 2 MB in 1,000-byte segments, then a PING: the claim is
    refused at once (never waited for or buffered), the rest is skipped or resynced, and
    the PING after it is found."""
    s = payload_session()
    s.send(C2B, struct.pack(">II", 0xFFFFFFF0, 0xFFFFFFE0))
    for i in range(2000):
        s.send(C2B, bytes([i % 251]) * 1000)
    s.send(C2B, PING)
    tables = read(write_pcap(tmp_path / "claim.pcap", s.segs).path)
    assert "pulsar.frame_too_large" in codes(tables)
    assert tables["frames"].column("command").to_pylist() == ["CONNECT", "PING"]
    (conv,) = tables["conversations"].to_pylist()
    assert conv["stream_bytes_c2b"] == len(s.placed[0].msg.data) + 8 + 2_000_000 + len(PING)


@pytest.mark.slow  # 100,000 then 300,000 frames (~6 s)
def test_millions_of_tiny_frames_take_linear_time(tmp_path: Path) -> None:
    """300,000 PING frames (10 bytes each) in 64 KiB segments: every one is a row, and the
    read of the whole stream costs about three times that of a third of it."""
    per_segment = SEGMENT // len(PING)

    def capture(frames: int) -> Path:
        s = payload_session()
        segment = PING * per_segment
        full, rest = divmod(frames, per_segment)
        for _ in range(full):
            s.send(C2B, segment)
        s.send(C2B, PING * rest)
        return write_pcap(tmp_path / f"tiny{frames}.pcap", s.segs).path

    # every frame decoded, nothing reported; that the time is linear in the frames is the
    # growth check's to say (fuzz.growth), not a test's: no test depends on the machine
    tables = read_tables(capture(300_000), tables=["frames", "conversations", "anomalies"])
    assert tables["frames"].num_rows == 300_000 + 1  # the CONNECT too
    assert codes(tables) == []


# --------------------------------------------------------------------------- TCP


def syn_flood_pcap(path: Path, connections: int) -> None:
    """A classic pcap of `connections` SYNs to 10.0.0.2:6650 from distinct endpoints,
    written with struct (scapy would take minutes): Ethernet, IPv4, TCP, no payload."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
    for i in range(connections):
        src = bytes([10, 1 + (i >> 16), (i >> 8) & 0xFF, i & 0xFF])
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, i & 0xFFFF, 0x4000, 64, 6, 0, src,
                         bytes([10, 0, 0, 2]))  # fmt: skip
        tcp = struct.pack(">HHIIBBHHH", 40000 + i % 20000, 6650, i, 0, 0x50, 0x02, 65535, 0, 0)
        frame = eth + ip + tcp
        ts = T0_US + i * 10
        out.append(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(frame), len(frame)))
        out.append(frame)
    path.write_bytes(b"".join(out))


@pytest.mark.slow  # 100,000 connections (~7 s)
def test_100000_connections_never_closed_are_bounded_and_evictions_reported(
    tmp_path: Path,
) -> None:
    extra = 250
    total = MAX_OPEN_FLOWS + extra
    path = tmp_path / "flood.pcap"
    syn_flood_pcap(path, total)
    tables = read_tables(path, tables=["conversations", "anomalies"])
    evicted = [c for c in codes(tables) if c == "tcp.flow_evicted"]
    assert len(evicted) == extra  # the table never holds more than MAX_OPEN_FLOWS
    ended = tables["conversations"].column("ended").to_pylist()
    assert len(ended) == total
    assert ended.count("evicted") == extra


def test_a_deep_out_of_order_window_is_bounded(tmp_path: Path) -> None:
    """The first 64 KiB segment is lost and 20 MB follow in reverse order: more than the
    out-of-order buffer holds (16 MiB), so a gap is declared rather than waiting."""
    s = payload_session()
    start = s.sent[C2B]
    frame = send(meta(), b"o" * 59_000)  # one SEND frame per segment: 350 frames, 21 MB
    pieces = [frame] * 350
    size = len(pieces[0])
    segs = [s.send(C2B, p, at=start + k * size) for k, p in enumerate(pieces)]
    handshake_and_connect = s.segs[: len(s.segs) - len(segs)]
    order = handshake_and_connect + list(reversed(segs[1:]))  # segs[0] never arrives
    tables = read(write_pcap(tmp_path / "ooo.pcap", order).path)
    assert "tcp.out_of_order_overflow" in codes(tables)
    (conv,) = tables["conversations"].to_pylist()
    assert conv["gap_bytes_c2b"] >= size  # at least the lost segment


def test_sequence_wrap_around_with_a_lost_segment(tmp_path: Path) -> None:
    """The client's sequence numbers wrap past 2^32 mid-stream and one segment is lost:
    the gap is exactly its bytes, and the frames after it are found."""
    s = Session(Conn(client_isn=0xFFFFFFFF - 3000))
    s.handshake()
    s.exchange([msg(C2B, "CONNECT", client_version="wrap", protocol_version=21)])
    lost_at = 3
    segs = [s.send(C2B, PING * 100) for _ in range(8)]  # 1,000 bytes each, wrapping at ~3k
    kept = [seg for seg in s.segs if seg is not segs[lost_at]]
    tables = read(write_pcap(tmp_path / "wrap.pcap", kept).path)
    (conv,) = tables["conversations"].to_pylist()
    assert conv["gap_bytes_c2b"] == len(PING) * 100
    pings = tables["frames"].column("command").to_pylist().count("PING")
    assert pings == 7 * 100


# --------------------------------------------------------------------------- payloads


def _compressed(codec: str, size: int) -> tuple[int, bytes]:
    zeros = bytes(size)
    if codec == "LZ4":
        return LZ4, bytes(cramjam.lz4.compress_block(zeros, store_size=False))
    if codec == "ZLIB":
        return ZLIB, zlib.compress(zeros, 9)
    if codec == "ZSTD":
        return ZSTD, bytes(cramjam.zstd.compress(zeros))
    return SNAPPY, bytes(cramjam.snappy.compress_raw(zeros))


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize("codec", ["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_a_decompression_bomb_with_a_lying_size_is_not_expanded(tmp_path: Path, codec: str) -> None:
    """A payload of zeros that inflates to 200 MB (60 MB for Snappy, whose ratio is lower)
    claims uncompressed_size 100: reported, never expanded past the bound (about 5 MB), and
    the process stays far below what expanding it would take."""
    size = 200 * MB if codec != "SNAPPY" else 60 * MB
    compression, payload = _compressed(codec, size)
    assert len(payload) < 4 * MB  # what the capture carries is small
    frame = send(meta(compression=compression, uncompressed_size=100), payload)
    path = write_pcap(tmp_path / f"bomb-{codec}.pcap", payload_session(frame).segs).path
    res, _, peak_mb = run_cli_measured(
        "read", str(path), "--table", "anomalies", "--format", "csv", "-o", str(tmp_path / "a.csv")
    )
    assert res.returncode == 0, res.stderr
    found = (tmp_path / "a.csv").read_text()
    assert "payload.decompression_bomb" in found or "payload.size_mismatch" in found, found
    assert 0 < peak_mb < 400, peak_mb  # 200 MB expanded would show
    tables = read(path)
    assert tables["messages"].num_rows == 1


def test_chunks_that_never_finish_and_a_chunk_count_of_2_31(tmp_path: Path) -> None:
    """3,000 chunked messages each send only their first chunk (claiming 2^31 - 1 chunks):
    open chunked messages stay bounded, and every one still gets a messages row."""
    frames = [
        send(
            meta(
                uuid=f"u{k}",
                chunk_id=0,
                num_chunks_from_msg=2**31 - 1,
                total_chunk_msg_size=2**31 - 1,
            ),
            b"c" * 100,
            sequence_id=k,
        )
        for k in range(3000)
    ]
    s = payload_session(b"".join(frames))
    tables = read(write_pcap(tmp_path / "chunks.pcap", s.segs).path)
    assert tables["frames"].column("command").to_pylist().count("SEND") == 3000
    assert tables["messages"].num_rows == 3000
    assert set(codes(tables)) <= {
        "payload.chunk_missing",
        "payload.chunk_count_invalid",
        "payload.chunk_size_mismatch",
    }


def test_a_batch_claiming_2_31_messages(tmp_path: Path) -> None:
    """num_messages_in_batch = 2^31 - 1 over a 64-byte payload: a batch anomaly, rows
    bounded by what the payload can hold (not 2^31)."""
    frame = send(meta(num_messages_in_batch=2**31 - 1), b"\x00\x00\x00\x02\x18\x05" + b"x" * 58)
    tables = read(write_pcap(tmp_path / "batch.pcap", payload_session(frame).segs).path)
    assert "payload.batch_invalid" in codes(tables)
    assert tables["messages"].num_rows <= 64


def test_a_huge_properties_map(tmp_path: Path) -> None:
    """200,000 properties in one message's metadata (about 4 MB): decoded in bounded time,
    one message row."""
    props = [{"key": f"k{i}", "value": f"v{i}"} for i in range(200_000)]
    frame = send(meta(properties=props), b"p")
    assert len(frame) < 5 * MB  # within the default maximum frame size
    tables = read(write_pcap(tmp_path / "props.pcap", payload_session(frame).segs).path)
    (row,) = tables["messages"].to_pylist()
    assert row["payload_size"] == 1


def test_deeply_nested_and_malformed_protobuf(tmp_path: Path) -> None:
    """A BaseCommand whose unknown field nests 100,000 groups, then one whose length runs
    past the frame: undecodable, not a crash; the decoder resyncs past both (skipped bytes,
    exactly their size) and finds the PING after them."""
    deep = b"\x08\x12" + b"\xa3\x3e" * 100_000 + b"\xa4\x3e" * 100_000  # PING + groups 999
    nested = struct.pack(">II", 4 + len(deep), len(deep)) + deep
    bad_len = b"\x08\x12\x12\xff\xff\xff\x0f"  # field 2: length 2^32-1 in a 7-byte command
    malformed = struct.pack(">II", 4 + len(bad_len), len(bad_len)) + bad_len
    tables = read(
        write_pcap(tmp_path / "pb.pcap", payload_session(PING, nested, malformed, PING).segs).path
    )
    assert "pulsar.command_undecodable" in codes(tables)
    assert tables["frames"].column("command").to_pylist() == ["CONNECT", "PING", "PING"]
    (conv,) = tables["conversations"].to_pylist()
    assert conv["skipped_bytes_c2b"] == len(nested) + len(malformed)


# --------------------------------------------------------------------------- capture files


def test_timestamps_out_of_order(tmp_path: Path) -> None:
    """Packets whose capture times go backwards: read in file order, every frame a row."""
    s = payload_session(PING, PING, PING)
    segs = [seg.replace(ts_us=T0_US + (len(s.segs) - i) * 1000) for i, seg in enumerate(s.segs)]
    tables = read(write_pcap(tmp_path / "ts.pcap", segs).path)
    assert tables["frames"].column("command").to_pylist() == ["CONNECT", "PING", "PING", "PING"]


@pytest.mark.parametrize("caplen", [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 5000])
def test_pcap_records_whose_length_runs_past_the_end(tmp_path: Path, caplen: int) -> None:
    """A record header whose caplen exceeds 2^31 or the file: the packets before it are
    dissected, the rest is a capture anomaly, exit 0 and no traceback."""
    s = payload_session(PING)
    path = write_pcap(tmp_path / "good.pcap", s.segs).path
    data = path.read_bytes() + struct.pack("<IIII", 1_700_000_001, 0, caplen, caplen) + b"x" * 64
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(data)
    tables = read(bad)
    assert tables["frames"].column("command").to_pylist() == ["CONNECT", "PING"]
    assert set(codes(tables)) & {"capture.truncated", "capture.corrupt_record"}
    res, _, _ = run_cli_measured("read", str(bad))
    assert res.returncode == 0 and "Traceback" not in res.stderr
