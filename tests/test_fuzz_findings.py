"""Regression tests for the fuzzing campaign's findings (crashes where data leaves the core).

Each test crafts its own reproducer from the finding's description; the expected values
come from what was crafted (the bytes put in, the times written), never from our output.
Every output of a damaged capture must finish with exit 0, report the damage as anomaly
rows, and never show a traceback.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from dissector.events import Direction
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import BaseCommand, MessageMetadata
from dissector.reader import read_capture
from tests.support.cli import cli
from tests.support.crafted import (
    B2C,
    C2B,
    Msg,
    Session,
    baseline_msgs,
    msg,
    ts_of,
    write_pcap,
    write_pcapng,
)

YEAR_9999_END_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z, by hand


def every_output_works(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Run the text view, summary and every table as jsonl; all must succeed. Returns the
    jsonl rows by table."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for args in (
        ["read", str(path)],
        ["summary", str(path)],
        ["summary", str(path), "--format", "json"],
    ):
        res = cli(*args)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr)
    for table in ("frames", "messages", "anomalies", "conversations", "timeline", "entities"):
        res = cli("read", str(path), "--table", table, "--format", "jsonl")
        assert res.returncode == 0 and "Traceback" not in res.stderr, (table, res.stderr)
        rows[table] = [json.loads(line) for line in res.stdout.splitlines()]
    return rows


# --------------------------------------------------------------------------- 3. timestamps


@pytest.mark.parametrize(
    ("ts", "reported"),
    [(0x7FFFFFFF00000000, True), (YEAR_9999_END_US + 1, True), (YEAR_9999_END_US, False)],
)
def test_timestamps_no_date_holds_are_data_not_crashes(
    tmp_path: Path, ts: int, reported: bool
) -> None:
    s = Session()
    s.handshake()
    s.exchange(baseline_msgs()[:2])  # CONNECT, CONNECTED: packets 4 and 5
    s.close()
    segs = [dataclasses.replace(g, ts_us=ts) if i == 3 else g for i, g in enumerate(s.segs)]
    path = write_pcapng(tmp_path / "t.pcapng", segs, links=("ether",))
    rows = every_output_works(path)
    codes = [a["code"] for a in rows["anomalies"]]
    assert codes == (["capture.bad_timestamp"] if reported else []), codes
    connect = rows["frames"][0]
    assert connect["command"] == "CONNECT"
    when = dt.datetime.fromisoformat(str(connect["ts"]))
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    assert when == (dt.datetime.fromtimestamp(ts_of(3) / 1e6, dt.UTC) if reported else last)
    frames = read_capture(path).frames
    assert len(frames) == 2 and frames.ts.notna().all()


# ------------------------------------------------- 2. payload command without its body


@pytest.mark.parametrize("name", ["SEND", "MESSAGE"])
def test_payload_command_without_its_sub_message(tmp_path: Path, name: str) -> None:
    """BaseCommand says SEND (or MESSAGE) but carries no CommandSend; metadata and payload
    follow as usual. The frame is a row with what it has, the fault an anomaly row."""
    meta = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    bodyless = BaseCommand(type=getattr(BaseCommand, name))
    frame = encode_frame(bodyless, metadata=meta, payload=b"payload", checksum=False)
    direction = C2B if name == "SEND" else B2C
    s = Session()
    s.handshake()
    s.exchange(baseline_msgs()[:2] + [Msg(direction, name, frame)])
    s.close()
    rows = every_output_works(write_pcap(tmp_path / "t.pcap", s.segs).path)
    last = rows["frames"][-1]
    assert (last["command"], last["payload_size"], last["num_messages"]) == (name, 7, 1)
    assert last["producer_id"] is None and last["consumer_id"] is None
    (anomaly,) = rows["anomalies"]
    assert anomaly["code"] == "pulsar.command_missing_body"
    assert anomaly["stream_offset"] == last["stream_offset"]


# ------------------------------------------------------------ 1. strings that are not UTF-8

BAD = b"\xc3\x28"  # a two-byte sequence cut short: not UTF-8
TEXT = BAD.decode("utf-8", "replace")  # Python's own replacement, the expected text


def spoiled(message: Any) -> bytes:
    """The message serialized with every `QQ` inside its strings turned into BAD."""
    raw: bytes = message.SerializeToString()
    assert b"QQ" in raw
    return raw.replace(b"QQ", BAD)


def bad(direction: Direction, name: str, **fields: Any) -> Msg:
    return Msg(direction, name, encode_frame(spoiled(command(name, **fields))))


def test_strings_that_are_not_utf8_become_text_and_anomalies(tmp_path: Path) -> None:
    bad_meta = MessageMetadata(producer_name="pQQ", sequence_id=0, publish_time=1)
    bad_meta.properties.add(key="kQQ", value="vQQ")
    send = command("SEND", producer_id=1, sequence_id=0)
    msgs = [
        bad(C2B, "CONNECT", client_version="cQQ", protocol_version=21),
        bad(B2C, "CONNECTED", server_version="sQQ", protocol_version=21),
        bad(C2B, "LOOKUP", topic="tQQ-lookup", request_id=1),
        msg(C2B, "PRODUCER", topic="good-topic", producer_id=1, request_id=2),
        bad(C2B, "PRODUCER", topic="tQQ-prod", producer_id=2, request_id=3),
        bad(B2C, "ERROR", request_id=3, error=1, message="mQQ"),
        bad(
            C2B,
            "SUBSCRIBE",
            topic="tQQ-sub",
            subscription="subQQ",
            subType=0,
            consumer_id=1,
            request_id=4,
        ),
        Msg(C2B, "SEND", encode_frame(send, metadata=spoiled(bad_meta), payload=b"x")),
    ]
    s = Session()
    s.handshake()
    s.exchange(msgs)
    s.close()
    path = write_pcap(tmp_path / "t.pcap", s.segs).path
    rows = every_output_works(path)
    for args in (["--format", "jsonl"], []):  # the raw-stream decoder too
        stream = tmp_path / "c2b.bin"
        stream.write_bytes(b"".join(m.data for m in msgs if m.direction is C2B))
        res = cli("stream", str(stream), *args)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
        assert "invalid_utf8" in res.stdout
    (conv,) = rows["conversations"]
    assert (conv["client_version"], conv["server_version"]) == (f"c{TEXT}", f"s{TEXT}")
    topics = {f["command"] + ":" + str(f["topic"]) for f in rows["frames"] if f["topic"]}
    assert {f"LOOKUP:t{TEXT}-lookup", f"PRODUCER:t{TEXT}-prod", f"SUBSCRIBE:t{TEXT}-sub"} <= topics
    assert "PRODUCER:good-topic" in topics  # one topic str, others repaired: they sort together
    (error,) = [p for p in rows["timeline"] if p["outcome"] == "error"]
    assert error["error_message"] == f"m{TEXT}"
    (message,) = rows["messages"]
    assert message["producer_name"] == f"p{TEXT}"
    assert message["properties"] == {f"k{TEXT}": f"v{TEXT}"}
    named = [a["detail"] for a in rows["anomalies"] if a["code"] == "pulsar.invalid_utf8"]
    assert len(named) == 7  # one per frame with a bad string: all but the good PRODUCER
    for field in ("client_version", "server_version", "LOOKUP.topic", "message", "subscription",
                  "metadata.producer_name", "metadata.properties[0].value"):  # fmt: skip
        assert any(field in d for d in named), (field, named)


# ------------------------------------------------ 7. a chunked message whose chunk 0 is refused


def test_chunked_message_whose_first_chunk_is_refused_still_has_its_row(tmp_path: Path) -> None:
    """Chunk 0 claims a whole message far over the bound (2**31 - 1 bytes): the message gets
    one incomplete row saying why, and its later chunks are not reported as orphans."""
    sends = []
    for i in range(3):
        meta = MessageMetadata(
            producer_name="p",
            sequence_id=0,
            publish_time=1,
            uuid="u-7",
            num_chunks_from_msg=3,
            total_chunk_msg_size=(1 << 31) - 1,
            chunk_id=i,
        )
        sends.append(
            msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=b"c" * 10, metadata=meta)
        )
    s = Session()
    s.handshake()
    s.exchange(baseline_msgs()[:4] + sends)
    s.close()
    rows = every_output_works(write_pcap(tmp_path / "t.pcap", s.segs).path)
    (message,) = rows["messages"]
    assert (message["chunked"], message["complete"]) == (True, False)
    assert message["problem"] == "payload.chunk_size_mismatch"
    assert [a["code"] for a in rows["anomalies"]] == ["payload.chunk_size_mismatch"]
