"""`pulsar-dissect live`: real peers on loopback, and the parts of a live run offline.

Real peers: pulsar-lite on a free 127.0.0.1 port, the sniffer as a subprocess (`live -i lo
--port P`), the official client producing, consuming and acking. What the sniffer printed
and wrote is compared with the client's own record (its manifest), with tcpdump capturing
the same traffic alongside, and with an offline read of the pcap files it wrote. These
tests need capture permission (root or CAP_NET_RAW): they skip without it, except under
CI=true, where they fail.
Offline: pcap rotation, Parquet parts, and whole runs replaying a sample capture through a
fake source (signals included), none of which needs any privilege.
"""

from __future__ import annotations

import array
import contextlib
import datetime as dt
import fcntl
import io
import json
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from scapy.layers.inet import TCP
from scapy.layers.l2 import Ether

from dissector.capture import open_capture
from dissector.capture.bpf import default_filter_text
from dissector.errors import InputError, UsageError
from dissector.frontends.cli import build_parser
from dissector.frontends.cli.read import cmd_read
from dissector.frontends.live import loop as live_module
from dissector.frontends.live.capturer import Capturer
from dissector.frontends.live.files import ParquetParts, PcapFiles
from dissector.frontends.live.loop import run
from dissector.frontends.live.options import Counts, LiveOptions
from dissector.frontends.live.session import Session, json_lines
from dissector.read import ReaderOptions, read_tables
from dissector.tables.filters import Filter
from dissector.tables.schema import SCHEMAS
from tests.support.capture import Tcpdump, TcpdumpMissing
from tests.support.live import FakeSource, Live, capture_denied, live_argv, require_capture
from tests.support.peers import PulsarLite, free_port, run_scenario

SAMPLE = Path(__file__).resolve().parents[2] / "pcaps" / "produce_consume.pcap"
SUMMARY = re.compile(
    r"^pulsar-dissect: (\d+) packets? captured, (\d+) frames?, (?:(\d+) messages?, )?"
    r"(\d+) conversations?, (\d+) anomal(?:y|ies), (\d+|n/a) dropped by the kernel$"
)
_ALL = Filter()


# --------------------------------------------------------------------------- helpers


def summary_of(stderr: str) -> re.Match[str]:
    last = stderr.strip().splitlines()[-1]
    match = SUMMARY.match(last)
    assert match, last
    return match


def pcap_series(path: Path) -> list[Path]:
    """The files of a `-w path -C ...` run, in order: path, path1, path2, ..."""
    rotated = sorted(
        path.parent.glob(path.name + "[0-9]*"), key=lambda p: int(p.name[len(path.name) :])
    )
    return [path, *rotated]


def packets(files: list[Path]) -> list[bytes]:
    out = []
    for f in files:
        with open_capture(f) as reader:
            out += [p.data for p in reader]
            assert reader.issues == [], reader.issues
    return out


