"""Real Pulsar traffic on loopback, captured by tcpdump into pcap files.

Input:  a scenario from tests/support/peers.py (a function that drives the official
        client against a service URL and returns its manifest), its keyword
        arguments and the broker: pulsar-lite's settings, or a broker already running
        (an ApacheBroker of tests/support/apache/broker.py).
Output: a pcap file (optionally gzip-compressed) of every packet to or from the
        broker port, and the scenario's manifest extended with the capture's and the
        broker's details; ``summarize_capture`` reads a capture back to check it
        (records by ``dissector.capture``, layers by scapy, frames by FrameDecoder).
Rule:   one fresh pulsar-lite broker per capture on a free 127.0.0.1 port, unless a
        running broker is given (its port then carries only this scenario's traffic while
        it runs); tcpdump (``-i lo -U -B 65536 -s 0``, filter ``tcp port BROKERPORT``)
        is listening before the client starts and is stopped with SIGINT once the file
        holds the end of every connection (``wait_closed``), then waited for, so that the
        file is complete; the client talks to the broker directly (no proxy).
        Nothing is written to the output path unless the run and the capture succeed
        (no packet dropped by the kernel, a CONNECT first on every connection).
"""

from __future__ import annotations

import contextlib
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from dissector import Direction, Frame, FrameDecoder
from dissector.capture import open_capture
from tests.support.peers import ClientLogRecorder, LoggedProcess, PulsarLite, Scenario

