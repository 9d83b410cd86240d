"""Capture readers on files written by scapy or built block by block from the pcapng spec."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import PcapNgWriter, PcapWriter

from dissector.capture import CaptureIssue, open_capture, pcap
from dissector.capture import _source as source
from dissector.errors import InputError, UsageError
from dissector.events import RawPacket

T0 = 1_700_000_000  # seconds since the epoch, 2023-11-14


def frame(i: int, size: int = 60) -> bytes:
    """A distinct Ethernet/IPv4/TCP frame per i, `size` bytes of payload."""
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=40000 + i, dport=6650)
    return bytes(pkt / Raw(bytes([i % 256]) * size))


def write_pcap(path: Path, records: list[tuple[int, int, bytes]], **kw: Any) -> Path:
    """records: (seconds, fraction in the file's unit, bytes); scapy writes the file."""
    writer = PcapWriter(str(path), linktype=kw.pop("linktype", 1), **kw)
    writer.write_header(None)
    for sec, frac, data in records:
        writer.write_packet(data, sec=sec, usec=frac)
    writer.close()
    return path


def read(path: Path) -> tuple[list[RawPacket], list[CaptureIssue]]:
    with open_capture(path) as reader:
        packets = list(reader)
    return packets, reader.issues


# --- pcapng blocks, built from the spec (draft-ietf-opsawg-pcapng) ---


def block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    length = struct.pack(order + "I", 12 + len(body))
    return struct.pack(order + "I", btype) + length + body + length


def option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def shb(order: str = "<") -> bytes:
    return block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(order: str, linktype: int, snaplen: int = 0, tsresol: int | None = None,
        tsoffset: int | None = None) -> bytes:  # fmt: skip
    opts = b""
    if tsresol is not None:
        opts += option(order, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += option(order, 14, struct.pack(order + "q", tsoffset))
    if opts:
        opts += option(order, 0, b"")
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + opts)


def epb(order: str, ifid: int, ts: int, data: bytes, orig_len: int | None = None) -> bytes:
    head = struct.pack(
        order + "IIIII", ifid, ts >> 32, ts & 0xFFFFFFFF, len(data), orig_len or len(data)
    )
    return block(order, 6, head + data)


def spb(order: str, data: bytes, orig_len: int | None = None) -> bytes:
    return block(order, 3, struct.pack(order + "I", orig_len or len(data)) + data)


def opb(order: str, ifid: int, ts: int, data: bytes) -> bytes:
    head = struct.pack(order + "HHIIII", ifid, 0, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data))
    return block(order, 2, head + data)


def write(path: Path, *parts: bytes) -> Path:
    path.write_bytes(b"".join(parts))
    return path


# --- classic pcap ---


def test_pcap_microseconds_little_endian(tmp_path):
    records = [(T0 + i, 999_999 - i, frame(i, 10 * i)) for i in range(5)]
    path = write_pcap(tmp_path / "a.pcap", records)
    reader = open_capture(path)
    assert (reader.format, reader.gzip, reader.path) == ("pcap", False, str(path))
    packets = list(reader)
    assert reader.issues == []
    assert [p.number for p in packets] == [1, 2, 3, 4, 5]
    assert [p.ts for p in packets] == [(T0 + i) * 1_000_000 + 999_999 - i for i in range(5)]
    assert [p.data for p in packets] == [r[2] for r in records]
    assert all(p.linktype == 1 and p.interface == 0 for p in packets)
    assert [p.orig_len for p in packets] == [len(r[2]) for r in records]


def test_pcap_nanoseconds_big_endian_round_down(tmp_path):
    path = write_pcap(
        tmp_path / "ns.pcap",
        [(T0, 123_456_789, frame(0)), (T0, 999, frame(1)), (T0 + 1, 999_999_999, frame(2))],
        nano=True,
        endianness=">",
        linktype=101,
    )
    assert path.read_bytes()[:4] == bytes.fromhex("a1b23c4d")
    packets, issues = read(path)
    assert [p.ts for p in packets] == [
        T0 * 1_000_000 + 123_456,
        T0 * 1_000_000,
        (T0 + 1) * 1_000_000 + 999_999,
    ]
    assert {p.linktype for p in packets} == {101}
    assert issues == []


