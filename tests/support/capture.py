"""Real Pulsar traffic on loopback, captured by tcpdump into pcap files.

Input:  a scenario from tests/support/peers.py (a function that drives the official
        client against a service URL and returns its manifest), its keyword
        arguments and the broker settings.
Output: a pcap file (optionally gzip-compressed) of every packet to or from the
        broker port, and the scenario's manifest extended with the capture's and the
        broker's details; ``summarize_capture`` reads a capture back (scapy) to check it.
Rule:   one fresh pulsar-lite broker per capture on a free 127.0.0.1 port; tcpdump
        (``-i lo -U -B 65536 -s 0``, filter ``tcp port BROKERPORT``) is listening
        before the client starts and is stopped with SIGINT, then waited for, so that
        the file is complete; the client talks to the broker directly (no proxy).
        Nothing is written to the output path unless the run and the capture succeed
        (no packet dropped by the kernel, a CONNECT first on every connection).
"""

from __future__ import annotations

import gzip
import importlib.metadata
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.peers import ClientLogRecorder, PulsarLite, Scenario

__all__ = [
    "TCPDUMP_MISSING",
    "CaptureSummary",
    "Tcpdump",
    "TcpdumpMissing",
    "capture_scenario",
    "summarize_capture",
    "tcpdump_path",
]

TCPDUMP_MISSING = (
    "tcpdump is required to capture traffic but was not found on PATH.\n"
    "Install it, e.g. on Debian/Ubuntu:  apt-get install -y tcpdump\n"
    "(capturing on the loopback interface also needs root or CAP_NET_RAW)."
)


class TcpdumpMissing(RuntimeError):
    """tcpdump is not installed."""


def tcpdump_path() -> str:
    """The tcpdump executable, or raise ``TcpdumpMissing`` with install instructions."""
    found = shutil.which("tcpdump") or next(
        (
            p
            for p in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump", "/sbin/tcpdump")
            if os.path.isfile(p)
        ),
        None,
    )
    if found is None:
        raise TcpdumpMissing(TCPDUMP_MISSING)
    return found


def _tcpdump_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout + out.stderr).splitlines()[0].strip() if out.stdout + out.stderr else ""


