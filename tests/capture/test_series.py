"""Rotated capture files: grouped into series and read as one capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissector.capture.series import group
from dissector.errors import UsageError
from dissector.read import ReaderOptions, read_tables
from tests.support.samples import split_pcap

PCAP = Path(__file__).resolve().parents[2] / "pcaps" / "produce_consume.pcap"


def test_tcpdump_size_rotation_names() -> None:
    paths = ["d/cap.pcap2", "d/cap.pcap", "d/other.pcap", "d/cap.pcap10", "d/cap.pcap1"]
    assert group(paths) == [
        ["d/cap.pcap", "d/cap.pcap1", "d/cap.pcap2", "d/cap.pcap10"],
        ["d/other.pcap"],
    ]


def test_digit_mode_groups_time_rotation_and_auto_does_not() -> None:
    paths = ["b-0959.pcap", "b-1001.pcap", "b-1000.pcap", "broker1.pcap", "broker2.pcap"]
    assert group(paths) == [[p] for p in ["b-0959.pcap", "b-1000.pcap", "b-1001.pcap",
                                          "broker1.pcap", "broker2.pcap"]]  # fmt: skip
    assert group(paths, "digits") == [
        ["b-0959.pcap", "b-1000.pcap", "b-1001.pcap"],
        ["broker1.pcap", "broker2.pcap"],
    ]
    assert group(["cap.pcap", "cap.pcap1"], "none") == [["cap.pcap"], ["cap.pcap1"]]
    with pytest.raises(UsageError):
        group(paths, "sometimes")


def test_rotated_files_give_the_same_conversation_as_the_whole(tmp_path: Path) -> None:
    parts = [tmp_path / "cap.pcap", tmp_path / "cap.pcap1", tmp_path / "cap.pcap2"]
    split_pcap(PCAP, parts, [30, 61])
    whole = read_tables(PCAP)
    rotated = read_tables(list(reversed(parts)))
    for name in ("frames", "messages", "timeline", "entities"):
        assert rotated[name].equals(whole[name]), name
    cw = whole["conversations"].drop_columns(["capture"])
    cr = rotated["conversations"].drop_columns(["capture"])
    assert cr.equals(cw)
    assert rotated["conversations"]["capture"].to_pylist() == [str(parts[0])]
    port = whole["conversations"]["broker_port"][0].as_py()
    separate = read_tables(parts, ReaderOptions.make([port], series="none"))
    assert separate["conversations"].num_rows == 3  # each file alone: three pieces
    assert separate["anomalies"].num_rows > 0  # the later pieces start mid-stream