def plain(tables: dict[str, pa.Table]) -> dict[str, list[dict[str, Any]]]:
    """Tables as JSON-ready rows (as `live --format jsonl` prints them), capture column aside."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, table in tables.items():
        text = "".join(json_lines(name, b, _ALL) for b in table.to_batches())
        rows = [json.loads(line) for line in text.splitlines()]
        for row in rows:
            row.pop("table")
            row.pop("capture", None)
        out[name] = rows
    return out


def datasets(root: Path) -> dict[str, pa.Table]:
    """The Parquet datasets of `live -o root`, one table each."""
    return {n: ds.dataset(root / n, schema=SCHEMAS[n]).to_table() for n in SCHEMAS}


def by_table(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {n: [] for n in SCHEMAS}
    for row in rows:
        row = dict(row)
        out[row.pop("table")].append(row)
        row.pop("capture", None)
    return out


# --------------------------------------------------------------------------- real peers


@dataclass
class LiveRun:
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]
    arrivals: list[float]
    stderr: str
    rc: int
    pcaps: list[Path]
    tcpdump_packets: list[bytes] | None
    tables: Path
    broker_port: int


@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory: pytest.TempPathFactory) -> LiveRun:
    """One produce/consume/ack run under `live --format jsonl -w -C -o`, stopped by SIGINT."""
    require_capture()
    tmp = tmp_path_factory.mktemp("live-jsonl")
    pcap = tmp / "run.pcap"
    with PulsarLite() as broker:
        bpf = f"tcp port {broker.port}"
        live = Live(
            *("-i", "lo", "--port", str(broker.port), "--format", "jsonl"),
            *("-w", str(pcap), "-C", "0.004", "-o", str(tmp / "tables")),
        )
        try:
            with contextlib.ExitStack() as stack:
                try:  # tcpdump alongside, as the reference for what was on the wire
                    dump = stack.enter_context(Tcpdump(tmp / "tcpdump.pcap", bpf))
                except TcpdumpMissing:
                    dump = None
                manifest = run_scenario(broker.url, messages=12, batching=False)
                # The conversation's row is printed when its FIN is seen: before any stop.
                live.wait_for('"table":"conversations"')
        finally:
            rc = live.stop(signal.SIGINT)
    return LiveRun(
        manifest=manifest,
        rows=live.rows(),
        arrivals=[t for t, _ in live.lines],
        stderr=live.stderr,
        rc=rc,
        pcaps=pcap_series(pcap),
        tcpdump_packets=None if dump is None else packets([tmp / "tcpdump.pcap"]),
        tables=tmp / "tables",
        broker_port=broker.port,
    )


def test_sigint_stops_cleanly_with_a_summary(jsonl_run: LiveRun) -> None:
    assert jsonl_run.rc == 0, jsonl_run.stderr
    lines = jsonl_run.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in jsonl_run.stderr, lines
    assert lines[0].startswith("pulsar-dissect: listening on lo, link-type EN10MB (Ethernet), ")
    port = jsonl_run.broker_port
    assert f"filter 'tcp port 6650 or tcp port 6651 or tcp port {port}' (built in)" in lines[0]
    s = summary_of(jsonl_run.stderr)
    rows = by_table(jsonl_run.rows)
    assert int(s[1]) == len(packets(jsonl_run.pcaps))
    assert int(s[2]) == len(rows["frames"])
    assert int(s[3]) == len(rows["messages"])
    assert int(s[4]) == len(rows["conversations"]) == 1
    assert int(s[5]) == len(rows["anomalies"]) == 0
    assert s[6] == "0"


def test_rows_are_printed_within_a_second_of_the_wire(jsonl_run: LiveRun) -> None:
    delays = [
        arrived - dt.datetime.fromisoformat(row["ts"]).timestamp()
        for arrived, row in zip(jsonl_run.arrivals, jsonl_run.rows, strict=True)
        if row["table"] == "frames"
    ]
    assert delays and max(delays) < 1.0, max(delays)


def test_reports_what_the_client_did(jsonl_run: LiveRun) -> None:
    m, rows = jsonl_run.manifest, by_table(jsonl_run.rows)
    frames = rows["frames"]
    commands = Counter((f["direction"], f["command"]) for f in frames)
    c2b, b2c = "client_to_broker", "broker_to_client"
    sent, received = m["sent"], m["received"]
    assert commands[c2b, "CONNECT"] == commands[b2c, "CONNECTED"] == 1
    assert commands[c2b, "PRODUCER"] == m["producers_created"] == 1
    assert commands[c2b, "SUBSCRIBE"] == m["consumers_created"] == 1
    assert commands[c2b, "SEND"] == commands[b2c, "SEND_RECEIPT"] == len(sent) == 12
    assert commands[b2c, "MESSAGE"] >= len({json.dumps(r["message_id"]) for r in received})
    assert all(f["checksum"] == "valid" for f in frames if f["command"] == "SEND")
    assert all(f["complete"] for f in frames)
    acked = sum(f["num_messages"] for f in frames if f["command"] == "ACK")
    assert acked == len(m["acks"]) if m["duplicates_received"] == 0 else acked >= len(sent)

    def identity(sha: str, size: int, key: str | None, props: dict[str, str]) -> tuple[Any, ...]:
        return (sha, size, key, tuple(sorted(props.items())))

    msgs = rows["messages"]
    produced = Counter(
        identity(r["payload_sha256"], r["payload_size"], r["key"], r["properties"])
        for r in msgs
        if r["kind"] == "produced"
    )
    assert produced == Counter(
        identity(s["sha256"], s["size"], s["key"], s["properties"]) for s in sent
    )
    delivered = Counter(
        identity(r["payload_sha256"], r["payload_size"], r["key"], r["properties"])
        for r in msgs
        if r["kind"] == "delivered"
    )
    wanted = Counter(identity(r["sha256"], r["size"], r["key"], r["properties"]) for r in received)
    assert not wanted - delivered
    pairs = Counter((p["request_command"], p["outcome"]) for p in rows["timeline"])
    assert pairs["SEND", "success"] == len(sent)
    # Every message the application received was acked; the wire may carry more deliveries
    # than the application saw (pulsar-lite dispatches some entries again), never fewer.
    acked_ids = {
        (p["ledger_id"], p["entry_id"])
        for p in rows["timeline"]
        if p["request_command"] == "MESSAGE" and p["outcome"] == "success"
    }
    ids = {(r["message_id"]["ledger_id"], r["message_id"]["entry_id"]) for r in received}
    assert ids <= acked_ids
    entities = {e["kind"]: e for e in rows["entities"]}
    assert entities["producer"]["topic"] == entities["consumer"]["topic"] == m["topic"]
    assert entities["producer"]["sent"] == len(sent)
    (conv,) = rows["conversations"]
    assert conv["ended"] == "fin" and conv["broker_port"] == jsonl_run.broker_port


def test_loopback_packets_are_kept_once_as_tcpdump_does(jsonl_run: LiveRun) -> None:
    ours = packets(jsonl_run.pcaps)
    # The kernel hands each loopback packet over twice; a kept copy would sit right after
    # its original, byte for byte (and look like a retransmission).
    assert all(a != b for a, b in pairwise(ours))
    if jsonl_run.tcpdump_packets is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true, but tcpdump is missing: make test installs it")
        pytest.skip("tcpdump is not installed: nothing to compare with")
    assert ours == jsonl_run.tcpdump_packets


def test_pcap_rotates_by_size_and_reads_back_as_the_same_tables(jsonl_run: LiveRun) -> None:
    files = jsonl_run.pcaps
    assert len(files) >= 3
    for f in files[:-1]:  # tcpdump -C: a file is closed once it exceeds the size
        assert f.stat().st_size > 4000
    offline = read_tables([str(f) for f in files], ReaderOptions.make([jsonl_run.broker_port]))
    assert plain(offline) == by_table(jsonl_run.rows)
    assert plain(datasets(jsonl_run.tables)) == by_table(jsonl_run.rows)


def test_sigterm_text_output_equals_read_of_its_own_pcap(tmp_path: Path) -> None:
    require_capture()
    pcap, tables = tmp_path / "run.pcap", tmp_path / "tables"
    with PulsarLite() as broker:
        port = str(broker.port)
        live = Live("-i", "lo", "--port", port, "-w", str(pcap), "-o", str(tables))
        try:
            run_scenario(broker.url, messages=4, batching=True)
            live.wait_for("CLOSE_CONSUMER")
            time.sleep(0.3)
        finally:
            rc = live.stop(signal.SIGTERM)
    assert rc == 0, live.stderr
    text = "".join(line for _, line in live.lines)
    read = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "read", "--port", port, str(pcap)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert text == read.stdout and "SEND " in text
    s = summary_of(live.stderr)
    assert int(s[2]) == text.count("\n") and s[3] is not None  # -o: messages are extracted
    got = datasets(tables)
    assert got["frames"].num_rows == int(s[2]) and got["conversations"].num_rows == 1


def test_duration_without_traffic_leaves_valid_empty_files(tmp_path: Path) -> None:
    require_capture()
    pcap, tables = tmp_path / "idle.pcap", tmp_path / "tables"
    started = time.monotonic()
    res = subprocess.run(
        live_argv(
            *("-i", "lo", "--port", str(free_port()), "--duration", "1", "--format", "jsonl"),
            *("-w", str(pcap), "-o", str(tables)),
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started < 10
    assert res.stdout == ""
    s = summary_of(res.stderr)
    assert (s[1], s[2], s[4], s[5]) == ("0", "0", "0", "0")
    assert packets([pcap]) == []
    got = datasets(tables)
    assert all(t.num_rows == 0 for t in got.values())
    assert ds.dataset(tables / "frames").schema.equals(SCHEMAS["frames"])


def test_count_stops_after_n_packets(tmp_path: Path) -> None:
    require_capture()
    port = free_port()
    pcap = tmp_path / "four.pcap"
    live = Live("-i", "lo", "--port", str(port), "-c", "4", "-w", str(pcap))
    with socket.create_server(("127.0.0.1", port)) as server:
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        client.sendall(b"not pulsar")
        conn.recv(100)
        client.close()
        conn.close()
    try:
        live.proc.wait(timeout=10)
    finally:
        rc = live.stop()
    assert rc == 0, live.stderr
    assert len(packets([pcap])) == 4
    assert summary_of(live.stderr)[1] == "4"


def one_line_error(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_unknown_interface_is_one_clear_line() -> None:
    res = subprocess.run(live_argv("-i", "nosuch0"), capture_output=True, text=True, timeout=30)
    line = one_line_error(res)
    assert line.startswith("pulsar-dissect: no such interface: nosuch0; interfaces: ")
    assert "lo" in line


def test_bad_filter_is_one_clear_line() -> None:
    require_capture()
    res = subprocess.run(
        live_argv("-i", "lo", "-f", "tcp port"), capture_output=True, text=True, timeout=30
    )
    assert "cannot use capture filter 'tcp port'" in one_line_error(res)


# ------------------------------------------------------- without libpcap and tcpdump


def hidden_files() -> list[str]:
    """Every libpcap shared library and tcpdump binary on this machine (real paths)."""
    found: set[str] = set()
    for folder in ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib"):
        for path in Path(folder).glob("**/libpcap.so*") if Path(folder).is_dir() else ():
            found.add(os.path.realpath(path))
    for folder in ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"):
        if (Path(folder) / "tcpdump").exists():
            found.add(os.path.realpath(Path(folder) / "tcpdump"))
    return sorted(found)


def without_libpcap() -> tuple[str, ...]:
    """A command prefix that runs the rest in a private mount namespace where /dev/null is
    bind-mounted over libpcap and tcpdump: loading or running them fails there."""
    unshare = shutil.which("unshare")
    why = None if unshare and os.geteuid() == 0 else "hiding libpcap needs root and unshare"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, but {why}")
        pytest.skip(why)
    assert unshare is not None
    mounts = " && ".join(f"mount --bind /dev/null {shlex.quote(f)}" for f in hidden_files())
    script = (mounts + " && " if mounts else "") + 'exec "$@"'
    return (unshare, "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh")


def test_hiding_really_hides_libpcap_and_tcpdump() -> None:
    require_capture()
    probe = (
        "import ctypes, ctypes.util, shutil, subprocess\n"
        "name = ctypes.util.find_library('pcap')\n"
        "try:\n    ctypes.CDLL(name or 'libpcap.so.0.8'); print('loaded')\n"
        "except OSError: print('no libpcap')\n"
        "try:\n    subprocess.run(['tcpdump', '--version'], capture_output=True); print('ran')\n"
        "except OSError: print('no tcpdump')\n"
    )
    res = subprocess.run(
        [*without_libpcap(), sys.executable, "-c", probe], capture_output=True, text=True
    )
    assert res.stdout.split("\n")[:2] == ["no libpcap", "no tcpdump"], res


def test_without_libpcap_live_sees_everything_the_client_did(tmp_path: Path) -> None:
    """The real-peer run with libpcap and tcpdump hidden: the built-in kernel filter keeps
    the broker's traffic and nothing else (a second connection on another port runs
    alongside), and every SEND, SEND_RECEIPT and MESSAGE the client reports is seen."""
    require_capture()
    with PulsarLite() as broker:
        live = Live(
            *("-i", "lo", "--port", str(broker.port), "--format", "jsonl"),
            *("-w", str(tmp_path / "run.pcap")),
            prefix=without_libpcap(),
        )
        try:
            other = free_port()
            with socket.create_server(("127.0.0.1", other)) as server:
                noise = socket.create_connection(("127.0.0.1", other))
                peer, _ = server.accept()
                manifest = run_scenario(broker.url, messages=10, batching=False)
                for _ in range(20):  # unrelated traffic the filter must keep out
                    noise.sendall(b"x" * 100)
                    peer.recv(100)
                noise.close()
                peer.close()
            live.wait_for('"table":"conversations"')
        finally:
            rc = live.stop(signal.SIGINT)
    assert rc == 0, live.stderr
    assert "(built in)" in live.stderr.splitlines()[0], live.stderr
    rows = by_table(live.rows())
    commands = Counter(f["command"] for f in rows["frames"])
    sent, received = manifest["sent"], manifest["received"]
    assert commands["SEND"] == commands["SEND_RECEIPT"] == len(sent) == 10
    delivered = {
        (f["ledger_id"], f["entry_id"]) for f in rows["frames"] if f["command"] == "MESSAGE"
    }
    ids = {(r["message_id"]["ledger_id"], r["message_id"]["entry_id"]) for r in received}
    assert ids and ids <= delivered
    (conv,) = rows["conversations"]
    assert conv["broker_port"] == broker.port
    kept = [Ether(data) for data in packets([tmp_path / "run.pcap"])]
    assert len(kept) == int(summary_of(live.stderr)[1]) >= conv["packets_c2b"] + 20
    assert all(broker.port in (p[TCP].sport, p[TCP].dport) for p in kept)  # nothing else


def test_without_libpcap_a_filter_expression_is_one_line_saying_so() -> None:
    require_capture()
    res = subprocess.run(
        [*without_libpcap(), *live_argv("-i", "lo", "-f", "tcp port 1", "-c", "1")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    line = one_line_error(res)
    assert "-f needs libpcap" in line and "apt-get install libpcap0.8" in line


def test_with_libpcap_a_filter_expression_is_compiled_by_it() -> None:
    require_capture()
    res = subprocess.run(
        live_argv("-i", "lo", "-f", "udp port 9", "--duration", "0.2"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if "-f needs libpcap" in res.stderr and os.environ.get("CI") != "true":
        pytest.skip("libpcap is not installed")
    assert res.returncode == 0, res.stderr
    assert "filter 'udp port 9' (compiled by libpcap version " in res.stderr


def test_without_permission_one_line_says_what_is_needed(tmp_path: Path) -> None:
    argv = live_argv("-i", "lo", "-w", str(tmp_path / "x.pcap"), "-o", str(tmp_path / "t"))
    if capture_denied() is None:  # we may capture: drop CAP_NET_RAW for the child
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            if os.environ.get("CI") == "true":
                pytest.fail("setpriv (util-linux) is needed to drop CAP_NET_RAW")
            pytest.skip("setpriv (util-linux) is needed to drop CAP_NET_RAW")
        argv = [setpriv, "--inh-caps=-net_raw", "--bounding-set=-net_raw", *argv]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    line = one_line_error(res)
    assert "cannot capture on lo: permission denied" in line and "CAP_NET_RAW" in line
    assert list(tmp_path.iterdir()) == []  # nothing created


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-C", "1"), "give -w"),
        (("-w", "x.pcap", "-W", "3"), "give -C or -G too"),
        (("--table", "frames"), "--table takes --format jsonl"),
        (("--duration", "0"), "argument --duration: not a positive number"),
    ],
)
def test_usage_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    res = subprocess.run(live_argv("-i", "lo", *args), capture_output=True, text=True, timeout=30)
    assert message in one_line_error(res)


# --------------------------------------------------------------------------- offline


def test_default_filter_covers_every_broker_port() -> None:
    want = "tcp port 6650 or tcp port 6651 or tcp port 16650"
    assert default_filter_text({6651, 6650, 16650}) == want


def sample_packets() -> list[tuple[int, bytes]]:
    with open_capture(SAMPLE) as reader:
        return [(p.ts, p.data) for p in reader]


def test_pcap_rotation_by_size_names_files_like_tcpdump(tmp_path: Path) -> None:
    path = tmp_path / "cap.pcap"
    pkts = sample_packets()
    writer = PcapFiles(str(path), 1, rotate_bytes=3000)
    for ts, data in pkts:
        writer.write(ts, data, len(data))
    writer.close()
    files = pcap_series(path)
    assert [f.name for f in files] == ["cap.pcap"] + [f"cap.pcap{i}" for i in range(1, len(files))]
    assert len(files) >= 3 and list(writer.files) == [str(f) for f in files]
    assert all(f.stat().st_size > 3000 for f in files[:-1])
    assert packets(files) == [d for _, d in pkts]
    with open_capture(files[1]) as reader:
        first = next(iter(reader))
    assert first.linktype == 1


def test_pcap_rotation_by_time_with_strftime_names(tmp_path: Path) -> None:
    start = 1_800_000_000.0
    pattern = str(tmp_path / "cap-%H%M%S.pcap")
    writer = PcapFiles(pattern, 1, rotate_seconds=10, start=start)
    for offset in (0, 5, 10, 12, 25):
        writer.write(int((start + offset) * 1e6), b"\x00" * 60, 60)
    writer.close()
    names = [time.strftime("cap-%H%M%S.pcap", time.localtime(start + s)) for s in (0, 10, 25)]
    assert [Path(f).name for f in writer.files] == names
    assert [len(packets([tmp_path / n])) for n in names] == [2, 2, 1]


def test_pcap_rotation_by_time_without_codes_numbers_the_files(tmp_path: Path) -> None:
    writer = PcapFiles(str(tmp_path / "t.pcap"), 1, rotate_seconds=1, max_files=2, start=0)
    for second in range(5):
        writer.write(second * 1_000_000, b"\x00" * 60, 60)
    writer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pcap3", "t.pcap4"]  # -W 2: newest


def test_parquet_parts_are_valid_datasets_and_refuse_a_second_run(tmp_path: Path) -> None:
    root = tmp_path / "tables"
    pkts = sample_packets()
    opts = LiveOptions(parquet=str(root), fmt="jsonl")
    session = Session(opts, FakeSource(pkts, 1), io.StringIO(), io.StringIO())
    assert session.parquet is not None
    half = len(pkts) // 2
    session.packets(pkts[:half])
    session.parquet.flush()  # what the flush interval does
    session.packets(pkts[half:])
    session.close()
    frames = sorted(p.name for p in (root / "frames").iterdir())
    assert frames == ["part-000000.parquet", "part-000001.parquet"]
    assert sorted(p.name for p in (root / "anomalies").iterdir()) == ["part-000000.parquet"]
    (root / "frames" / ".part-000002.parquet.tmp").write_bytes(b"torn write")  # a crash
    assert plain(datasets(root)) == plain(read_tables(SAMPLE))
    with pytest.raises(InputError, match="already holds tables"):
        ParquetParts(str(root))


def test_replayed_capture_prints_the_rows_of_an_offline_read(tmp_path: Path) -> None:
    pkts = sample_packets()
    out, err = io.StringIO(), io.StringIO()
    opts = LiveOptions(fmt="jsonl", count=len(pkts), parquet=str(tmp_path / "t"))
    assert run(opts, out, err, source=FakeSource(pkts, 1)) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    expected = plain(read_tables(SAMPLE))
    assert by_table(rows) == expected
    assert plain(datasets(tmp_path / "t")) == expected
    assert err.getvalue().endswith("n/a dropped by the kernel\n")


def test_replayed_capture_prints_the_text_of_read() -> None:
    pkts = sample_packets()
    out, err = io.StringIO(), io.StringIO()
    assert run(LiveOptions(count=len(pkts)), out, err, source=FakeSource(pkts, 1)) == 0
    read = io.StringIO()
    cmd_read(build_parser().parse_args(["read", str(SAMPLE)]), read)
    assert out.getvalue() == read.getvalue() and out.getvalue().count("\n") > 20
    # The text view's `!` lines need payload decoding: messages are extracted and counted.
    assert summary_of(err.getvalue())[3] == str(len(read_tables(SAMPLE)["messages"]))


def test_jsonl_prints_the_chosen_tables_and_filters_rows() -> None:
    pkts = sample_packets()
    out = io.StringIO()
    opts = LiveOptions(
        fmt="jsonl", tables=("frames", "messages"), rows=Filter(commands=frozenset({"SEND"}))
    )
    opts = replace(opts, count=len(pkts))
    assert run(opts, out, io.StringIO(), source=FakeSource(pkts, 1)) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert {r["table"] for r in rows} == {"frames", "messages"}
    assert {r["command"] for r in rows if r["table"] == "frames"} == {"SEND"}


def test_finished_conversations_are_forgotten_while_running() -> None:
    pkts = sample_packets()
    opts = LiveOptions(fmt="jsonl")
    session = Session(opts, FakeSource(pkts, 1), io.StringIO(), io.StringIO())
    session.packets(pkts)  # the sample's only connection ends with FIN
    assert session.counts.conversations == 1
    assert session.pipe._convs == {} and session.lines.keys == {}
    assert session.builder is not None
    assert session.builder._conns == {} and session.builder._cids == {}
    assert all(getattr(session.builder, n).rows == [] for n in SCHEMAS)  # handed over
    session.close()


def test_sigterm_in_process_stops_an_idle_capture_promptly(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM, sent while the loop waits on an idle source (one that never ends by itself),
    wakes that wait at once (the stopper's fd is ready: no TICK waited out) and stops the
    run: exit 0, the handler given back. No wait is longer than TICK. Counted, not timed."""
    waits: list[tuple[float, bool]] = []  # (timeout, woken by the stopper)

    def watched(rlist: list[int], wlist: list[int], xlist: list[int], timeout: float) -> Any:
        if not waits:
            os.kill(os.getpid(), signal.SIGTERM)  # while it is idle, about to wait
        assert len(waits) < 100, "still capturing after 100 waits"
        ready = select.select(rlist, wlist, xlist, timeout)
        waits.append((timeout, rlist[-1] in ready[0]))  # fds: [capturer, stopper]
        return ready

    monkeypatch.setattr(live_module, "select", SimpleNamespace(select=watched))
    before = signal.getsignal(signal.SIGTERM)
    out, err = io.StringIO(), io.StringIO()
    assert run(LiveOptions(), out, err, source=FakeSource([], 1)) == 0
    assert waits and waits[0][1], waits  # the signal woke the first wait
    assert all(timeout <= live_module.TICK for timeout, _ in waits), waits
    assert signal.getsignal(signal.SIGTERM) == before
    assert "0 packets captured" in err.getvalue()