@pytest.mark.parametrize("magic", ["a1b2c3d4", "d4c3b2a1", "a1b23c4d", "4d3cb2a1"])
def test_pcap_magics_by_hand(tmp_path, magic):
    order = ">" if magic.startswith("a1") else "<"
    nano = "3c" in magic
    header = bytes.fromhex(magic) + struct.pack(order + "HHiIII", 2, 4, 0, 0, 65535, 113)
    record = struct.pack(order + "IIII", T0, 5_000 if nano else 5, 3, 40) + b"abc"
    packets, issues = read(write(tmp_path / "x", header, record))
    assert packets == [RawPacket(1, T0 * 1_000_000 + 5, 113, b"abc", 40, 0)]
    assert issues == []


def test_pcap_linktype_ignores_fcs_bits(tmp_path):
    header = bytes.fromhex("d4c3b2a1") + struct.pack("<HHiIII", 2, 4, 0, 0, 65535, 0x1000_0001)
    packets, _ = read(write(tmp_path / "fcs.pcap", header, struct.pack("<IIII", 1, 2, 1, 1), b"z"))
    assert packets[0].linktype == 1


def test_empty_pcap_has_no_packets(tmp_path):
    packets, issues = read(write_pcap(tmp_path / "e.pcap", []))
    assert (packets, issues) == ([], [])


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_gzip_detected_by_magic_not_name(tmp_path, fmt):
    if fmt == "pcap":
        plain = write_pcap(tmp_path / "p", [(T0, i, frame(i)) for i in range(3)]).read_bytes()
    else:
        plain = (
            shb() + idb("<", 1) + b"".join(epb("<", 0, T0 * 10**6 + i, frame(i)) for i in range(3))
        )
    path = tmp_path / "capture.bin"  # no .gz: the magic decides
    path.write_bytes(gzip.compress(plain))
    reader = open_capture(path)
    assert (reader.format, reader.gzip) == (fmt, True)
    packets = list(reader)
    assert [p.ts for p in packets] == [T0 * 1_000_000 + i for i in range(3)]
    assert [p.data for p in packets] == [frame(i) for i in range(3)]
    assert reader.issues == []


def test_scapy_gzip_writer(tmp_path):
    path = write_pcap(tmp_path / "z.pcap.gz", [(T0, 7, frame(7))], gz=True)
    packets, issues = read(path)
    assert [(p.ts, p.data) for p in packets] == [(T0 * 1_000_000 + 7, frame(7))]
    assert issues == []


# --- pcapng ---


def test_scapy_pcapng(tmp_path):
    path = tmp_path / "s.pcapng"
    writer = PcapNgWriter(str(path))
    for i, frac in enumerate([0.25, 0.5, 0.75]):
        pkt = Ether(bytes(frame(i)))
        pkt.time = T0 + frac
        writer.write(pkt)
    writer.close()
    reader = open_capture(path)
    packets = list(reader)
    assert reader.format == "pcapng"
    assert [p.ts for p in packets] == [T0 * 1_000_000 + us for us in (250_000, 500_000, 750_000)]
    assert [p.data for p in packets] == [frame(i) for i in range(3)]
    assert reader.issues == []


def test_pcapng_interfaces_resolutions_and_skipped_blocks(tmp_path):
    nrb = block("<", 4, option("<", 1, b"\x0a\0\0\x01name\0") + b"\0\0\0\0")
    isb = block("<", 5, struct.pack("<III", 0, 0, 0))
    dsb = block("<", 10, struct.pack("<II", 0x544C534B, 4) + b"abcd")
    custom = block("<", 0x00000BAD, struct.pack("<I", 32473) + b"whatever")
    path = write(
        tmp_path / "multi.pcapng",
        shb("<"),
        idb("<", 1),  # default: microseconds
        nrb,
        idb("<", 101, tsresol=9),  # nanoseconds
        idb("<", 113, tsresol=0x80 | 20, tsoffset=-3600),  # 2^-20 s, one hour earlier
        idb("<", 276, tsresol=3, tsoffset=T0),  # milliseconds since T0
        epb("<", 0, T0 * 10**6 + 1, b"eth"),
        isb,
        epb("<", 1, T0 * 10**9 + 1_999, b"raw"),
        dsb,
        epb("<", 2, T0 * 2**20 + 2**19 + 1, b"sll"),
        custom,
        epb("<", 3, 1_234, b"sll2"),
    )
    packets, issues = read(path)
    assert issues == []
    assert [(p.number, p.interface, p.linktype, p.data) for p in packets] == [
        (1, 0, 1, b"eth"),
        (2, 1, 101, b"raw"),
        (3, 2, 113, b"sll"),
        (4, 3, 276, b"sll2"),
    ]
    assert [p.ts for p in packets] == [
        T0 * 1_000_000 + 1,
        T0 * 1_000_000 + 1,  # 1999 ns rounds down to 1 us
        (T0 - 3600) * 1_000_000 + 500_000,  # (2^19 + 1) / 2^20 s = 500000.95 us
        T0 * 1_000_000 + 1_234_000,
    ]