class Tcpdump:
    """A tcpdump process writing ``path``; a context manager.

    Entering returns once tcpdump reports ``listening on``; leaving sends SIGINT,
    waits for it to exit (the file is then complete) and parses its statistics into
    ``packets_captured`` / ``packets_dropped_by_kernel``.
    """

    def __init__(
        self,
        path: Path,
        bpf_filter: str,
        *,
        interface: str = "lo",
        buffer_kib: int = 65536,
        startup_timeout: float = 10.0,
    ) -> None:
        self.binary = tcpdump_path()
        self.path = path
        self.argv = [
            self.binary,
            "-i",
            interface,
            "-U",
            "--immediate-mode",
            "-B",
            str(buffer_kib),
            "-s",
            "0",
            "-w",
            str(path),
            bpf_filter,
        ]
        self.startup_timeout = startup_timeout
        self.stderr_text = ""
        self.packets_captured: int | None = None
        self.packets_dropped_by_kernel: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_path = path.with_name(path.name + ".tcpdump.log")

    def __enter__(self) -> Tcpdump:
        with open(self._stderr_path, "wb") as err:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            text = self._stderr_path.read_text(errors="replace")
            if "listening on" in text:
                return self
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tcpdump did not start capturing ({self.argv}):\n{text}")
            time.sleep(0.02)

    def stop(self) -> None:
        """SIGINT, wait for exit (escalating to kill), then read the statistics."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._stderr_path.exists():
            self.stderr_text = self._stderr_path.read_text(errors="replace")
            self._stderr_path.unlink()
        for attr, pattern in (
            ("packets_captured", r"(\d+) packets? captured"),
            ("packets_dropped_by_kernel", r"(\d+) packets? dropped by kernel"),
        ):
            match = re.search(pattern, self.stderr_text)
            setattr(self, attr, int(match.group(1)) if match else None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- reading back


@dataclass
class CaptureSummary:
    """What a capture holds, from reading it back with scapy (TCP on ``port`` only)."""

    packets: int = 0
    port_packets: int = 0
    link_types: set[int] = field(default_factory=set)
    connections: int = 0  # SYNs towards the broker port
    client_bytes: int = 0
    broker_bytes: int = 0
    first_client_payload_is_connect: list[bool] = field(default_factory=list)
    commands: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.port_packets > 0
            and self.connections > 0
            and len(self.first_client_payload_is_connect) == self.connections
            and all(self.first_client_payload_is_connect)
        )


_MAX_RECORD = 1 << 20  # larger than any loopback frame (MTU 65536)


def _streams(path: Path, port: int, summary: CaptureSummary) -> dict[tuple[Any, ...], bytes]:
    """Reassemble each TCP direction on ``port`` (loopback: no loss, dedupe by seq)."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.utils import PcapReader

    segments: dict[tuple[Any, ...], dict[int, bytes]] = {}
    isn: dict[tuple[Any, ...], int] = {}
    with PcapReader(str(path)) as reader:
        summary.link_types.add(int(reader.linktype))
        while True:
            # Iterating a PcapReader (or rdpcap) silently cuts records to 65535 bytes;
            # loopback frames reach 65549 (14-byte Ethernet header + 65535-byte IP packet).
            try:
                pkt = reader.read_packet(size=_MAX_RECORD)
            except EOFError:
                break
            summary.packets += 1
            if TCP not in pkt:
                continue
            tcp = pkt[TCP]
            if port not in (tcp.sport, tcp.dport):
                continue
            summary.port_packets += 1
            ip = pkt[IP] if IP in pkt else pkt[IPv6]
            key = (ip.src, tcp.sport, ip.dst, tcp.dport)
            flags = int(tcp.flags)
            if flags & 0x02:  # SYN: data starts at seq + 1
                isn[key] = (tcp.seq + 1) & 0xFFFFFFFF
                if tcp.dport == port and not flags & 0x10:
                    summary.connections += 1
            data = bytes(tcp.payload)
            if IP in pkt and len(data) != ip.len - 4 * ip.ihl - 4 * tcp.dataofs:
                raise ValueError(f"packet {summary.packets}: TCP payload truncated in {path}")
            if data:
                start = isn.setdefault(key, tcp.seq)
                offset = (tcp.seq - start) & 0xFFFFFFFF
                segments.setdefault(key, {})[offset] = data
    streams: dict[tuple[Any, ...], bytes] = {}
    for key, parts in segments.items():
        buf = bytearray()
        for offset in sorted(parts):
            data = parts[offset]
            if offset < len(buf):  # retransmission / overlap
                data = data[len(buf) - offset :]
            elif offset > len(buf):
                raise ValueError(f"gap of {offset - len(buf)} bytes in {key}")
            buf += data
        streams[key] = bytes(buf)
    return streams


def _command_types(stream: bytes) -> Iterator[int]:
    """BaseCommand type of every frame of a reassembled stream (stops at a torn frame)."""
    i = 0
    while i + 10 <= len(stream):
        total = int.from_bytes(stream[i : i + 4], "big")
        if stream[i + 8] != 0x08:  # field 1 (type), varint
            return
        value, shift, j = 0, 0, i + 9
        while j < len(stream):
            byte = stream[j]
            value |= (byte & 0x7F) << shift
            shift += 7
            j += 1
            if not byte & 0x80:
                break
        yield value
        i += 4 + total


def summarize_capture(path: Path, port: int) -> CaptureSummary:
    """Read ``path`` (pcap, plain or gzip) back and summarise the traffic on ``port``.

    Checks that every connection to the broker starts with a CONNECT frame
    (totalSize u32, commandSize u32, then protobuf ``08 02``) and counts the commands
    of each direction.
    """
    from dissector.wire import command_name

    summary = CaptureSummary()
    for key, stream in sorted(_streams(path, port, summary).items()):
        to_broker = key[3] == port
        if to_broker:
            summary.client_bytes += len(stream)
            summary.first_client_payload_is_connect.append(
                len(stream) >= 10
                and stream[8:10] == b"\x08\x02"
                and int.from_bytes(stream[0:4], "big") == int.from_bytes(stream[4:8], "big") + 4
            )
        else:
            summary.broker_bytes += len(stream)
        counts = summary.commands.setdefault(
            "client_to_broker" if to_broker else "broker_to_client", {}
        )
        for t in _command_types(stream):
            counts[command_name(t)] = counts.get(command_name(t), 0) + 1
    return summary


