"""The pulsar-dissect command line: output, secrets, and one-line errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from dissector import command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from tests.support.cli import cli


def write_stream(path: Path) -> Path:
    meta = MessageMetadata(producer_name="p-1", sequence_id=7, publish_time=1)
    data = (
        encode_frame(
            command("CONNECT", client_version="c", auth_data=b"hunter2", protocol_version=20)
        )
        + encode_frame(command("SEND", producer_id=1, sequence_id=7), metadata=meta, payload=b"abc")
        + b"\xff\xff\xff\xff junk"
    )
    path.write_bytes(data)
    return path


def test_text_output(tmp_path: Path) -> None:
    f = write_stream(tmp_path / "s.bin")
    res = cli("stream", str(f))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "CONNECT" in lines[0] and "hunter2" not in res.stdout
    assert "auth_data=<redacted>(7 bytes)" in lines[0]
    assert "SEND producer_id=1 sequence_id=7" in lines[1]
    assert "producer=p-1 seq=7 payload=3B checksum=valid" in lines[1]
    assert "! pulsar.frame_too_large" in lines[2]
    assert "pulsar.skipped_bytes" in lines[3]


def test_jsonl_output_and_show_secrets(tmp_path: Path) -> None:
    f = write_stream(tmp_path / "s.bin")
    res = cli("stream", "--format", "jsonl", "--show-secrets", str(f))
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows[0]["command"] == "CONNECT"
    assert rows[0]["fields"]["auth_data"] == b"hunter2".hex()
    assert rows[1]["checksum"] == "valid" and rows[1]["payload_size"] == 3
    assert rows[1]["metadata"]["producer_name"] == "p-1"
    assert {r.get("anomaly") for r in rows[2:]} == {
        "pulsar.frame_too_large",
        "pulsar.skipped_bytes",
    }
    skipped = [r for r in rows if r.get("anomaly") == "pulsar.skipped_bytes"]
    assert skipped[0]["length"] == len(b"\xff\xff\xff\xff junk")


def test_missing_file_is_one_line_without_traceback(tmp_path: Path) -> None:
    res = cli("stream", str(tmp_path / "nope.bin"))
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.strip().count("\n") == 0
    assert "nope.bin" in res.stderr and "Traceback" not in res.stderr


def test_directory_instead_of_file(tmp_path: Path) -> None:
    res = cli("stream", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