def test_pcapng_sections_of_both_byte_orders(tmp_path):
    path = write(
        tmp_path / "sections.pcapng",
        shb("<"),
        idb("<", 1),
        epb("<", 0, 10, b"a", orig_len=100),
        shb(">"),
        idb(">", 101),
        idb(">", 1),
        epb(">", 1, 20, b"bb"),
        epb(">", 0, 30, b"ccc"),
        shb("<"),
        idb("<", 228),
        epb("<", 0, 40, b"d"),
    )
    packets, issues = read(path)
    assert issues == []
    assert [(p.number, p.interface, p.linktype, p.ts, p.data) for p in packets] == [
        (1, 0, 1, 10, b"a"),
        (2, 2, 1, 20, b"bb"),
        (3, 1, 101, 30, b"ccc"),
        (4, 3, 228, 40, b"d"),
    ]
    assert packets[0].orig_len == 100


def test_pcapng_simple_and_obsolete_packet_blocks(tmp_path):
    path = write(
        tmp_path / "spb.pcapng",
        shb(">"),
        idb(">", 1, snaplen=4),
        idb(">", 101),
        spb(">", b"ab", orig_len=2),  # before any timestamp: 0
        opb(">", 1, 777, b"opb!"),
        spb(">", b"abcdefgh", orig_len=1500),  # cut to interface 0's snaplen (4)
    )
    packets, issues = read(path)
    assert issues == []
    assert [(p.ts, p.linktype, p.interface, p.data, p.orig_len) for p in packets] == [
        (0, 1, 0, b"ab", 2),
        (777, 101, 1, b"opb!", 4),
        (777, 1, 0, b"abcd", 1500),  # no timestamp of its own: the previous packet's
    ]


# --- damaged files ---


def pcap_bytes(tmp_path: Path, count: int) -> bytes:
    records = [(T0, i, frame(i, 20 + i)) for i in range(count)]
    return write_pcap(tmp_path / "whole.pcap", records).read_bytes()


def test_truncated_pcap_every_cut_in_last_records(tmp_path):
    whole = pcap_bytes(tmp_path, 4)
    sizes = [16 + len(frame(i, 20 + i)) for i in range(4)]
    starts = [24 + sum(sizes[:i]) for i in range(4)]
    for cut in range(starts[2], len(whole)):
        packets, issues = read(write(tmp_path / "cut.pcap", whole[:cut]))
        complete = 3 if cut >= starts[3] else 2
        assert [p.data for p in packets] == [frame(i, 20 + i) for i in range(complete)]
        if cut == starts[complete]:
            assert issues == []  # cut between two records: a clean end
        else:
            assert len(issues) == 1
            assert issues[0].code == "capture.truncated"
            assert issues[0].packet == complete
            assert issues[0].offset == starts[complete]


def test_truncated_pcapng_every_cut_in_last_block(tmp_path):
    blocks = [shb(), idb("<", 1)] + [epb("<", 0, i, frame(i, 30 + i)) for i in range(3)]
    whole = b"".join(blocks)
    last = len(whole) - len(blocks[-1])
    for cut in range(last + 1, len(whole)):
        packets, issues = read(write(tmp_path / "cut.pcapng", whole[:cut]))
        assert len(packets) == 2
        assert [(i.code, i.packet, i.offset) for i in issues] == [("capture.truncated", 2, last)]


