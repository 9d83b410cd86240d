"""Real Pulsar traffic over TLS on loopback: a capture, its NSS key log and the peers' record.

Input:  an output directory and the highest TLS version the terminator may speak.
Output: ``TlsRecording``: a pcap of the TLS leg only (client <-> terminator), the key log
        the terminator's ``ssl`` context wrote, the generated PKI, the client's manifest
        (payload hashes of every message sent and received), what the terminator's ``ssl``
        objects reported per connection (version, cipher, SNI, ALPN) and the plaintext it
        forwarded.  ``tshark_tls_streams`` decrypts the capture independently with tshark.
Rule:   pulsar-lite on a free port (or a running broker given: Apache's, its plaintext
        port) behind ``RecordingProxy`` with its TLS option (the terminator) on
        127.0.0.1:6651 if it can bind it, else a free port; the official client
        connects to ``pulsar+ssl://localhost:PORT`` (SNI "localhost") trusting the test CA;
        tcpdump captures ``tcp port PORT`` only, so the terminator->broker plaintext leg
        is never in the file.  The scenario is ``run_compression_scenario`` (batching) once
        per compression codec, each with its own client and so its own TLS session.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from xml.etree import ElementTree

from fuzz.tls_pki import TestPki, make_pki, server_context
from tests.support.capture import Tcpdump
from tests.support.peers import (
    ClientLogRecorder,
    PulsarLite,
    RecordedConnection,
    RecordingProxy,
    run_compression_scenario,
)
from tests.support.tls_terminator import TlsInfo

__all__ = [
    "PREFERRED_TLS_PORT",
    "TlsRecording",
    "parse_keylog",
    "record_tls",
    "run_tls_scenario",
    "tls_proxy",
    "tshark_path",
    "tshark_shown",
    "tshark_tls_streams",
]

PREFERRED_TLS_PORT = 6651


class HasPort(Protocol):
    """A running broker (its plaintext port)."""

    port: int


TSHARK_MISSING = "tshark is required (apt-get install -y tshark; `make testdeps` does it)"


def tls_proxy(target_port: int, context: ssl.SSLContext, port: int | None) -> RecordingProxy:
    """The terminator listening on ``port``, or on 6651 (Pulsar's TLS port) if it is free
    (else on a free port); its listener is bound on return, nothing accepted yet."""
    candidates = [port] if port is not None else [PREFERRED_TLS_PORT, 0]
    for n, candidate in enumerate(candidates, 1):
        try:
            return RecordingProxy(target_port, tls=context, port=candidate)
        except OSError:
            if n == len(candidates):
                raise
    raise AssertionError("unreachable")


def run_tls_scenario(
    url: str,
    *,
    client_options: dict[str, Any],
    compressions: tuple[str, ...] = ("LZ4", "ZLib"),
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """``run_compression_scenario`` (batched, compressed) once per codec, one client each.

    Every fourth message is sent synchronously and the three before it asynchronously,
    so batches hold several messages.  The manifest lists each run under ``runs`` and
    concatenates their ``sent`` and ``received`` entries.
    """
    runs = [
        run_compression_scenario(
            url,
            compression=codec,
            messages=12,
            async_every=4,
            payload_size=1500,
            client_options=client_options,
            logger=logger,
        )
        for codec in compressions
    ]
    return {
        "scenario": "run_tls_scenario",
        "runs": runs,
        "compressions": [r["compression"] for r in runs],
        "sent": [entry for r in runs for entry in r["sent"]],
        "received": [entry for r in runs for entry in r["received"]],
    }


@dataclass
class TlsRecording:
    """One TLS capture with everything a test compares it with."""

    capture: Path
    keylog: Path
    maximum_version: ssl.TLSVersion | None  # the terminator's cap (None: TLS 1.3)
    port: int  # the TLS port (the terminator's)
    broker_port: int  # the broker's (plaintext, not in the capture)
    pki: TestPki
    manifest: dict[str, Any]  # the client's own record (see ClientRecorder)
    connections: list[RecordedConnection]  # the terminator's, with plaintext and .tls
    client_log: list[dict[str, Any]]
    packets_captured: int | None

    @property
    def sessions(self) -> list[TlsInfo]:
        """What the terminator's ``ssl`` objects reported, one per connection."""
        return [c.tls for c in self.connections if c.tls is not None]


def record_tls(
    out_dir: Path,
    *,
    maximum_version: ssl.TLSVersion | None = None,
    ciphers: str | None = None,
    port: int | None = None,
    settle: float = 0.5,
    broker: HasPort | None = None,
) -> TlsRecording:
    """Capture ``run_tls_scenario`` through the TLS terminator into ``out_dir``.

    Writes ``out_dir/tls.pcap``, ``out_dir/keylog.txt`` and the PKI files.  Raises
    RuntimeError when tcpdump dropped packets or the terminator saw no handshake.
    ``ciphers``: the terminator's OpenSSL cipher list (TLS 1.2 suites), e.g. to force
    ChaCha20-Poly1305 or AES-CBC.  ``broker``: a running broker to put the terminator in
    front of (the session's Apache broker, its plaintext port), instead of a pulsar-lite
    started for the recording.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    pki = make_pki(out_dir / "pki")
    keylog = out_dir / "keylog.txt"
    keylog.write_bytes(b"")  # emptied, not replaced: a live reader may already watch it
    context = server_context(pki, keylog, maximum_version=maximum_version, ciphers=ciphers)
    handler = ClientLogRecorder()
    logger = logging.getLogger(f"pulsar.tls.{out_dir.name}")
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    tmp = Path(tempfile.mkdtemp(prefix="capture-tls-"))
    capture = out_dir / "tls.pcap"
    try:
        with contextlib.ExitStack() as stack:
            target = (
                broker.port
                if broker is not None
                else stack.enter_context(PulsarLite(keep_alive_interval_secs=30)).port
            )
            raw = tmp / "tls.pcap"
            proxy = stack.enter_context(tls_proxy(target, context, port))
            dump = stack.enter_context(Tcpdump(raw, f"tcp port {proxy.port}"))
            time.sleep(0.1)
            options = {"tls_trust_certs_file_path": str(pki.ca_path)}
            manifest = run_tls_scenario(proxy.url, client_options=options, logger=logger)
            time.sleep(settle)
            proxy.close()  # while tcpdump still runs: every FIN is in the capture
        if dump.packets_dropped_by_kernel:
            raise RuntimeError(f"tcpdump dropped {dump.packets_dropped_by_kernel} packets")
        capture.unlink(missing_ok=True)
        shutil.copyfile(raw, capture)  # a file of ours (tcpdump may run as its own user)
    finally:
        logger.removeHandler(handler)
        shutil.rmtree(tmp, ignore_errors=True)
    recording = TlsRecording(
        capture=capture,
        keylog=keylog,
        maximum_version=maximum_version,
        port=proxy.port,
        broker_port=target,
        pki=pki,
        manifest=manifest,
        connections=list(proxy.connections),
        client_log=handler.records,
        packets_captured=dump.packets_captured,
    )
    if not recording.sessions or not all(s.version for s in recording.sessions):
        raise RuntimeError(f"no completed TLS handshake at the terminator: {recording.sessions}")
    return recording


# --------------------------------------------------------------------------- key log


def parse_keylog(path: Path) -> dict[str, list[tuple[str, str]]]:
    """NSS key log lines by label: ``{label: [(client_random_hex, secret_hex), ...]}``."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith("#"):
            out.setdefault(parts[0], []).append((parts[1].lower(), parts[2].lower()))
    return out


# --------------------------------------------------------------------------- tshark


def tshark_path() -> str:
    found = shutil.which("tshark")
    if found is None:
        raise FileNotFoundError(TSHARK_MISSING)
    return found


def _tshark(*args: str) -> str:
    proc = subprocess.run(
        [tshark_path(), *args], capture_output=True, text=True, check=False, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tshark {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def tshark_tls_streams(
    capture: Path, keylog: Path | None, port: int
) -> dict[int, tuple[bytes, bytes]]:
    """tshark's decrypted TLS byte streams: ``{tcp.stream: (client->server, server->client)}``.

    ``tshark -o tls.keylog_file:KEYLOG -d tcp.port==PORT,tls -z follow,tls,raw,N`` for
    every TCP stream N of the capture, in one run; keys in stream order.  Without a key
    log (or a usable key) tshark gives empty streams.
    """
    opts = ["-d", f"tcp.port=={port},tls"]
    listing = _tshark("-r", str(capture), "-T", "fields", "-e", "tcp.stream")
    streams = sorted({int(s) for s in listing.split() if s.strip()})
    if keylog is not None:
        opts += ["-o", f"tls.keylog_file:{keylog}"]
    follows = [arg for n in streams for arg in ("-z", f"follow,tls,raw,{n}")]
    text = _tshark("-r", str(capture), *opts, "-q", *follows)
    out: dict[int, tuple[bytes, bytes]] = {}
    for block in text.split("Follow: tls,raw")[1:]:
        match = re.search(r"^Filter: tcp\.stream eq (\d+)$", block, re.MULTILINE)
        if match is None:
            raise ValueError(f"tshark follow output without its stream number: {block[:200]!r}")
        out[int(match.group(1))] = _follow_raw(block, port)
    if sorted(out) != streams:
        raise ValueError(f"tshark followed streams {sorted(out)}, the capture has {streams}")
    return dict(sorted(out.items()))


def _follow_raw(text: str, server_port: int) -> tuple[bytes, bytes]:
    """(client->server, server->client) bytes of ``-z follow,...,raw`` output.

    Node 0's data is unindented, node 1's indented with a tab; which node is the server
    is read from the ``Node 0: HOST:PORT`` line (tshark 4.0 names the server there when
    a TLS stream's first decrypted data came from it, and leaves node 1 as ``:0``).
    """
    nodes: tuple[bytearray, bytearray] = (bytearray(), bytearray())
    node0_is_server = False
    body = False
    for line in text.splitlines():
        if line.startswith("Node 0:"):
            node0_is_server = line.rsplit(":", 1)[-1].strip() == str(server_port)
            continue
        if line.startswith("Node 1:"):
            body = True
            continue
        if not body or line.startswith("===") or not line.strip():
            continue
        with contextlib.suppress(ValueError):
            nodes[line.startswith("\t")].extend(bytes.fromhex(line.strip()))
    node0, node1 = bytes(nodes[0]), bytes(nodes[1])
    return (node1, node0) if node0_is_server else (node0, node1)


def tshark_shown(capture: Path, port: int, display_filter: str, field: str) -> list[str]:
    """How tshark shows ``field`` (its ``showname`` in PDML, e.g. ``Cipher Suite: NAME
    (0xc030)``) in every packet matching ``display_filter``; TLS on ``port``."""
    args = ["-r", str(capture), "-d", f"tcp.port=={port},tls", "-Y", display_filter, "-T", "pdml"]
    root = ElementTree.fromstring(_tshark(*args))
    return [f.get("showname", "") for f in root.iter("field") if f.get("name") == field]
