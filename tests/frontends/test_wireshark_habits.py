"""Habits of tshark users: packet numbers and times as Wireshark shows them, -Y filters,
--columns, -c, -t, `fields`, `sql`, reading standard input.

Expected values come from tshark on the same capture (packet numbers, times), from the
client's own record in the sample's manifest (messages sent), or from the predicate
evaluated in Python on the unfiltered rows; never from the feature under test itself.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dissector.capture import open_capture
from dissector.events import Direction
from dissector.tables.schema import TABLES
from tests.support.cli import cli
from tests.support.crafted import (
    LINKTYPES,
    Conn,
    Session,
    baseline_msgs,
    baseline_session,
    link_frame,
    ts_of,
    write_pcap,
    write_pcapng,
)

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
SAMPLE = PCAPS / "produce_consume.pcap"
MANIFEST = json.loads((PCAPS / "produce_consume.manifest.json").read_text())
TSHARK = shutil.which("tshark")


def ok(*args: str) -> str:
    res = cli(*args)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return res.stdout


def one_line_error(*args: str) -> str:
    res = cli(*args)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def frame_lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if not line.lstrip().startswith("!")]


def tshark_packets() -> dict[int, tuple[str, str]]:
    """tshark's packet number -> (time relative to the first packet, epoch time)."""
    if TSHARK is None:
        pytest.skip("tshark is not installed (make testdeps installs it)")
    out = subprocess.run(
        [TSHARK, "-r", str(SAMPLE), "-T", "fields", "-e", "frame.number",
         "-e", "frame.time_relative", "-e", "frame.time_epoch"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = (line.split("\t") for line in out.splitlines())
    return {int(n): (rel, epoch) for n, rel, epoch in rows}


def test_packet_numbers_and_times_are_tsharks() -> None:
    packets = tshark_packets()
    lines = frame_lines(ok("read", str(SAMPLE)))
    assert len(lines) > 50
    for number, rel, conn, *_ in lines:
        assert int(number) in packets
        assert float(rel) == pytest.approx(float(packets[int(number)][0]), abs=1e-6)
        assert conn == "1"  # the sample's one connection


def test_absolute_utc_times_with_t_ud() -> None:
    packets = tshark_packets()
    for number, day, clock, *_ in frame_lines(ok("read", str(SAMPLE), "-t", "ud")):
        epoch = float(packets[int(number)][1])
        expected = dt.datetime.fromtimestamp(epoch, dt.UTC)
        shown = dt.datetime.fromisoformat(f"{day}T{clock}+00:00")
        assert abs((shown - expected).total_seconds()) < 2e-6


def test_filter_on_the_text_view_keeps_the_matching_frames() -> None:
    sent = len(MANIFEST["sent"])  # the client's own record
    lines = frame_lines(ok("read", str(SAMPLE), "-Y", "command == 'SEND' && payload_size > 0"))
    assert [line[6] for line in lines] == ["SEND"] * sent
    two = frame_lines(ok("read", str(SAMPLE), "-Y", "command = 'SEND'", "-c", "2"))
    assert two == lines[:2]


def test_filter_and_columns_on_a_table(tmp_path: Path) -> None:
    everything = tmp_path / "all.csv"
    ok("read", str(SAMPLE), "--table", "timeline", "-o", str(everything))
    with everything.open() as f:
        rows = list(csv.DictReader(f))
    expected = [
        (r["request_command"], r["latency_us"])
        for r in rows
        if r["latency_us"] and int(r["latency_us"]) > 300 and r["request_command"] != "SEND"
    ]
    assert expected, "the sample has slow requests"
    out = ok(
        "read", str(SAMPLE), "--table", "timeline", "--format", "csv",
        "--columns", "request_command,latency_us",
        "-Y", "latency_us > 0.3ms and !(request_command == 'SEND')",
    )  # fmt: skip
    got = list(csv.reader(io.StringIO(out)))
    assert got[0] == ["request_command", "latency_us"]
    assert [tuple(r) for r in got[1:]] == expected


def test_count_limits_the_rows_of_a_table(tmp_path: Path) -> None:
    out = tmp_path / "f.parquet"
    ok("read", str(SAMPLE), "--table", "frames", "-c", "7", "-o", str(out))
    table = pq.read_table(out)
    assert table.num_rows == 7 and table.schema.names == TABLES["frames"].schema.names


def test_mistakes_are_one_line() -> None:
    assert "Referenced column" in one_line_error("read", str(SAMPLE), "-Y", "nope > 1")
    assert "not a column of frames" in one_line_error(
        "read", str(SAMPLE), "--table", "frames", "--columns", "ts,nope"
    )
    assert "not a Pulsar command" in one_line_error("read", str(SAMPLE), "--command", "SENDX")
    assert "no table" in one_line_error("fields", "nope")


def test_fields_lists_every_column_with_its_description(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    ok("read", str(SAMPLE), "-o", f"{folder}/")
    listed = [line.split("\t") for line in ok("fields").splitlines()]
    for name in TABLES:  # what the written files hold, column by column
        columns = pq.read_schema(folder / f"{name}.parquet")
        mine = [(c, t, d) for table, c, t, d in listed if table == name]
        assert [c for c, _, _ in mine] == columns.names
        assert all(d for _, _, d in mine)
        # (Parquet names a map's entries: map<string, string ('properties')>)
        assert [t for _, t, _ in mine] == [re.sub(r" \('\w+'\)", "", str(f.type)) for f in columns]


def test_sql_joins_and_counts() -> None:
    sent = len(MANIFEST["sent"])
    out = ok(
        "sql", str(SAMPLE),
        "SELECT m.direction, count(*) AS n FROM messages m JOIN conversations c "
        "USING (conn_id) GROUP BY 1 ORDER BY 1",
    )  # fmt: skip
    lines = out.splitlines()
    assert lines[0].split() == ["direction", "n"]
    assert lines[2].split() == ["broker_to_client", str(len(MANIFEST["received"]))]
    assert lines[3].split() == ["client_to_broker", str(sent)]
    assert lines[-1] == "(2 rows)"
    assert "names no table" in one_line_error("sql", str(SAMPLE), "SELECT 1")


def test_standard_input_is_read_with_a_dash() -> None:
    expected = ok("read", str(SAMPLE), "-t", "e")
    res = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "read", "-", "-t", "e"],
        input=SAMPLE.read_bytes(), capture_output=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode() == expected


def test_verbose_view_shows_every_decoded_field_as_a_tree() -> None:
    """-V: under each SEND line, its metadata as the client set it (its own record)."""
    text = ok("read", str(SAMPLE), "-V", "--command", "SEND")
    blocks = [b for b in re.split(r"\n(?=\s*\d+\s+\d+\.\d{6} )", text.strip()) if b]
    assert len(blocks) == len(MANIFEST["sent"])
    for block, sent in zip(blocks, MANIFEST["sent"], strict=True):
        tree = [line.strip() for line in block.splitlines()[1:]]
        assert f"producer_name: {sent['producer']}" in tree
        assert f"partition_key: {sent['key']}" in tree
        for key, value in sent["properties"].items():
            at = tree.index(f"key: {key}")
            assert tree[at + 1] == f"value: {value}"
        assert f"payload: {sent['size']} bytes" in tree
        assert any(line.startswith("checksum: valid (carried 0x") for line in tree)


def test_w_exports_the_packets_of_the_chosen_connections(tmp_path: Path) -> None:
    """Three connections interleaved, each its own segments (handshake to FIN): -w with
    --conn, or with a filter only one connection's frames pass, writes exactly that
    connection's packets, in order, byte for byte (what was crafted)."""
    sessions = [baseline_session(Conn(client_port=41000 + k)) for k in range(3)]
    segs = [seg for group in zip(*(s.segs for s in sessions), strict=True) for seg in group]
    written = write_pcap(tmp_path / "three.pcap", segs)
    with open_capture(written.path) as reader:
        packets = [(p.ts, p.data) for p in reader]
    mine = [pkt for pkt, seg in zip(packets, segs, strict=True) if seg.conn.client_port == 41001]
    for args in (["--conn", "2"], ["-Y", "client_port = 41001 AND command = 'SEND'"]):
        out = tmp_path / "out.pcap"
        res = cli("read", str(written.path), "-w", str(out), *args)
        assert res.returncode == 0 and res.stdout == "", res.stderr
        assert res.stderr.startswith(f"pulsar-dissect: {len(mine)} packets of 1 connections")
        with open_capture(out) as reader:
            assert [(p.ts, p.data) for p in reader] == mine
    everything = tmp_path / "all.pcap"
    ok_all = cli("read", str(written.path), "-w", str(everything))
    assert ok_all.returncode == 0
    with open_capture(everything) as reader:
        assert [(p.ts, p.data) for p in reader] == packets
    if TSHARK is not None:  # Wireshark opens it and follows one TCP stream
        streams = subprocess.run(
            [TSHARK, "-r", str(tmp_path / "out.pcap"), "-T", "fields", "-e", "tcp.stream"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert set(streams) == {"0"} and len(streams) == len(mine)


def pcapng_packets(path: Path) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """The file's first 4 bytes, and (link type, timestamp in µs, bytes) of each packet, read
    with scapy's pcapng reader (independent of ours)."""
    from scapy.utils import RawPcapNgReader

    packets = []
    with RawPcapNgReader(str(path)) as reader:
        for data, meta in reader:
            m: Any = meta  # scapy's pcapng metadata (a namedtuple its stubs leave out)
            packets.append((m.linktype, (m.tshigh << 32) | m.tslow, data))
    return path.read_bytes()[:4], packets


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
def test_w_writes_pcapng_for_captures_of_several_link_types(tmp_path: Path) -> None:
    """A pcapng whose client side was captured on Ethernet and broker side on a raw-IP
    interface (the campaign rerun's outputs input 80: a UsageError after the whole read):
    -w writes every packet with its own link type, as pcapng, since pcap holds one; a
    .pcapng name asks for pcapng even with one link type."""
    sessions = [baseline_session(Conn(client_port=41000 + k)) for k in range(2)]
    segs = [seg for group in zip(*(s.segs for s in sessions), strict=True) for seg in group]
    mixed = write_pcapng(tmp_path / "mixed.pcapng", segs, links=("ether", "raw"))
    # what was crafted: interface 0 (Ethernet) client to broker, 1 (raw IP) broker to client
    want = []
    for number, seg in enumerate(segs, start=1):
        link = "ether" if seg.direction is Direction.CLIENT_TO_BROKER else "raw"
        ts = seg.ts_us if seg.ts_us is not None else ts_of(number)
        want.append((LINKTYPES[link], ts, link_frame(seg.l3(), link)))
    assert len({w[0] for w in want}) == 2
    for name in ("out.pcap", "out.pcapng"):
        res = cli("read", str(mixed), "-w", str(tmp_path / name))
        assert res.returncode == 0 and res.stdout == "", res.stderr
        magic, got = pcapng_packets(tmp_path / name)
        assert magic == bytes.fromhex("0a0d0d0a") and got == want
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    mine = [w for w, seg in zip(want, segs, strict=True) if seg.conn.client_port == 41001]
    res = cli("read", str(mixed), "-w", str(tmp_path / "one.pcap"), "--conn", "2")
    assert res.returncode == 0, res.stderr
    assert pcapng_packets(tmp_path / "one.pcap")[1] == mine
    # a FIFO cannot be written twice: the link types are known before its first byte
    fifo = tmp_path / "fifo.pcap"
    os.mkfifo(fifo)
    drained: list[bytes] = []
    drain = threading.Thread(target=lambda: drained.append(fifo.read_bytes()))
    drain.start()
    res = cli("read", str(mixed), "-w", str(fifo))
    drain.join()
    assert res.returncode == 0, res.stderr
    (tmp_path / "from_fifo").write_bytes(drained[0])
    assert pcapng_packets(tmp_path / "from_fifo") == (bytes.fromhex("0a0d0d0a"), want)
    # one link type: a classic pcap, unless the name asks for pcapng
    single = write_pcap(tmp_path / "single.pcap", segs).path
    for name, first in (("s.pcap", "d4c3b2a1"), ("s.pcapng", "0a0d0d0a")):
        assert cli("read", str(single), "-w", str(tmp_path / name)).returncode == 0
        assert (tmp_path / name).read_bytes()[:4] == bytes.fromhex(first)
    with open_capture(tmp_path / "s.pcapng") as reader:
        ng = [(p.ts, p.data) for p in reader]
    with open_capture(single) as reader:
        assert ng == [(p.ts, p.data) for p in reader]


# --------------------------------------------------------------------------- -x: frame bytes


def hex_blocks(text: str) -> list[tuple[int, bytes]]:
    """(packet number, bytes) of each frame line of `read -x`, the hex lines parsed back."""
    blocks: list[tuple[int, bytes]] = []
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]{4}  [0-9a-f*]{2} ", line):
            hexes = line[6:54].split()  # offset, 2 spaces, 8 + 8 bytes; then the characters
            assert int(line[:4], 16) == len(blocks[-1][1])  # offsets count the bytes
            shown = "".join(hexes).replace("**", "00")  # masked bytes: not comparable
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + bytes.fromhex(shown))
        elif line.strip() and not line.lstrip().startswith("!"):
            blocks.append((int(line.split()[0]), b""))
    return blocks


def tcp_streams(path: Path) -> dict[tuple[int, int], bytes]:
    """(source port, destination port) -> that direction's TCP payload, read with scapy."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    streams: dict[tuple[int, int], bytes] = {}
    for pkt in rdpcap(str(path)):
        if TCP in pkt and bytes(pkt[TCP].payload):
            key = (pkt[TCP].sport, pkt[TCP].dport)
            streams[key] = streams.get(key, b"") + bytes(pkt[TCP].payload)
    return streams


def test_hex_view_shows_every_byte_of_every_frame() -> None:
    """-x: each frame's bytes, in order, are its direction's TCP payload (scapy's reading),
    whole: the frames of a clean capture tile both byte streams exactly."""
    blocks = hex_blocks(ok("read", str(SAMPLE), "-x"))
    assert blocks and all(data for _, data in blocks)
    streams = tcp_streams(SAMPLE)
    joined = b"".join(data for _, data in blocks)
    assert len(joined) == sum(len(s) for s in streams.values())
    rest = dict(streams)
    for _, data in blocks:  # frames of each direction come in stream order
        key = next(k for k, s in rest.items() if s.startswith(data))
        rest[key] = rest[key][len(data) :]
    assert all(not s for s in rest.values())


def test_hex_view_masks_auth_data(tmp_path: Path) -> None:
    secret = b"token-hunter2-secret"
    s = Session(Conn())
    s.handshake()
    s.exchange(baseline_msgs(auth_data=secret))
    s.close()
    path = write_pcap(tmp_path / "auth.pcap", s.segs).path
    shown = ok("read", str(path), "-x", "-c", "1")
    connect = baseline_msgs(auth_data=secret)[0].data
    masked = connect.replace(secret, bytes(len(secret)))  # where ** stand
    assert hex_blocks(shown)[0][1] == masked
    assert "**" in shown and secret.hex() not in shown.replace(" ", "")
    assert "hunter2" not in shown
    revealed = hex_blocks(ok("read", str(path), "-x", "-c", "1", "--show-secrets"))[0][1]
    assert revealed == connect


# --------------------------------------------------------------------------- fields column


def _as_json(value: object) -> object:
    """A crafted field value as the `fields` JSON must show it (ids and nested dicts)."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    return value


@pytest.mark.slow  # many command runs: left out of `make check`
def test_fields_column_holds_every_field_the_command_sets(tmp_path: Path) -> None:
    """--columns ...,fields: each frame's JSON has exactly the fields the crafted command was
    given (enums by name), the auth data redacted; without asking, the column is null."""
    secret = b"token-hunter2-secret"
    msgs = baseline_msgs(auth_data=secret)
    s = Session(Conn())
    s.handshake()
    s.exchange(msgs)
    s.close()
    path = write_pcap(tmp_path / "f.pcap", s.segs).path
    out = ok("read", str(path), "--table", "frames", "--columns", "command,fields",
             "--format", "jsonl")  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["command"] for r in rows] == [m.name for m in msgs]
    enums = {"subType": {0: "Exclusive"}, "ack_type": {0: "Individual"}}
    for row, m in zip(rows, msgs, strict=True):
        want = {k: enums[k][v] if k in enums else _as_json(v) for k, v in m.fields.items()}
        if "auth_data" in want:
            want["auth_data"] = f"<redacted>({len(secret)} bytes)"
        got = json.loads(row["fields"]) if row["fields"] is not None else {}
        assert got == want, m.name
    assert "hunter2" not in out and secret.hex() not in out
    plain = ok("read", str(path), "--table", "frames", "--format", "jsonl")
    assert all(json.loads(line)["fields"] is None for line in plain.splitlines())
    asked = ok("read", str(path), "--table", "frames", "--format", "jsonl", "--fields")
    assert [json.loads(line)["fields"] for line in asked.splitlines()] == [
        r["fields"] for r in rows
    ]
    found = ok("read", str(path), "--table", "frames", "--format", "csv", "--columns",
               "command", "-Y", "fields contains 'messagePermits'")  # fmt: skip
    assert found.replace('"', "").split() == ["command", "FLOW"]


def test_fields_from_pandas_name_the_clients_subscription() -> None:
    import dissector

    cap = dissector.read_capture(SAMPLE, tables=["frames"], fields=True)
    sub = cap.frames[cap.frames["command"] == "SUBSCRIBE"]["fields"].map(json.loads)
    assert [f["subscription"] for f in sub] == [MANIFEST["subscription"]]
    assert [f["subType"] for f in sub] == [MANIFEST["consumer_type"]]
    assert [f["topic"] for f in sub] == [MANIFEST["topic"]]
    assert dissector.read_capture(SAMPLE, tables=["frames"]).frames["fields"].isna().all()