# --------------------------------------------------------------------------- one capture


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _broker_lines(log: str, levels: tuple[str, ...] = ("WARN", "ERROR")) -> list[str]:
    return [line for line in log.splitlines() if any(f" {lvl} " in line for lvl in levels)]


def capture_scenario(
    scenario: Scenario,
    out: Path,
    *,
    name: str,
    description: str = "",
    gzip_output: bool = False,
    keep_alive_interval_secs: int = 30,
    broker_config: dict[str, int | bool | str] | None = None,
    settle: float = 0.5,
    **kw: Any,
) -> tuple[dict[str, Any], CaptureSummary]:
    """Run ``scenario(broker.url, logger=..., **kw)`` under tcpdump; write ``out``.

    ``out`` is the capture path (``.pcap``, or ``.pcap.gz`` with ``gzip_output``).
    ``settle`` seconds pass between the scenario's end (client closed) and stopping
    tcpdump.  Returns the scenario's manifest plus ``name``, ``description``,
    ``broker_port``, ``versions``, ``broker`` (config, WARN/ERROR log lines),
    ``client_log`` (the client's warnings and errors) and ``capture`` (file, filter,
    tcpdump statistics, and what ``summarize_capture`` read back), and the summary.
    """
    handler = ClientLogRecorder()
    logger = logging.getLogger(f"pulsar.capture.{name}")
    logger.propagate = False
    logger.setLevel(logging.WARNING)  # the client only forwards records at this level and up
    logger.addHandler(handler)
    tmp = Path(tempfile.mkdtemp(prefix=f"capture-{name}-"))
    try:
        with PulsarLite(
            keep_alive_interval_secs=keep_alive_interval_secs, extra_config=broker_config
        ) as broker:
            raw = tmp / f"{name}.pcap"
            bpf = f"tcp port {broker.port}"
            with Tcpdump(raw, bpf) as dump:
                time.sleep(0.1)
                manifest = scenario(broker.url, logger=logger, **kw)
                time.sleep(settle)
            broker_log = broker.log_text()
        summary = summarize_capture(raw, broker.port)
        if dump.packets_dropped_by_kernel:
            raise RuntimeError(f"{name}: tcpdump dropped {dump.packets_dropped_by_kernel} packets")
        if not summary.ok:
            raise RuntimeError(f"{name}: capture check failed: {summary}")
        if gzip_output:
            staged = tmp / f"{name}.pcap.gz"
            with (
                open(raw, "rb") as src,
                open(staged, "wb") as dst,
                gzip.GzipFile(filename="", mode="wb", fileobj=dst, mtime=0) as gz,
            ):
                shutil.copyfileobj(src, gz, 1 << 20)
        else:
            staged = raw
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        shutil.copyfile(staged, out)  # a new file of ours (tcpdump runs as its own user)
    finally:
        logger.removeHandler(handler)
        shutil.rmtree(tmp, ignore_errors=True)

    manifest = {
        "name": name,
        "description": description,
        "broker_port": broker.port,
        "service_url": broker.url,
        "versions": {
            "pulsar-client": _version("pulsar-client"),
            "pulsar-lite": _version("pulsar-lite"),
            "tcpdump": _tcpdump_version(dump.binary),
        },
        **manifest,
        "broker": {
            "implementation": "pulsar-lite",
            "config_toml": broker.config_text(),
            "warnings": _broker_lines(broker_log),
        },
        "client_log": [r for r in handler.records if r["level"] in ("WARNING", "ERROR")],
        "capture": {
            "file": out.name,
            "gzip": gzip_output,
            "interface": "lo",
            "filter": bpf,
            "command": shlex.join(["tcpdump", *dump.argv[1:-3], "-w", f"{name}.pcap", bpf]),
            "tcpdump_packets_captured": dump.packets_captured,
            "tcpdump_packets_dropped_by_kernel": dump.packets_dropped_by_kernel,
            "packets": summary.packets,
            "tcp_connections": summary.connections,
            "link_types": sorted(summary.link_types),
            "first_client_payload_is_connect": summary.first_client_payload_is_connect,
        },
    }
    return manifest, summary
