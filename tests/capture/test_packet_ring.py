"""The TPACKET_V3 ring of `PacketSocket`, checked against tcpdump capturing the same traffic.

A local TCP server and client exchange a few hundred messages on loopback (small ones and
64 KiB ones, so that blocks fill up and packets reach the loopback's size) while our socket
and tcpdump both listen on the server's port: every packet is read once, with the same
bytes and nearly the same timestamp as tcpdump's.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from itertools import pairwise
from pathlib import Path

import pytest

from dissector.capture import open_capture
from dissector.capture.bpf import broker_port_filter
from dissector.capture.packet_socket import BLOCK_SIZE, PacketSocket
from tests.support.capture import Tcpdump, TcpdumpMissing, tcpdump_path
from tests.support.live import require_capture


def require_tcpdump() -> None:
    try:
        tcpdump_path()
    except TcpdumpMissing:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true, but tcpdump is missing: make test installs it")
        pytest.skip("tcpdump is not installed: nothing to compare with")


class EchoServer:
    """A TCP echo server on a free 127.0.0.1 port, in a thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while data := conn.recv(1 << 20):
                conn.sendall(data)

    def close(self) -> None:
        self.thread.join(10)
        self.listener.close()


def exchange(port: int, sizes: list[int]) -> None:
    """One connection: each message sent, then its echo read back in full."""
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i, size in enumerate(sizes):
            message = bytes([i % 256]) * size
            client.sendall(message)
            got = 0
            while got < size:
                got += len(client.recv(1 << 20))
        client.shutdown(socket.SHUT_WR)
        while client.recv(1 << 16):
            pass


def read_until(source: PacketSocket, count: int, limit: int, seconds: float = 5.0) -> Packets:
    """Packets read in batches of at most `limit` until `count` arrived (or time ran out)."""
    out: Packets = []
    until = time.monotonic() + seconds
    while len(out) < count and time.monotonic() < until:
        batch = source.read(limit)
        assert len(batch) <= limit
        out += batch
    out += source.read(limit)  # nothing more: each loopback packet once
    return out


Packets = list[tuple[int, bytes]]


def capture_both(
    tmp_path: Path, sizes: list[int], limit: int, *, ring: bool = True
) -> tuple[PacketSocket, Packets, Packets, int | None]:
    """Our packets and tcpdump's for one exchange, and our socket's drop count."""
    server = EchoServer()
    choose = lambda linktype, _name: broker_port_filter([server.port], linktype)  # noqa: E731
    source = PacketSocket("lo", choose, 8 << 20, ring=ring)
    try:
        with Tcpdump(tmp_path / "tcpdump.pcap", f"tcp port {server.port}") as dump:
            exchange(server.port, sizes)
            server.close()
            time.sleep(0.2)  # the last ACKs reach tcpdump too
        assert dump.packets_dropped_by_kernel == 0
        with open_capture(tmp_path / "tcpdump.pcap") as reader:
            reference = [(p.ts, p.data) for p in reader]
        ours = read_until(source, len(reference), limit)
        return source, ours, reference, source.drops()
    finally:
        source.close()


def check_same(ours: Packets, reference: Packets) -> None:
    assert len(ours) == len(reference)
    assert [d for _, d in ours] == [d for _, d in reference]
    skew = max(abs(a - b) for (a, _), (b, _) in zip(ours, reference, strict=True))
    assert skew < 5_000, f"timestamps differ from tcpdump's by up to {skew} µs"
    # Loopback packets sent from two CPUs can reach the kernel's taps with their stamps
    # slightly out of order; ours may step back only where tcpdump's do.
    assert backward_steps(ours) <= backward_steps(reference)


def backward_steps(packets: Packets) -> int:
    return sum(1 for (a, _), (b, _) in pairwise(packets) if b < a)


def test_ring_reads_what_tcpdump_sees(tmp_path: Path) -> None:
    require_capture()
    require_tcpdump()
    sizes = [64 + i % 200 for i in range(300)] + [65_000] * 30 + [10] * 50
    source, ours, reference, drops = capture_both(tmp_path, sizes, limit=1024)
    assert source.ring
    assert source.buffer_bytes == 8 << 20 and source.buffer_bytes % BLOCK_SIZE == 0
    assert len(reference) > 2 * len(sizes)  # messages and echoes, each its packet
    assert max(len(d) for _, d in reference) > 60_000  # loopback-sized segments
    check_same(ours, reference)
    assert drops == 0


def test_ring_remembers_where_it_stopped_in_a_block(tmp_path: Path) -> None:
    require_capture()
    require_tcpdump()
    source, ours, reference, _ = capture_both(tmp_path, [100] * 200, limit=7)
    assert source.ring
    check_same(ours, reference)


def test_recvmsg_path_reads_the_same(tmp_path: Path) -> None:
    require_capture()
    require_tcpdump()
    source, ours, reference, _ = capture_both(tmp_path, [100] * 200, limit=64, ring=False)
    assert not source.ring
    check_same(ours, reference)


def test_a_quiet_link_hands_packets_over_promptly() -> None:
    """One small exchange, then nothing: the fd is readable well within a second."""
    require_capture()
    import select

    server = EchoServer()
    choose = lambda linktype, _name: broker_port_filter([server.port], linktype)  # noqa: E731
    source = PacketSocket("lo", choose, 4 << 20)
    try:
        assert source.ring
        started = time.monotonic()
        exchange(server.port, [10])
        ready, _, _ = select.select([source], [], [], 1.0)
        assert ready, "no block handed over within a second"
        assert time.monotonic() - started < 1.0
        got = source.read(1000)
        assert got and got[0][1][12:14] == b"\x08\x00"  # IPv4 in Ethernet
        now = time.time_ns() // 1000
        assert all(now - 2_000_000 < ts <= now for ts, _ in got)
    finally:
        server.close()
        source.close()