def test_truncated_gzip_stream(tmp_path):
    compressed = gzip.compress(pcap_bytes(tmp_path, 200))
    path = write(tmp_path / "cut.pcap.gz", compressed[: len(compressed) * 2 // 3])
    packets, issues = read(path)
    assert 0 < len(packets) < 200
    assert [p.data for p in packets] == [frame(i, 20 + i) for i in range(len(packets))]
    assert [(i.code, i.packet) for i in issues] == [("capture.truncated", len(packets))]


def test_pcap_impossible_record_length(tmp_path):
    whole = pcap_bytes(tmp_path, 2)
    bad = struct.pack("<IIII", T0, 0, 0xFFFF_FFF0, 60) + b"x" * 100
    packets, issues = read(write(tmp_path / "bad.pcap", whole, bad))
    assert len(packets) == 2
    assert [(i.code, i.packet, i.offset) for i in issues] == [
        ("capture.corrupt_record", 2, len(whole))
    ]
    assert "4294967280" in issues[0].detail


@pytest.mark.parametrize(
    "damage",
    [
        block("<", 6, b"\0" * 20)[:-4] + struct.pack("<I", 36),  # trailing length differs
        struct.pack("<II", 6, 33) + b"\0" * 25,  # length not a multiple of 4
        struct.pack("<II", 6, 8),  # shorter than a block header
        epb("<", 5, 0, b"x"),  # interface never declared
        block("<", 6, struct.pack("<IIIII", 0, 0, 0, 99, 99) + b"x" * 8),  # data beyond block
        block("<", 0x0A0D0D0A, b"\x11\x22\x33\x44" + b"\0" * 12),  # bad byte-order magic
        block("<", 0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 2, 0, -1)),  # version 2
    ],
)
def test_pcapng_corrupt_blocks(tmp_path, damage):
    good = shb() + idb("<", 1) + epb("<", 0, 1, b"one")
    packets, issues = read(write(tmp_path / "bad.pcapng", good, damage, epb("<", 0, 2, b"two")))
    assert [p.data for p in packets] == [b"one"]
    assert [(i.code, i.packet, i.offset) for i in issues] == [
        ("capture.corrupt_record", 1, len(good))
    ]


def test_records_spanning_read_chunks(tmp_path, monkeypatch):
    pcap_path = write(tmp_path / "p.pcap", pcap_bytes(tmp_path, 30))
    blocks = [shb(), idb("<", 1, tsresol=9)] + [epb("<", 0, i, frame(i, i)) for i in range(30)]
    ng_path = write(tmp_path / "p.pcapng", *blocks)
    expected = [read(pcap_path), read(ng_path)]
    for chunk in (1, 3, 7, 100):
        monkeypatch.setattr(source, "CHUNK_SIZE", chunk)
        assert [read(pcap_path), read(ng_path)] == expected
    assert len(expected[0][0]) == len(expected[1][0]) == 30


class CountingStream(io.BytesIO):
    """A stream that counts its reads."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads = 0

    def read1(self, size: int | None = -1, /) -> bytes:
        self.reads += 1
        return super().read1(size)


def test_a_record_cut_by_a_chunk_costs_no_read_of_its_own(tmp_path, monkeypatch):
    """One read per chunk (a ranged request on a remote file), records cut by a chunk's end
    included: the packets are those of a whole-file read."""
    data = pcap_bytes(tmp_path, 30)
    whole = read(tmp_path / "whole.pcap")
    monkeypatch.setattr(source, "CHUNK_SIZE", 100)  # records of 52 to 81 bytes: many cut
    stream = CountingStream(data)
    window = source.ByteWindow(stream)
    window.fill(pcap.HEADER_SIZE)
    header = pcap.parse_header(window.buf[: pcap.HEADER_SIZE])
    window.pos = pcap.HEADER_SIZE
    issues: list[CaptureIssue] = []
    assert (list(pcap.packets(window, header, issues)), issues) == whole
    assert stream.reads == -(-len(data) // 100) + 1  # and the one that finds the end


# --- unusable files ---


def error_of(path: Path) -> str:
    with pytest.raises(InputError) as info:
        open_capture(path)
    return str(info.value)


def test_missing_file(tmp_path):
    assert error_of(tmp_path / "nope.pcap") == f"{tmp_path / 'nope.pcap'}: no such file"


def test_directory(tmp_path):
    assert "is a directory" in error_of(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"<html><body>", "not a pcap or pcapng file (starts with 3c 68 74 6d)"),
        (b"", "empty file"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "pcap file header cut short (6 of 24 bytes)"),
        (b"\x28\xb5\x2f\xfd\0\0", "not a pcap or pcapng file but a zstd-compressed file"),
        (b"\x0a\x0d\x0d\x0a\x1c\0\0\0\x11\x22\x33\x44\1\0\0\0", "pcapng byte-order magic"),
        (gzip.compress(b"<html>"), "(starts with 3c 68 74 6d) after decompression"),
        (gzip.compress(b""), "empty file after decompression"),
        (b"\x1f\x8b\x08\0garbage", "cannot read its start"),
    ],
)
def test_not_a_capture(tmp_path, content, message):
    path = write(tmp_path / "capture.pcap", content)
    text = error_of(path)
    assert text.startswith(f"{path}: ")
    assert message in text
    assert "\n" not in text


def test_close_and_context_manager(tmp_path):
    path = write_pcap(tmp_path / "c.pcap", [(T0, 0, frame(0))])
    with open_capture(path) as reader:
        pass
    with pytest.raises(UsageError, match="used after close"):
        list(reader)
    reader = open_capture(path)
    assert len(list(reader)) == 1
    assert list(reader) == []  # single pass
    reader.close()
    reader.close()


def test_close_mid_iteration(tmp_path):
    path = write_pcap(tmp_path / "c.pcap", [(T0, i, frame(i)) for i in range(5)])
    reader = open_capture(path)
    seen = []
    for pkt in reader:
        seen.append(pkt.number)
        if pkt.number == 2:
            reader.close()
    assert seen == [1, 2]


# --- fuzz: any bytes give packets and issues, or InputError, nothing else ---


def consume(path: Path) -> None:
    try:
        reader = open_capture(path)
    except InputError:
        return
    for pkt in reader:
        assert isinstance(pkt, RawPacket)
    ending = [i for i in reader.issues if i.code != "capture.bad_timestamp"]
    assert len(ending) <= 1  # at most one issue ends the reading; corrected timestamps go on
    assert all(i.code in ("capture.truncated", "capture.corrupt_record") for i in ending)


PCAP_HEAD = bytes.fromhex("d4c3b2a1") + struct.pack("<HHiIII", 2, 4, 0, 0, 65535, 1)
NG_HEAD = shb() + idb("<", 1)
SAMPLE_NG = NG_HEAD + epb("<", 0, 5, b"abcdef") + spb("<", b"xyz") + idb("<", 113, tsresol=0x85)


@given(
    prefix=st.sampled_from([b"", PCAP_HEAD, NG_HEAD, b"\x0a\x0d\x0d\x0a"]),
    body=st.binary(max_size=300),
    compress=st.booleans(),
)
def test_fuzz_random_files(tmp_path_factory, prefix, body, compress):
    data = prefix + body
    path = tmp_path_factory.mktemp("fuzz") / "f"
    path.write_bytes(gzip.compress(data) if compress else data)
    consume(path)


@given(st.lists(st.tuples(st.integers(0, len(SAMPLE_NG) - 1), st.integers(0, 255)), max_size=8))
def test_fuzz_mutated_pcapng(tmp_path_factory, edits):
    data = bytearray(SAMPLE_NG)
    for at, value in edits:
        data[at] = value
    path = tmp_path_factory.mktemp("fuzz") / "f.pcapng"
    path.write_bytes(bytes(data))
    consume(path)


# --- timestamps no date can hold (fuzzing finding: one crashed jsonl, summary, pandas) ---

YEAR_9999_END_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z, by hand


@pytest.mark.parametrize(
    ("tsoffset", "raw", "why"),
    [
        (None, 0x7FFFFFFF00000000, "after 9999"),
        (None, YEAR_9999_END_US + 1, "one microsecond after 9999"),
        (-2_000_000_000, 1_000_000, "before 1970 (if_tsoffset)"),
    ],
)
def test_pcapng_timestamp_no_date_holds_is_replaced_and_reported(tmp_path, tsoffset, raw, why):
    good = T0 * 1_000_000
    path = write(
        tmp_path / "t.pcapng",
        shb(),
        idb("<", 1),
        idb("<", 1, tsoffset=tsoffset),
        epb("<", 0, good, frame(1)),
        epb("<", 1, raw, frame(2)),
        epb("<", 0, good + 5, frame(3)),
    )
    packets, issues = read(path)
    assert [p.ts for p in packets] == [good, good, good + 5], why  # the previous time kept
    assert [(i.code, i.packet) for i in issues] == [("capture.bad_timestamp", 2)], why


def test_pcapng_last_representable_microsecond_is_kept(tmp_path):
    path = write(tmp_path / "t.pcapng", shb(), idb("<", 1), epb("<", 0, YEAR_9999_END_US, frame(1)))
    packets, issues = read(path)
    assert [p.ts for p in packets] == [YEAR_9999_END_US] and issues == []