__all__ = [
    "TCPDUMP_MISSING",
    "CaptureSummary",
    "RunningBroker",
    "Tcpdump",
    "TcpdumpMissing",
    "capture_scenario",
    "summarize_capture",
    "tcpdump_path",
    "wait_closed",
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


class Tcpdump(LoggedProcess):
    """A tcpdump process writing ``path``; a context manager.

    Entering returns once tcpdump reports ``listening on``; leaving sends SIGINT,
    waits for it to exit (the file is then complete) and parses its statistics into
    ``packets_captured`` / ``packets_dropped_by_kernel``.
    """

    name = "tcpdump"
    stop_signal = signal.SIGINT
    stop_timeout = 10.0

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
        self._stderr_path = path.with_name(path.name + ".tcpdump.log")

    def start(self) -> Self:
        self._launch(
            self.argv, self._stderr_path, b"listening on", self.startup_timeout, merge_stdout=False
        )
        return self

    def stop(self) -> None:
        """SIGINT, wait for exit (escalating to kill), then read the statistics."""
        self._end_process()
        if self._stderr_path.exists():
            self.stderr_text = self._stderr_path.read_text(errors="replace")
            self._stderr_path.unlink()
        for attr, pattern in (
            ("packets_captured", r"(\d+) packets? captured"),
            ("packets_dropped_by_kernel", r"(\d+) packets? dropped by kernel"),
        ):
            match = re.search(pattern, self.stderr_text)
            setattr(self, attr, int(match.group(1)) if match else None)


# --------------------------------------------------------------------------- reading back


def _all_closed(path: Path, ports: tuple[int, ...]) -> bool:
    """Whether every TCP connection on `ports` that the file (as written so far) saw open has
    ended: a FIN from both sides, or an RST. A record still being written ends the read."""
    from scapy.config import conf
    from scapy.layers import l2  # noqa: F401  (registers the link-layer classes)
    from scapy.layers.inet import TCP

    opened: set[frozenset[int]] = set()
    fins: dict[frozenset[int], set[int]] = {}
    reset: set[frozenset[int]] = set()
    try:
        with open_capture(path) as reader:
            for record in reader:
                pkt = conf.l2types[record.linktype](record.data)
                if TCP not in pkt or not {pkt[TCP].sport, pkt[TCP].dport} & set(ports):
                    continue
                tcp = pkt[TCP]
                conn = frozenset({tcp.sport, tcp.dport})  # loopback: its two ports name it
                flags = int(tcp.flags)
                if flags & 0x02:
                    opened.add(conn)
                if flags & 0x01:
                    fins.setdefault(conn, set()).add(tcp.sport)
                if flags & 0x04:
                    reset.add(conn)
    except Exception:  # the file as tcpdump is still writing it: look again later
        return False
    return all(c in reset or len(fins.get(c, ())) == 2 for c in opened)


def wait_closed(path: Path, ports: tuple[int, ...], timeout: float = 10.0) -> bool:
    """Wait for an event, not a time: until tcpdump's file `path` (written packet by packet,
    -U) holds the end of every connection on `ports` it saw open, so stopping tcpdump then
    loses no FIN. `timeout` only bounds a scenario whose connections never end (a paused
    broker): nothing is asserted, the caller stops tcpdump either way."""
    deadline = time.monotonic() + timeout
    while not _all_closed(path, ports):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@dataclass
class CaptureSummary:
    """What a capture holds, read back with the dissector's reader, scapy and FrameDecoder.

    Only TCP on ``port`` counts, except ``packets`` (every record of the file).
    """

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


def _streams(path: Path, port: int, summary: CaptureSummary) -> dict[tuple[Any, ...], bytes]:
    """Reassemble each TCP direction on ``port`` (loopback: no loss, dedupe by seq).

    Records come from ``dissector.capture.open_capture`` (whole: loopback frames reach
    65549 bytes, more than scapy's readers keep); their layers are decoded by scapy.
    """
    from scapy.config import conf
    from scapy.layers import l2  # noqa: F401  (registers the link-layer classes)
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6

    segments: dict[tuple[Any, ...], dict[int, bytes]] = {}
    isn: dict[tuple[Any, ...], int] = {}
    with open_capture(path) as reader:
        for record in reader:
            summary.packets += 1
            summary.link_types.add(record.linktype)
            pkt = conf.l2types[record.linktype](record.data)
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
                raise ValueError(f"packet {record.number}: TCP payload truncated in {path}")
            if data:
                start = isn.setdefault(key, tcp.seq)
                offset = (tcp.seq - start) & 0xFFFFFFFF
                segments.setdefault(key, {})[offset] = data
        if reader.issues:
            raise ValueError(f"{path}: {reader.issues[0]}")
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


def _frames(stream: bytes, direction: Direction) -> list[Frame]:
    """Every frame of a reassembled stream (a torn last one included), by FrameDecoder."""
    decoder = FrameDecoder(direction=direction)
    return [e for e in decoder.feed(stream) + decoder.close() if isinstance(e, Frame)]


def summarize_capture(path: Path, port: int) -> CaptureSummary:
    """Read ``path`` (pcap, plain or gzip) back and summarise the traffic on ``port``.

    Checks that every connection to the broker starts with a CONNECT frame
    (at stream offset 0, without payload) and counts the commands of each direction.
    """
    summary = CaptureSummary()
    for key, stream in sorted(_streams(path, port, summary).items()):
        to_broker = key[3] == port
        direction = Direction.CLIENT_TO_BROKER if to_broker else Direction.BROKER_TO_CLIENT
        frames = _frames(stream, direction)
        if to_broker:
            summary.client_bytes += len(stream)
            first = frames[0] if frames else None
            summary.first_client_payload_is_connect.append(
                first is not None
                and first.stream_offset == 0
                and first.command_name == "CONNECT"
                and first.total_size == first.command_size + 4
            )
        else:
            summary.broker_bytes += len(stream)
        counts = summary.commands.setdefault(direction.value, {})
        for frame in frames:
            counts[frame.command_name] = counts.get(frame.command_name, 0) + 1
    return summary


# --------------------------------------------------------------------------- one capture


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _broker_lines(log: str, levels: tuple[str, ...] = ("WARN", "ERROR")) -> list[str]:
    return [line for line in log.splitlines() if any(f" {lvl} " in line for lvl in levels)]


class RunningBroker(Protocol):
    """A broker already started (PulsarLite, ApacheBroker): what a capture needs of it."""

    name: str  # its implementation: "pulsar-lite", "apache-pulsar"
    port: int
    url: str

    def config_text(self) -> str: ...

    def log_text(self) -> str: ...


def _broker_details(broker: RunningBroker, log: str) -> tuple[str | None, dict[str, Any]]:
    """(the broker's version, the manifest's ``broker`` entry), its config by its own name."""
    if isinstance(broker, PulsarLite):
        config = {"config_toml": broker.config_text()}
        version = _version("pulsar-lite")
    else:
        config = {"standalone_conf": broker.config_text()}
        version = getattr(broker, "version", None)
    entry = {"implementation": broker.name, **config, "warnings": _broker_lines(log)}
    return version, entry


def capture_scenario(
    scenario: Scenario,
    out: Path,
    *,
    name: str,
    description: str = "",
    gzip_output: bool = False,
    keep_alive_interval_secs: int = 30,
    broker_config: dict[str, int | bool | str] | None = None,
    broker: RunningBroker | None = None,
    settle: float = 0.5,
    **kw: Any,
) -> tuple[dict[str, Any], CaptureSummary]:
    """Run ``scenario(broker.url, logger=..., **kw)`` under tcpdump; write ``out``.

    ``out`` is the capture path (``.pcap``, or ``.pcap.gz`` with ``gzip_output``).
    ``broker`` is a running broker to use; without it a fresh pulsar-lite is started
    with ``keep_alive_interval_secs`` and ``broker_config`` (which then must not be
    given).  Once the scenario has ended (client closed) and the file holds the end of
    its connections, ``settle`` more seconds pass before tcpdump is stopped.  Returns
    the scenario's manifest plus ``name``, ``description``, ``broker_port``,
    ``versions`` (the broker's under its implementation's name), ``broker``
    (implementation, config, WARN/ERROR lines it logged during the scenario),
    ``client_log`` (the client's warnings and errors) and ``capture`` (file, filter,
    tcpdump statistics, and what ``summarize_capture`` read back), and the summary.
    """
    if broker is not None and (broker_config is not None or keep_alive_interval_secs != 30):
        raise ValueError("a running broker has its own settings: give no pulsar-lite ones")
    handler = ClientLogRecorder()
    logger = logging.getLogger(f"pulsar.capture.{name}")
    logger.propagate = False
    logger.setLevel(logging.WARNING)  # the client only forwards records at this level and up
    logger.addHandler(handler)
    tmp = Path(tempfile.mkdtemp(prefix=f"capture-{name}-"))
    try:
        with contextlib.ExitStack() as stack:
            if broker is None:
                broker = stack.enter_context(
                    PulsarLite(
                        keep_alive_interval_secs=keep_alive_interval_secs,
                        extra_config=broker_config,
                    )
                )
            log_start = len(broker.log_text())
            raw = tmp / f"{name}.pcap"
            bpf = f"tcp port {broker.port}"
            with Tcpdump(raw, bpf) as dump:
                time.sleep(0.1)
                manifest = scenario(broker.url, logger=logger, **kw)
                wait_closed(raw, (broker.port,), timeout=60.0)
                time.sleep(settle)
            broker_version, broker_entry = _broker_details(broker, broker.log_text()[log_start:])
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
            broker.name: broker_version,
            "tcpdump": _tcpdump_version(dump.binary),
        },
        **manifest,
        "broker": broker_entry,
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