def test_options_are_checked() -> None:
    with pytest.raises(UsageError):
        LiveOptions(rotate_bytes=10)
    with pytest.raises(UsageError):
        LiveOptions(fmt="csv")


def test_an_idle_connection_ends_by_the_clock_with_timeout() -> None:
    """Live: a connection quiet for longer than --idle-timeout (by the clock, no packet
    needed) ends with `timeout` on the next tick and is forgotten; the sample's packets are
    from a capture made long before this test, far more than the hour allowed."""
    pkts = sample_packets()
    half = pkts[: len(pkts) // 2]  # the connection still open: no FIN yet
    out = io.StringIO()
    opts = LiveOptions(fmt="jsonl", reader=ReaderOptions(idle_timeout=3600.0))
    session = Session(opts, FakeSource(half, 1), out, io.StringIO())
    session.packets(half)
    assert len(session.pipe._convs) == 1
    session.tick()
    assert session.pipe._convs == {}
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    conversations = [r for r in rows if r["table"] == "conversations"]
    assert [r["ended"] for r in conversations] == ["timeout"]
    last = max(ts for ts, _ in half)
    ended_at = dt.datetime.fromisoformat(conversations[0]["end_ts"]).timestamp()
    assert round(ended_at * 1_000_000) == last  # its own last packet
    session.close()
    assert [r for r in (json.loads(x) for x in out.getvalue().splitlines())
            if r["table"] == "conversations"] == conversations  # fmt: skip


class DroppingSource(FakeSource):
    """A source whose kernel says how many packets it dropped: `reported`, set by the test."""

    def __init__(self, pkts: list[tuple[int, bytes]]) -> None:
        super().__init__(pkts, 1)
        self.reported = 0

    def drops(self) -> int | None:
        return self.reported


def test_kernel_drops_become_an_anomaly_row_with_their_time_window() -> None:
    pkts = sample_packets()
    out, err = io.StringIO(), io.StringIO()
    source = DroppingSource(pkts)
    session = Session(LiveOptions(fmt="jsonl", flush_interval=0.001), source, out, err)
    before = dt.datetime.now(dt.UTC)
    session.packets(pkts[:10])
    time.sleep(0.01)
    session.tick()  # nothing dropped yet
    source.reported = 7
    session.packets(pkts[10:])
    time.sleep(0.01)
    session.tick()
    after = dt.datetime.now(dt.UTC)
    session.close()
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    drops = [r for r in rows if r["table"] == "anomalies" and r["code"] == "capture.kernel_drops"]
    assert len(drops) == 1, drops
    row = drops[0]
    assert row["conn_id"] == 0 and row["length"] == 7 and row["severity"] == "error"
    start, end = re.findall(r"between (\S+) and (\S+) ", row["detail"])[0]
    assert before <= dt.datetime.fromisoformat(start) <= dt.datetime.fromisoformat(end) <= after
    assert "7 packets dropped by the kernel" in err.getvalue()
    assert session.counts.dropped == 7


class TricklingSource(FakeSource):
    """Four packets per read, as a socket under a steady load."""

    def read(self, limit: int) -> list[tuple[int, bytes]]:
        return super().read(min(limit, 4))


def big_packets() -> list[tuple[int, bytes]]:
    """64 Ethernet frames of 60 kB of a local experimental type: 4 MB, more than a pipe
    holds; they dissect to nothing."""
    frame = b"\xff" * 6 + b"\x02" + b"\x00" * 5 + b"\x88\xb5"
    return [(1_700_000_000_000_000 + i, frame + bytes([i]) * 60_000) for i in range(64)]


def _pipe_is_full(read_end: int) -> bool:
    """Whether a pipe takes no more bytes: a write end opened through /proc is writable
    exactly while the pipe has room (closed again at once: the pipe's EOF is unchanged)."""
    probe = os.open(f"/proc/self/fd/{read_end}", os.O_WRONLY | os.O_NONBLOCK)
    try:
        return not select.select([], [probe], [], 0)[1]
    finally:
        os.close(probe)


def _waiting_bytes(fd: int) -> int:
    """Bytes in the pipe of `fd` not read yet."""
    count = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, count)
    return count[0]


