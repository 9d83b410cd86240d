"""Regression tests for the fuzzing campaigns' findings (crashes where data leaves the core,
bytes counted on the wrong side, costs out of proportion; fuzz/ and issue 14).

Each test crafts its own reproducer from the finding's description; the expected values
come from what was crafted (the bytes put in, the times written), never from our output.
Every output of a damaged capture must finish with exit 0, report the damage as anomaly
rows, and never show a traceback.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import tracemalloc
from pathlib import Path
from typing import Any

import cramjam
import pytest

from dissector.events import Direction
from dissector.pulsar.decompression import DEFAULT_MAX_UNCOMPRESSED, decompress
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import (
    COMPRESSION_TYPES,
    BaseCommand,
    BrokerEntryMetadata,
    MessageMetadata,
)
from dissector.read import read_capture, read_tables
from tests.support.cli import cli
from tests.support.crafted import (
    B2C,
    C2B,
    Conn,
    Msg,
    Seg,
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


@pytest.mark.slow  # every output of the CLI: 9 processes (~7 s)
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


@pytest.mark.slow  # every output of the CLI: 9 processes (~7 s)
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


@pytest.mark.slow  # every output of the CLI: 9 processes (~7 s)
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


@pytest.mark.slow  # every output of the CLI: 9 processes (~7 s)
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


# ------------------------------------------- 9. metadata times after 9999 (fuzz campaign)

LAST_MS_OF_9999 = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, by hand


@pytest.mark.slow  # every output of the CLI: 9 processes (~7 s)
@pytest.mark.parametrize(
    ("ms", "shown"),
    [(LAST_MS_OF_9999 + 1, False), ((1 << 63) // 1000 - 1, False), (LAST_MS_OF_9999, True)],
)
def test_metadata_times_no_date_holds_are_null_not_crashes(
    tmp_path: Path, ms: int, shown: bool
) -> None:
    """publish_time, event_time (MessageMetadata) and the broker entry timestamp are
    milliseconds in uint64: values past year 9999 made Arrow timestamps that no output could
    show (`OverflowError: date value out of range` in jsonl, the text view of tables)."""
    meta = MessageMetadata(producer_name="p", sequence_id=0, publish_time=ms, event_time=ms)
    entry = BrokerEntryMetadata(broker_timestamp=ms, index=3)
    cmd = command("MESSAGE", consumer_id=1, message_id={"ledgerId": 1, "entryId": 2})
    frame = encode_frame(cmd, metadata=meta, payload=b"x", broker_entry=entry, checksum=False)
    s = Session()
    s.handshake()
    s.exchange(baseline_msgs()[:2] + [Msg(B2C, "MESSAGE", frame)])
    s.close()
    rows = every_output_works(write_pcap(tmp_path / "t.pcap", s.segs).path)
    (message,) = rows["messages"]
    last = rows["frames"][-1]
    expected = "9999-12-31T23:59:59.999000+00:00" if shown else None
    got = (message["publish_time"], message["event_time"], message["broker_entry_timestamp"])
    assert [None if v is None else dt.datetime.fromisoformat(v).isoformat() for v in got] == [
        expected
    ] * 3
    entry_ts = last["broker_entry_timestamp"]
    assert (
        None if entry_ts is None else dt.datetime.fromisoformat(entry_ts).isoformat()
    ) == expected
    assert message["broker_entry_index"] == 3


# ------------------------ 10. LZ4/ZSTD payloads without uncompressed_size (fuzz campaign)


def _compressed(codec: str, plain: bytes) -> bytes:
    if codec == "LZ4":
        return bytes(cramjam.lz4.compress_block(plain, store_size=False))
    return bytes(cramjam.zstd.compress(plain))


@pytest.mark.parametrize("codec", ["LZ4", "ZSTD"])
@pytest.mark.parametrize("size", [33, 3 << 20])
def test_payload_without_uncompressed_size_costs_its_size_not_the_bound(
    codec: str, size: int
) -> None:
    """Metadata without uncompressed_size: the payload was decompressed into a zeroed buffer
    of the whole bound (5 MiB) for every message, so a 60-byte frame cost 0.15 ms, 6 to 7
    times the time per byte of other frames. Memory now follows the output's own size."""
    plain = (b"hello world, " * (size // 13 + 1))[:size]
    data = _compressed(codec, plain)
    tracemalloc.start()
    out, problems = decompress(COMPRESSION_TYPES[codec], data, None, DEFAULT_MAX_UNCOMPRESSED)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert (out, problems) == (plain, [])
    assert peak < 4 * size + (1 << 20), peak


@pytest.mark.parametrize("codec", ["LZ4", "ZSTD"])
def test_payload_without_uncompressed_size_above_the_bound_is_still_a_bomb(codec: str) -> None:
    limit = 1 << 20
    out, problems = decompress(
        COMPRESSION_TYPES[codec], _compressed(codec, bytes(limit + 1)), None, limit
    )
    assert out is None
    assert [code for code, _ in problems] == ["payload.decompression_bomb"]


# ------------------------------- 11. roles swapped while a batch of stream events is routed


def test_roles_swapped_mid_batch_keep_each_byte_on_its_side(tmp_path: Path) -> None:
    """A capture that starts mid-connection on a port we do not know, the broker's packet
    first (merged captures reorder): the broker is taken for the client until the real
    client's CONNECT. When CONNECT arrives after a later client segment was held out of order,
    TCP delivers both at once; the second was routed with the old roles, so PRODUCER went to
    the broker's side: 'stream bytes' beyond the wire there, a frame missing here."""
    conn = Conn(broker_port=16650)
    connect, connected, producer, success = baseline_msgs()[:4]
    s = Session(conn)
    s.send(B2C, connected.data)  # the first packet: its sender is taken for the client
    s.ack(C2B)  # the client's next sequence number is known: offset 0
    s.send(C2B, producer.data, at=len(connect.data))  # before CONNECT: held out of order
    s.send(C2B, connect.data, at=0)  # CONNECT, then PRODUCER from the buffer, in one batch
    s.send(B2C, success.data)
    s.close()
    tables = read_tables(write_pcap(tmp_path / "t.pcap", s.segs).path)
    (c,) = tables["conversations"].to_pylist()
    assert (c["client_port"], c["broker_port"]) == (40000, 16650)
    c2b = len(connect.data) + len(producer.data)
    b2c = len(connected.data) + len(success.data)
    assert (c["stream_bytes_c2b"], c["frame_bytes_c2b"], c["frames_c2b"]) == (c2b, c2b, 2)
    assert (c["stream_bytes_b2c"], c["frame_bytes_b2c"], c["frames_b2c"]) == (b2c, b2c, 2)
    assert (c["bytes_c2b"], c["bytes_b2c"]) == (c2b, b2c)
    frames = tables["frames"].select(["command", "direction", "stream_offset"]).to_pylist()
    assert [(f["command"], f["direction"], f["stream_offset"]) for f in frames] == [
        ("CONNECTED", "broker_to_client", 0),
        ("CONNECT", "client_to_broker", 0),
        ("PRODUCER", "client_to_broker", len(connect.data)),
        ("PRODUCER_SUCCESS", "broker_to_client", len(connected.data)),
    ]
    assert tables["anomalies"].column("code").to_pylist() == ["tcp.midstream_start"] * 2


# ------------------ 12. roles swapped by what the capture's end or a connection's end releases


def _connect_decided_at_the_end(held_behind_a_hole: bool) -> tuple[Session, Msg, Msg]:
    """Mid-connection on a port we do not know, the broker's packet first (taken for the
    client); the real client's CONNECT is decoded only when the connection ends: held
    behind a one-byte hole by TCP, or cut short (its size claims 100 more bytes) in a stream
    that starts with the client's SYN."""
    conn = Conn(broker_port=16650)
    connect, connected = baseline_msgs()[:2]
    s = Session(conn)
    s.send(B2C, connected.data)
    if held_behind_a_hole:
        s.ack(C2B)
        s.send(C2B, connect.data, at=1)
    else:
        s.segs.append(Seg(conn, C2B, conn.client_isn, 0, "S"))  # the client's SYN
        claim = len(connect.data) - 4 + 100
        s.send(C2B, claim.to_bytes(4, "big") + connect.data[4:])
    return s, connect, connected


@pytest.mark.parametrize("held_behind_a_hole", [True, False])
def test_roles_swapped_when_the_connection_ends(tmp_path: Path, held_behind_a_hole: bool) -> None:
    """Fuzzing (atheris, capture target): the swap asked TCP for a connection it had just
    closed: `KeyError` in `Reassembler.swap_roles`, the whole read lost. TCP is no longer
    asked (it keys a connection once): the pipeline swaps what it says of the connection,
    and the closing counts follow."""
    s, connect, connected = _connect_decided_at_the_end(held_behind_a_hole)
    tables = read_tables(write_pcap(tmp_path / "t.pcap", s.segs).path)
    (c,) = tables["conversations"].to_pylist()
    hole = 1 if held_behind_a_hole else 0
    assert (c["client_port"], c["broker_port"]) == (40000, 16650)
    assert (c["packets_c2b"], c["bytes_c2b"]) == (2, len(connect.data))
    assert (c["stream_bytes_c2b"], c["gap_bytes_c2b"]) == (len(connect.data) + hole, hole)
    assert (c["packets_b2c"], c["bytes_b2c"]) == (1, len(connected.data))
    assert (c["stream_bytes_b2c"], c["frame_bytes_b2c"]) == (len(connected.data),) * 2
    frames = tables["frames"].select(["command", "direction", "stream_offset", "complete"])
    assert frames.to_pylist() == [
        {"command": "CONNECTED", "direction": "broker_to_client", "stream_offset": 0,
         "complete": True},
        {"command": "CONNECT", "direction": "client_to_broker", "stream_offset": hole,
         "complete": held_behind_a_hole},
    ]  # fmt: skip


def test_data_after_a_reset_that_swapped_the_roles_is_the_clients(tmp_path: Path) -> None:
    """The roles swapped by what a reset releases (the client's CONNECT, held behind a hole
    until the RST ends the connection), then the client sends again: TCP reports data after
    the close on the client's side, as every other record of the connection says it. (When
    TCP itself was swapped, a swap at the end found it closed: this record kept the old
    roles, broker_to_client.)"""
    s, _, _ = _connect_decided_at_the_end(held_behind_a_hole=True)
    s.send(C2B, b"", flags="R")  # the client resets: the hole becomes a gap, CONNECT is read
    s.send(C2B, b"late")  # beyond every byte seen: data after the close
    tables = read_tables(write_pcap(tmp_path / "t.pcap", s.segs).path)
    (c,) = tables["conversations"].to_pylist()
    assert (c["client_port"], c["broker_port"], c["ended"]) == (40000, 16650, "rst")
    late = [a for a in tables["anomalies"].to_pylist() if a["code"] == "tcp.data_after_close"]
    assert [(a["direction"], a["detail"]) for a in late] == [("client_to_broker", "4 bytes")]
