"""`pulsar-dissect read` as a user runs it: a subprocess on crafted captures.

Text lines, whole tables in JSON lines / CSV / Parquet, extra ports, secrets, errors, and
several captures in one call. Expected values come from the frames put in the captures.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dissector.tables.schema import SCHEMAS
from tests.support.crafted import (
    B2C,
    C2B,
    TOPIC,
    Conn,
    Placed,
    Session,
    baseline_msgs,
    baseline_session,
    msg,
    ts_of,
    write_pcap,
)

SECRET = b"s3cr3t-t0ken-value"
#: the baseline SEND's payload (tests/support/crafted.py): no output shows it without --values
PAYLOAD = "hello pulsar"
TABLES = ("frames", "anomalies", "conversations")
CLIENT, BROKER = "10.0.0.1:40000", "10.0.0.2:6650"
_FRAME_LINE = re.compile(r"^\s*(\d+)\s+(\d+\.\d{6})\s+(\d+) (\S+) -> (\S+) (\S+)(.*)$")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m dissector.frontends.cli read ARGS`, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "read", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def ok(*args: str) -> str:
    """Run, check success without any stderr, return stdout."""
    res = run(*args)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    return res.stdout


def assert_one_line_error(res: subprocess.CompletedProcess[str], name: str) -> None:
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.endswith("\n") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("pulsar-dissect: ") and name in res.stderr


class Crafted:
    """The capture every test here reads: baseline frames with auth data, then a SEND with
    a wrong checksum; what was put in is kept to compare with."""

    def __init__(self, path: Path) -> None:
        s = Session()
        s.handshake()
        s.exchange(baseline_msgs(auth_data=SECRET))
        self.bad = msg(C2B, "SEND", producer_id=1, sequence_id=9, payload=b"x", checksum=0x1234)
        s.exchange([self.bad])
        s.close()
        self.session = s
        self.path = write_pcap(path, s.segs).path

    @property
    def placed(self) -> list[Placed]:
        return self.session.placed

    def packet_of(self, p: Placed) -> int:
        """Packet number of the segment carrying the frame (one frame per segment)."""
        return next(
            i
            for i, seg in enumerate(self.session.segs, start=1)
            if seg.payload and seg.direction is p.msg.direction and seg.offset == p.offset
        )


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> Crafted:
    return Crafted(tmp_path_factory.mktemp("cli") / "crafted.pcap")


@pytest.fixture(scope="module")
def text(crafted: Crafted) -> str:
    return ok(str(crafted.path))


# --------------------------------------------------------------------------- text


def _field_texts(fields: dict[str, Any]) -> list[str]:
    """`name=value` for the plain scalar fields put in a command (enums, secrets, nested
    messages are rendered otherwise and checked elsewhere)."""
    skip = {"subType", "ack_type", "auth_data"}
    return [
        f"{k}={v}"
        for k, v in fields.items()
        if k not in skip and isinstance(v, int | str) and " " not in str(v)
    ]


def test_text_one_line_per_frame_with_anomalies_inline(crafted: Crafted, text: str) -> None:
    lines = text.splitlines()
    frame_lines = [line for line in lines if not line.lstrip().startswith("!")]
    assert len(frame_lines) == len(crafted.placed)
    t0 = ts_of(1)  # as Wireshark: relative to the capture's first packet
    for line, p in zip(frame_lines, crafted.placed, strict=True):
        match = _FRAME_LINE.match(line)
        assert match, line
        number, rel, conn, src, dst, name, rest = match.groups()
        assert int(number) == crafted.packet_of(p)  # Wireshark's packet number
        assert int(conn) == 1
        assert rel == f"{(ts_of(crafted.packet_of(p)) - t0) / 1e6:.6f}"
        assert (src, dst) == ((CLIENT, BROKER) if p.msg.direction is C2B else (BROKER, CLIENT))
        assert name == p.msg.name
        for piece in _field_texts(dict(p.msg.fields)):
            assert piece in rest, (piece, line)
        if p.msg.payload is not None:
            assert f"payload={len(p.msg.payload)}B checksum={p.msg.checksum}" in rest
    assert f"topic={TOPIC}" in frame_lines[2]

    # The anomaly follows the frame it is about, on a line of its own.
    bad_line = next(i for i, line in enumerate(lines) if "sequence_id=9" in line)
    assert "checksum=invalid" in lines[bad_line]
    anomaly = lines[bad_line + 1]
    assert anomaly.lstrip().startswith("!")
    assert "conn 1: pulsar.bad_checksum (error)" in anomaly
    assert sum(line.lstrip().startswith("!") for line in lines) == 1


def test_secrets_redacted_in_text_unless_asked(crafted: Crafted, text: str) -> None:
    assert SECRET.decode() not in text and SECRET.hex() not in text
    assert PAYLOAD not in text and PAYLOAD.encode().hex() not in text
    assert f"auth_data=<redacted>({len(SECRET)} bytes)" in text.splitlines()[0]
    shown = ok(str(crafted.path), "--show-secrets")
    assert f"auth_data=0x{SECRET.hex()}" in shown.splitlines()[0]


# --------------------------------------------------------------------------- tables


@pytest.fixture(scope="module")
def parquet_tables(crafted: Crafted, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("parquet")
    tables = {}
    for name in TABLES:
        path = out / f"{name}.parquet"
        assert ok(str(crafted.path), "--table", name, "--format", "parquet", "-o", str(path)) == ""
        tables[name] = pq.read_table(path)
    return tables


def test_parquet_tables_keep_the_schema(crafted: Crafted, parquet_tables: dict[str, Any]) -> None:
    for name, table in parquet_tables.items():
        assert table.schema.equals(SCHEMAS[name], check_metadata=True), name
    frames = parquet_tables["frames"].to_pylist()
    assert [f["command"] for f in frames] == [p.msg.name for p in crafted.placed]
    assert [f["stream_offset"] for f in frames] == [p.offset for p in crafted.placed]
    assert [a["code"] for a in parquet_tables["anomalies"].to_pylist()] == ["pulsar.bad_checksum"]
    (conv,) = parquet_tables["conversations"].to_pylist()
    assert (conv["conn_id"], conv["ended"]) == (1, "fin")
    assert conv["frames_c2b"] == sum(p.msg.direction is C2B for p in crafted.placed)
    assert conv["frames_b2c"] == sum(p.msg.direction is B2C for p in crafted.placed)


def test_secrets_absent_from_every_table(parquet_tables: dict[str, Any]) -> None:
    for name, table in parquet_tables.items():
        dump = repr(table.to_pylist())
        assert SECRET.decode() not in dump and SECRET.hex() not in dump, name
        assert PAYLOAD not in dump and PAYLOAD.encode().hex() not in dump


def test_csv_table_to_file(crafted: Crafted, tmp_path: Path) -> None:
    path = tmp_path / "frames.csv"
    assert ok(str(crafted.path), "--table", "frames", "--format", "csv", "-o", str(path)) == ""
    body = path.read_text()
    assert SECRET.decode() not in body and SECRET.hex() not in body
    assert PAYLOAD not in body and PAYLOAD.encode().hex() not in body
    reader = csv.reader(io.StringIO(body))
    header = next(reader)
    assert header == SCHEMAS["frames"].names
    records = list(reader)
    assert len(records) == len(crafted.placed)
    command = header.index("command")
    assert [r[command] for r in records] == [p.msg.name for p in crafted.placed]


def test_jsonl_table_to_stdout(crafted: Crafted) -> None:
    out = ok(str(crafted.path), "--table", "conversations", "--format", "jsonl")
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert list(row) == SCHEMAS["conversations"].names
    assert row["conn_id"] == 1 and row["client_port"] == 40000 and row["broker_port"] == 6650
    assert row["ts"].endswith("+00:00")
    assert SECRET.decode() not in out and SECRET.hex() not in out
    assert PAYLOAD not in out and PAYLOAD.encode().hex() not in out


def test_format_without_table_writes_frames(crafted: Crafted) -> None:
    out = ok(str(crafted.path), "--format", "jsonl")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["command"] for r in rows] == [p.msg.name for p in crafted.placed]


# --------------------------------------------------------------------------- ports


def test_port_option_decodes_an_extra_port_mid_stream(tmp_path: Path) -> None:
    s = Session(Conn(broker_port=7777))
    s.send(C2B, b"\x11" * 23)  # mid-stream: no SYN, no CONNECT
    msgs = baseline_msgs()[2:]
    s.exchange(msgs)
    path = write_pcap(tmp_path / "7777.pcap", s.segs).path
    res = run(str(path))  # not found on the default ports; the port to try is named
    assert res.returncode == 0 and res.stdout == ""
    assert res.stderr.rstrip().endswith(
        "other ports: 7777 (1); if Pulsar listens there, try --port 7777"
    )
    out = ok(str(path), "--port", "7777")
    lines = out.splitlines()
    frame_lines = [line for line in lines if not line.lstrip().startswith("!")]
    assert [_FRAME_LINE.match(line).group(6) for line in frame_lines] == [  # type: ignore[union-attr]
        m.name for m in msgs
    ]
    assert all(":7777" in line for line in frame_lines)
    assert any("tcp.midstream_start" in line for line in lines)
    assert any("pulsar.skipped_bytes" in line for line in lines)


# --------------------------------------------------------------------------- errors


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pcap"
    assert_one_line_error(run(str(missing)), "nope.pcap")


def test_not_a_capture_is_one_line(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("this is not a capture\n" * 10)
    assert_one_line_error(run(str(notes), "--table", "frames", "--format", "csv"), "notes.txt")


def test_truncated_capture_still_succeeds(crafted: Crafted, tmp_path: Path) -> None:
    data = crafted.path.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-5])  # inside the last record
    out = ok(str(cut))
    lines = out.splitlines()
    assert sum(not line.lstrip().startswith("!") for line in lines) == len(crafted.placed)
    assert any("capture: capture.truncated (error)" in line for line in lines)


# --------------------------------------------------------------------------- several files


def test_two_captures_get_distinct_conn_ids(tmp_path: Path) -> None:
    a = write_pcap(tmp_path / "a.pcap", baseline_session().segs).path
    b = write_pcap(tmp_path / "b.pcap", baseline_session(Conn(client_port=41000)).segs).path
    out = ok(str(a), str(b), "--table", "conversations", "--format", "jsonl")
    rows = [json.loads(line) for line in out.splitlines()]
    second = 2  # small ids, on from one capture to the next (they overlap: merged by time)
    assert [(r["conn_id"], r["capture"], r["client_port"]) for r in rows] == [
        (1, str(a), 40000),
        (second, str(b), 41000),
    ]
    frames = [json.loads(line) for line in ok(str(a), str(b), "--format", "jsonl").splitlines()]
    per_conn = {cid: sum(f["conn_id"] == cid for f in frames) for cid in (1, second)}
    assert per_conn == {1: len(baseline_msgs()), second: len(baseline_msgs())}