def _wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_packets_still_queued_at_stop_are_counted_and_kept(tmp_path: Path) -> None:
    """The capturer hands packets over only as fast as they are read; when the dissector
    gives up waiting (abandon), what was not handed over is counted as unread, and -w
    still holds every packet captured. Packets are left queued by construction: stop and
    abandon are sent while the pipe is full, and it is read again only once the capturer
    has taken both (else a fast reader could take every packet before the abandon)."""
    pkts = big_packets()
    pcap = PcapFiles(str(tmp_path / "w.pcap"), 1)
    cap = Capturer(FakeSource(pkts, 1), pcap, queue_bytes=1 << 30)
    cap.start()
    _wait_until(lambda: cap.captured() == len(pkts), "not every packet was captured")
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:  # the dissector takes a few
        select.select([cap.fileno()], [], [], 0.1)
        got = cap.read(200_000)
    _wait_until(lambda: _pipe_is_full(cap.fileno()), "the capturer never filled the pipe")
    cap.stop()
    cap.abandon()
    _wait_until(lambda: _waiting_bytes(cap._ctl) == 0, "the capturer never took the abandon")
    counted, more = cap.count_rest(time.monotonic() + 60)
    cap.finish()
    unread, unread_more = cap.unread()
    assert not more and not unread_more
    assert got and len(got) + counted + unread == len(pkts) and unread > 0
    assert got == pkts[: len(got)]
    with open_capture(tmp_path / "w.pcap") as reader:  # -w kept every one of them
        assert [(p.ts, p.data) for p in reader] == pkts


