"""`pulsar-dissect live -j 2`: the kernel shares the packets by flow between two processes.

Real traffic on loopback: a small broker stand-in (a thread answering CONNECT with
CONNECTED and each SEND with a SEND_RECEIPT) and clients on many connections, each sending
CONNECT then K SEND frames and reading what comes back. What every client did (its own
record: its port, its K) is the reference: every frame of both directions must be printed
exactly once, each connection under one conn_id (both directions reached one process), and
the connections must be shared between the two processes (their id blocks). Needs capture
permission (root or CAP_NET_RAW). Waits for events (rows printed), never for times.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds

from benchmarks.live_rate import connect_frame, send_frame
from dissector import command, encode_frame
from dissector.capture import open_capture
from dissector.frontends.live.session import WORKER_CONN_IDS
from tests.support.capture import Tcpdump, TcpdumpMissing
from tests.support.live import Live

CONNECTIONS = 16  # all on one process by chance: 2 ** -15
SENDS = 50  # per connection
CONNECTED = encode_frame(command("CONNECTED", server_version="stand-in", protocol_version=21))
RECEIPT = encode_frame(command("SEND_RECEIPT", producer_id=1, sequence_id=1))


class Broker:
    """Answers CONNECT with CONNECTED and every SEND with a SEND_RECEIPT, on a free port."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        hello, size = len(connect_frame()), len(send_frame())
        with conn:
            buf = _read(conn, hello)
            conn.sendall(CONNECTED)
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    return
                buf += data
                whole, rest = divmod(len(buf), size)
                conn.sendall(RECEIPT * whole)
                buf = buf[len(buf) - rest :]

    def close(self) -> None:
        self.server.close()


def _read(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        data = sock.recv(n - len(got))
        assert data, "closed early"
        got += data
    return got


def client(port: int) -> int:
    """One connection: CONNECT, CONNECTED back, SENDS SEND frames, their receipts back;
    returns its local port."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        local = int(sock.getsockname()[1])
        sock.sendall(connect_frame())
        assert _read(sock, len(CONNECTED)) == CONNECTED
        for _ in range(SENDS):
            sock.sendall(send_frame())
        assert _read(sock, len(RECEIPT) * SENDS) == RECEIPT * SENDS
    return local


def test_two_processes_see_every_frame_once_each_connection_whole(tmp_path: Path) -> None:
    broker = Broker()
    port = broker.port
    try:
        live = Live(
            *("-i", "lo", "--port", str(broker.port), "-j", "2", "--format", "jsonl"),
            *("--table", "frames", "--table", "conversations", "-o", str(tmp_path / "t")),
        )
        try:
            with contextlib.ExitStack() as stack:
                try:  # tcpdump alongside: the packets on the wire, once each
                    dump = stack.enter_context(Tcpdump(tmp_path / "dump.pcap", f"tcp port {port}"))
                except TcpdumpMissing:
                    dump = None
                ports = [client(broker.port) for _ in range(CONNECTIONS)]
                live.wait_until(  # a conversation's row is printed when its FIN is seen
                    lambda: (
                        sum('"table":"conversations"' in ln for _, ln in live.lines) >= CONNECTIONS
                    ),
                    "every conversation",
                )
        finally:
            rc = live.stop(signal.SIGINT)
    finally:
        broker.close()
    assert rc == 0, live.stderr
    rows = live.rows()
    assert "2 processes (by flow)" in live.stderr.splitlines()[0], live.stderr
    frames = [r for r in rows if r["table"] == "frames"]
    seen = Counter((r["client_port"], r["command"]) for r in frames)
    expected: Counter[tuple[int, str]] = Counter()
    for port in ports:
        expected.update({(port, "CONNECT"): 1, (port, "CONNECTED"): 1})
        expected.update({(port, "SEND"): SENDS, (port, "SEND_RECEIPT"): SENDS})
    assert seen == expected  # every frame of both directions, once
    ids: dict[int, set[int]] = {r["client_port"]: set() for r in frames}
    for r in frames:
        ids[r["client_port"]].add(r["conn_id"])
    assert all(len(i) == 1 for i in ids.values()), ids  # one connection, one process
    workers = {conn_id // WORKER_CONN_IDS for (conn_id,) in ids.values()}
    assert workers == {0, 1}, ids  # shared between the two processes
    conversations = [r for r in rows if r["table"] == "conversations"]
    assert sorted(r["client_port"] for r in conversations) == sorted(ports)
    # the summary adds both processes' counts up: nothing lost, nothing left unread
    last = live.stderr.strip().splitlines()[-1]
    assert last.endswith(", 0 dropped by the kernel"), last
    if dump is not None:  # loopback's packets once each (not its outgoing copies too)
        with open_capture(tmp_path / "dump.pcap") as reader:
            assert last.startswith(f"pulsar-dissect: {len(list(reader))} packets captured, ")
    counts = f" {len(frames)} frames, {CONNECTIONS * SENDS} messages, {CONNECTIONS} conversations"
    assert f"{counts}, 0 anomalies" in last, last  # -o decodes the messages of the SENDs
    # -o: both processes' parts in one dataset, the same rows
    written = ds.dataset(tmp_path / "t" / "frames", format="parquet").to_table()
    assert written.num_rows == len(frames)
    assert sorted(written.column("conn_id").to_pylist()) == sorted(r["conn_id"] for r in frames)
