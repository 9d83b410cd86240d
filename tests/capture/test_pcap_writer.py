"""dissector.capture.pcap_writer: the one pcap writer of `read -w` and `live -w`.

Expected values: the header and record bytes written out by hand from the pcap format
(tcpdump's default: little-endian, microseconds, version 2.4), and scapy's reader, which
does not share our reader's code.
"""

from __future__ import annotations

import io
from pathlib import Path

from scapy.utils import RawPcapReader

from dissector.capture import open_capture
from dissector.capture.pcap_writer import write_header, write_packet
from dissector.frontends.live.files import PcapFiles

TS = 1_700_000_000_123_456  # µs: 1700000000 s = 0x6553F100, 123456 µs = 0x0001E240


def test_header_and_record_bytes() -> None:
    out = io.BytesIO()
    assert write_header(out.write, 101) == 24
    assert write_packet(out.write, TS, b"\x01\x02\x03", 60) == 19
    assert out.getvalue() == bytes.fromhex(
        "d4c3b2a1" "0200" "0400" "00000000" "00000000" "00000400" "65000000"  # header
        "00f15365" "40e20100" "03000000" "3c000000" "010203"  # record: s, µs, 3 of 60 bytes
    )  # fmt: skip


def test_what_is_written_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    with open(path, "wb") as f:
        write_header(f.write, 1)
        write_packet(f.write, TS, b"a" * 70, 70)
        write_packet(f.write, TS + 1_000_001, b"b" * 64, 1500)  # cut short: 1500 on the wire
    with open_capture(path) as reader:
        packets = list(reader)
    assert [(p.ts, p.data, p.orig_len, p.linktype) for p in packets] == [
        (TS, b"a" * 70, 70, 1),
        (TS + 1_000_001, b"b" * 64, 1500, 1),
    ]
    scapy = RawPcapReader(str(path))
    assert scapy.linktype == 1 and scapy.snaplen == 262144
    assert [len(data) for data, _ in scapy] == [70, 64]


def test_live_files_write_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "live.pcap"
    files = PcapFiles(str(path), 101, start=0)
    files.write(TS, b"\x01\x02\x03", 60)
    files.close()
    out = io.BytesIO()
    write_header(out.write, 101)
    write_packet(out.write, TS, b"\x01\x02\x03", 60)
    assert path.read_bytes() == out.getvalue()