def test_the_summary_line_says_what_was_not_dissected() -> None:
    line = Counts(packets=90, captured=100, unread=6, skipped=4, dropped=3).line()
    assert line.startswith("100 packets captured, ")
    assert line.endswith(
        ", 3 dropped by the kernel, 6 packets still queued at stop (not dissected)"
        ", 4 packets skipped (dissection fell behind)"
    )


def test_a_dissector_too_far_behind_skips_packets_and_says_so(tmp_path: Path) -> None:
    """With a queue of one byte, a dissector that does not read makes the capturer skip
    (but keep in -w) what fits neither the pipe nor the queue; the skip becomes an anomaly
    row. The packets: 64 large Ethernet frames of a local experimental type (4 MB in all,
    more than a pipe holds), which dissect to nothing."""
    pkts = big_packets()
    pcap = PcapFiles(str(tmp_path / "w.pcap"), 1)
    cap = Capturer(TricklingSource(pkts, 1), pcap, queue_bytes=1)
    out, err = io.StringIO(), io.StringIO()
    session = Session(LiveOptions(fmt="jsonl", flush_interval=0.001), cap, out, err)
    cap.start()
    deadline = time.monotonic() + 60
    while cap.captured() < len(pkts):
        assert time.monotonic() < deadline, cap.captured()
        time.sleep(0.01)
    cap.stop()
    while not cap.eof:
        session.packets(cap.read())
    cap.finish()
    time.sleep(0.01)
    session.tick()
    session.close()
    skipped = cap.skipped()
    assert skipped > 0 and session.counts.packets + skipped == len(pkts)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    lost = [r for r in rows if r["table"] == "anomalies" and r["code"] == "capture.not_dissected"]
    assert [r["length"] for r in lost] == [skipped]
    assert f"{skipped} packets captured but not dissected" in err.getvalue()
    with open_capture(tmp_path / "w.pcap") as reader:
        assert [(p.ts, p.data) for p in reader] == pkts
