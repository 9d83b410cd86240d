"""Real Pulsar peers on loopback, recorded through a transparent TCP proxy.

Input:  a scenario function that drives the official ``pulsar`` Python client
        (pulsar-client) against a service URL, plus its keyword arguments.
Output: the exact bytes of every TCP connection the client opened, per direction
        (client->broker and broker->client, with a time.time() stamp per recv), and
        a JSON-serialisable manifest of what the client itself reported (topic,
        payload hashes, keys, properties, message ids, ...).
Rule:   the broker is pulsar-lite (a Rust broker shipped in the ``pulsar_lite``
        wheel), started fresh per recording on 127.0.0.1 with metrics disabled and
        a short keep-alive interval; the client is only ever given the proxy URL.
        pulsar-lite has no advertised-address setting: its LOOKUP_RESPONSE always
        names its own listen address (pulsar://127.0.0.1:BROKERPORT), and the client
        would then open a second connection straight to the broker, bypassing the
        proxy.  So the proxy rewrites LOOKUP_RESPONSE frames (broker->client) on the
        fly, decoding and re-encoding them with the dissector's own wire modules: by
        default it replaces brokerServiceUrl with the proxy URL (the client
        then reuses its single connection, as with a real broker whose advertised
        address is the service URL); ``lookup_rewrite="proxy_flag"`` instead sets
        proxy_through_service_url=true (the client opens a second connection to the
        proxy whose CONNECT carries proxy_to_broker_url).  Recorded broker->client
        bytes are the bytes delivered to the client, i.e. after the rewrite.
        With ``tls`` (a server ``ssl.SSLContext``) the proxy is also a TLS terminator:
        the client connects with ``pulsar+ssl://HOST:PORT``, the proxy decrypts and
        forwards plaintext to the broker, the recorded bytes are the plaintext, and
        LOOKUP answers name the TLS URL (brokerServiceUrl and brokerServiceUrlTls).
        Scenarios (``run_*``) only need a service URL (and, for TLS, client options):
        they also run straight against the broker (tests/support/capture.py does so
        under tcpdump).  They drive the
        client through ``ClientRecorder``, which builds every manifest the same way.
        Child processes (the broker here, tcpdump in capture.py) are ``LoggedProcess``es.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from dissector.pulsar.encoder import encode_frame
from dissector.pulsar.sections import HEADER, Reject, decode_command
from dissector.pulsar.wire import COMMAND_TYPES
from tests.support.tls_terminator import TlsInfo, TlsSession, record_sni

__all__ = [
    "ClientLogRecorder",
    "ClientRecorder",
    "LoggedProcess",
    "PulsarLite",
    "RecordedConnection",
    "RecordingProxy",
    "Scenario",
    "find_pulsar_lite_binary",
    "free_port",
    "pattern_payload",
    "record",
    "run_acks_scenario",
    "run_batching_scenario",
    "run_chunked_scenario",
    "run_compression_scenario",
    "run_large_message_scenario",
    "run_multi_producer_scenario",
    "run_partitioned_scenario",
    "run_scenario",
    "run_seek_scenario",
]

LOOPBACK = "127.0.0.1"

Scenario = Callable[..., dict[str, Any]]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def find_pulsar_lite_binary() -> str:
    """Locate the pulsar-lite broker binary (the one shipped in the wheel first)."""
    spec = importlib.util.find_spec("pulsar_lite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "pulsar-lite"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    env = os.environ.get("PULSAR_LITE_BINARY")
    if env and os.path.isfile(env):
        return env
    on_path = shutil.which("pulsar-lite")
    if on_path:
        return on_path
    raise FileNotFoundError(
        "pulsar-lite binary not found: install the pulsar-lite wheel or set PULSAR_LITE_BINARY"
    )


# --------------------------------------------------------------------------- processes


class LoggedProcess:
    """A child process of the harness with its output in a log file; a context manager.

    Subclasses implement ``start`` (entering the ``with`` block calls it) with
    ``_launch``, which returns once a marker shows in the log; ``stop`` (also run on
    leaving the block) sends ``stop_signal``, waits ``stop_timeout`` seconds, then kills.
    """

    name = "process"
    stop_signal = signal.SIGTERM
    stop_timeout = 5.0
    _proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def _launch(
        self,
        argv: list[str],
        log_path: Path,
        ready: bytes,
        timeout: float,
        *,
        merge_stdout: bool = True,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> bytes:
        """Start ``argv`` writing ``log_path`` (stderr, and stdout with ``merge_stdout``).

        env: the child's environment (default: ours).
        Returns the log once it holds ``ready`` and ``_check_ready`` accepts it; if the
        child exits first, ``timeout`` passes or the check fails, the process is stopped
        (``stop``) and RuntimeError raised.
        """
        with open(log_path, "wb") as log:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log if merge_stdout else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if merge_stdout else log,
                cwd=cwd,
                env=env,
            )
        try:
            text = self._wait_for(log_path, ready, timeout)
            self._check_ready(text)
        except BaseException:
            self.stop()
            raise
        return text

    def _wait_for(self, log_path: Path, ready: bytes, timeout: float) -> bytes:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while ready not in (log := log_path.read_bytes()):
            code = self._proc.poll()
            if code is not None or time.monotonic() > deadline:
                how = f"exited with code {code}" if code is not None else f"within {timeout}s"
                raise RuntimeError(
                    f"{self.name} did not log {ready.decode()!r} ({how}); log tail:\n{_tail(log)}"
                )
            time.sleep(0.02)
        return log

    def _check_ready(self, log: bytes) -> None:
        """Raise RuntimeError if the log of a started child shows it is unusable."""

    def _end_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(self.stop_signal)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def stop(self) -> None:
        """End the process (subclasses add their own cleanup)."""
        self._end_process()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _tail(log: bytes | str, n: int = 40) -> str:
    text = log.decode(errors="replace") if isinstance(log, bytes) else log
    return "\n".join(text.splitlines()[-n:])


class PulsarLite(LoggedProcess):
    """A pulsar-lite broker process on 127.0.0.1 with a fresh database.

    Use as a context manager; ``.port`` and ``.url`` are valid inside it.
    ``extra_config`` adds top-level TOML keys (ints, bools, strings), e.g.
    ``{"max_message_size_bytes": 8 << 20, "default_partitions": 0}``.
    """

    name = "pulsar-lite"

    def __init__(
        self,
        *,
        keep_alive_interval_secs: int = 2,
        log_level: str = "info",
        extra_config: dict[str, int | bool | str] | None = None,
        startup_timeout: float = 15.0,
        port: int | None = None,
    ) -> None:
        self.keep_alive_interval_secs = keep_alive_interval_secs
        self.log_level = log_level
        self.extra_config = dict(extra_config or {})
        self.startup_timeout = startup_timeout
        self.port: int = port or free_port()
        self.url: str = f"pulsar://{LOOPBACK}:{self.port}"
        self.binary: str = find_pulsar_lite_binary()
        self.workdir: Path | None = None
        self.log_path: Path | None = None
        self._final_log = ""

    # -- config -------------------------------------------------------------
    def config_text(self) -> str:
        """The TOML text handed to ``--config``."""
        lines = [f"keep_alive_interval_secs = {int(self.keep_alive_interval_secs)}"]
        for key, value in self.extra_config.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines += ["", "[metrics]", "enabled = false", ""]
        return "\n".join(lines)

    def log_text(self) -> str:
        """The broker log so far (kept in memory after ``stop``)."""
        if self.log_path is not None and self.log_path.exists():
            return self.log_path.read_text(errors="replace")
        return self._final_log

    def log_tail(self, n: int = 40) -> str:
        """Last ``n`` lines of the broker log (empty if none yet)."""
        return _tail(self.log_text(), n)

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> Self:
        self.workdir = Path(tempfile.mkdtemp(prefix="pulsar-lite-"))
        config = self.workdir / "pulsar-lite.toml"
        config.write_text(self.config_text())
        self.log_path = self.workdir / "broker.log"
        argv = [self.binary, "--config", str(config), "--addr", f"{LOOPBACK}:{self.port}"]
        argv += ["--db-path", str(self.workdir / "db"), "--log-level", self.log_level]
        self._launch(
            argv, self.log_path, b"Server listening", self.startup_timeout, cwd=self.workdir
        )
        return self

    def _check_ready(self, log: bytes) -> None:
        # pulsar-lite falls back to ALL defaults (metrics on 0.0.0.0:8080, 30 s
        # keep-alive) when the config file fails to parse, logging nothing.
        keep_alive = f"Keep-alive interval: {int(self.keep_alive_interval_secs)}s".encode()
        if keep_alive not in log or b"Metrics endpoint listening" in log:
            raise RuntimeError(
                "pulsar-lite ignored its config file (bad key type?); config:\n"
                f"{self.config_text()}\nlog tail:\n{self.log_tail()}"
            )

    def stop(self) -> None:
        """Terminate (then kill) the broker and delete its temp directory (log kept)."""
        self._end_process()
        if self.workdir is not None:
            self._final_log = self.log_text()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = self.log_path = None


def _toml_value(value: int | bool | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------- proxy


@dataclass
class RecordedConnection:
    """Bytes of one proxied TCP connection, per direction, in arrival order.

    ``c2b_chunks`` / ``b2c_chunks`` hold ``(time.time(), bytes)`` for every recv;
    chunk boundaries are arbitrary TCP segmentation, not frame boundaries.
    ``tls`` is what the terminator's ``ssl`` object reported (TLS proxies only).
    """

    index: int
    client_port: int
    opened_at: float
    closed_at: float | None = None
    lookup_rewrites: int = 0
    c2b_chunks: list[tuple[float, bytes]] = field(default_factory=list)
    b2c_chunks: list[tuple[float, bytes]] = field(default_factory=list)
    tls: TlsInfo | None = None

    @property
    def client_to_broker(self) -> bytes:
        return b"".join(chunk for _, chunk in self.c2b_chunks)

    @property
    def broker_to_client(self) -> bytes:
        return b"".join(chunk for _, chunk in self.b2c_chunks)


class RecordingProxy:
    """Transparent TCP proxy 127.0.0.1:port -> target, recording both directions.

    One thread accepts; each connection gets one thread per direction.  An EOF
    on one side is forwarded as a half-close (``shutdown(SHUT_WR)``) to the other.
    On exit, connections still open after ``drain_timeout`` are shut down.
    ``.connections`` lists connections in accept order.

    ``lookup_rewrite``: ``"url"`` (default) points LOOKUP_RESPONSE brokerServiceUrl
    at this proxy, ``"proxy_flag"`` sets proxy_through_service_url, ``None`` is a
    pure byte pipe (the client will then bypass the proxy after its lookups).

    ``tls``: terminate TLS with this server context (the proxy installs an SNI
    recorder as its ``sni_callback``); ``.url`` is then ``pulsar+ssl://tls_host:port``.
    ``port``: listen there (default: a free port).
    ``rewriter_class``: the broker->client filter (a subclass of ``_LookupRewriter`` may
    alter other frames too: tests/support/apache/corrupt.py).
    """

    def __init__(
        self,
        target_port: int,
        *,
        target_host: str = LOOPBACK,
        drain_timeout: float = 2.0,
        lookup_rewrite: str | None = "url",
        tls: ssl.SSLContext | None = None,
        tls_host: str = "localhost",
        port: int = 0,
    ) -> None:
        if lookup_rewrite not in ("url", "proxy_flag", None):
            raise ValueError(
                f"lookup_rewrite must be 'url', 'proxy_flag' or None: {lookup_rewrite!r}"
            )
        self.target = (target_host, target_port)
        self.rewriter_class: type[_LookupRewriter] = _LookupRewriter
        self.drain_timeout = drain_timeout
        self.lookup_rewrite = lookup_rewrite
        self.connections: list[RecordedConnection] = []
        self.tls = tls
        if tls is not None:
            record_sni(tls)
        self._listener = socket.create_server((LOOPBACK, port))
        self.port: int = int(self._listener.getsockname()[1])
        self.url: str = (
            f"pulsar+ssl://{tls_host}:{self.port}" if tls else f"pulsar://{LOOPBACK}:{self.port}"
        )
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []
        self._pumps: list[threading.Thread] = []
        self._acceptor = threading.Thread(
            target=self._accept_loop, name="proxy-accept", daemon=True
        )

    def __enter__(self) -> RecordingProxy:
        self._listener.settimeout(0.05)
        self._acceptor.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                conn = RecordedConnection(
                    index=len(self.connections), client_port=int(addr[1]), opened_at=time.time()
                )
                self.connections.append(conn)
                self._sockets += [client, upstream]
            done = threading.Barrier(2, action=_closer(conn))
            rewriter = (
                self.rewriter_class(conn, self.url, self.lookup_rewrite, tls=self.tls is not None)
                if self.lookup_rewrite
                else None
            )
            near: socket.socket | TlsSession = client
            if self.tls is not None:
                near = TlsSession(client, self.tls)
                conn.tls = near.info  # filled in when the handshake completes
            for src, dst, chunks, name, rw in (
                (near, upstream, conn.c2b_chunks, "c2b", None),
                (upstream, near, conn.b2c_chunks, "b2c", rewriter),
            ):
                t = threading.Thread(
                    target=_pump,
                    args=(src, dst, chunks, done, rw),
                    name=f"proxy-{conn.index}-{name}",
                    daemon=True,
                )
                with self._lock:
                    self._pumps.append(t)
                t.start()

    def close(self) -> None:
        """Stop accepting, let open connections drain, then close everything."""
        self._stopping.set()
        self._acceptor.join(timeout=2)
        self._listener.close()
        deadline = time.monotonic() + self.drain_timeout
        with self._lock:
            pumps = list(self._pumps)
        for t in pumps:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:  # unblock pumps of connections the client left open
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in pumps:
            t.join(timeout=2)
        for s in sockets:
            s.close()


def _closer(conn: RecordedConnection) -> Callable[[], None]:
    def action() -> None:  # runs once both directions have finished
        conn.closed_at = time.time()

    return action


def _pump(
    src: socket.socket | TlsSession,
    dst: socket.socket | TlsSession,
    chunks: list[tuple[float, bytes]],
    done: threading.Barrier,
    rewriter: _LookupRewriter | None = None,
) -> None:
    try:
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                break
            if not data:
                break
            now = time.time()
            if rewriter is not None:
                data = rewriter.feed(data)
                if not data:
                    continue
            chunks.append((now, data))
            try:
                dst.sendall(data)
            except OSError:
                break
        if rewriter is not None and rewriter.pending:
            tail = rewriter.flush()  # truncated last frame: pass it on unchanged
            chunks.append((time.time(), tail))
            with contextlib.suppress(OSError):
                dst.sendall(tail)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
    finally:
        with contextlib.suppress(threading.BrokenBarrierError):
            done.wait(timeout=30)


_LOOKUP_RESPONSE = COMMAND_TYPES["LOOKUP_RESPONSE"]


class _LookupRewriter:
    """Streaming broker->client filter that rewrites LOOKUP_RESPONSE frames.

    Frames are ``[totalSize u32][commandSize u32][BaseCommand]...``.  Only the head
    of each frame (sizes and command) is held back until its type is known; every
    other frame (including large MESSAGE frames) streams through unchanged.
    """

    def __init__(
        self, conn: RecordedConnection, proxy_url: str, mode: str, *, tls: bool = False
    ) -> None:
        self.conn = conn
        self.proxy_url = proxy_url
        self.mode = mode
        self.tls = tls
        self._buf = b""
        self._passthrough = 0  # bytes of the current non-lookup frame still to forward

    @property
    def pending(self) -> bool:
        return bool(self._buf)

    def flush(self) -> bytes:
        out, self._buf = self._buf, b""
        return out

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data
        out: list[bytes] = []
        while buf:
            if self._passthrough:
                take = min(self._passthrough, len(buf))
                out.append(buf[:take])
                buf = buf[take:]
                self._passthrough -= take
                continue
            if len(buf) < HEADER.size:
                break
            total, cmd_size = HEADER.unpack_from(buf)
            if len(buf) < HEADER.size + cmd_size:
                break
            rewritten = self._rewrite(buf[HEADER.size : HEADER.size + cmd_size], total, cmd_size)
            if rewritten is None:
                self._passthrough = 4 + total
            else:
                out.append(rewritten)
                buf = buf[HEADER.size + cmd_size :]
        self._buf = buf
        return b"".join(out)

    def _rewrite(self, command: bytes, total: int, cmd_size: int) -> bytes | None:
        """The re-encoded frame if ``command`` is a LOOKUP_RESPONSE, else None."""
        if total != 4 + cmd_size:  # a lookup response never has a payload
            return None
        try:
            cmd, ctype, lookup = decode_command(memoryview(command))
        except Reject:
            return None
        if ctype != _LOOKUP_RESPONSE or lookup is None:
            return None
        if self.mode == "proxy_flag":
            lookup.proxy_through_service_url = True
        elif self.tls:  # a TLS client connects to brokerServiceUrlTls
            lookup.brokerServiceUrl = lookup.brokerServiceUrlTls = self.proxy_url
        elif lookup.HasField("brokerServiceUrl"):
            lookup.brokerServiceUrl = self.proxy_url
        self.conn.lookup_rewrites += 1
        return encode_frame(cmd)


# --------------------------------------------------------------------------- manifests

IdKey = tuple[int, int, int, int]
TopicIdKey = tuple[str, int, int, int, int]


def _msg_id(mid: Any) -> dict[str, Any]:
    """A client ``MessageId`` as a dict.

    A chunked message's id (printed by the client as ``(first chunk);(last chunk)``)
    carries the last chunk's ledger/entry; ``first_chunk`` then holds the first chunk's
    id and ``chunks`` the number of entries from the first chunk to the last one.
    """
    entry: dict[str, Any] = {
        "ledger_id": int(mid.ledger_id()),
        "entry_id": int(mid.entry_id()),
        "batch_index": int(mid.batch_index()),
        "partition": int(mid.partition()),
    }
    text = str(mid)
    if ";" in text:
        first = _parse_id_text(text.split(";", 1)[0])
        if first is not None:
            entry["first_chunk"] = first
            if first["ledger_id"] == entry["ledger_id"]:
                entry["chunks"] = entry["entry_id"] - first["entry_id"] + 1
    return entry


def _parse_id_text(text: str) -> dict[str, int] | None:
    """``(ledger,entry,partition,batch)`` as printed by the client, or None."""
    parts = text.strip().strip("()").split(",")
    try:
        ledger, entry, partition, batch = (int(p) for p in parts)
    except ValueError:
        return None
    return {"ledger_id": ledger, "entry_id": entry, "batch_index": batch, "partition": partition}


def _id_key(mid: dict[str, Any]) -> IdKey:
    return (mid["ledger_id"], mid["entry_id"], mid["batch_index"], mid["partition"])


def _payload_entry(payload: bytes, key: str | None, props: dict[str, str]) -> dict[str, Any]:
    return {
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
        "key": key,
        "properties": dict(props),
    }


def _make_payload(i: int, size: int | None) -> bytes:
    text = f"message-{i}: hello pulsar dissector ".encode()
    if size is None:
        return text
    return (text * (size // len(text) + 1))[:size]


def pattern_payload(size: int, *, block: int = 1024, tag: str = "pulsar-dissector") -> bytes:
    """``size`` bytes of highly compressible text: ``block``-byte blocks, each numbered."""
    filler = f" {tag} sample payload;".encode()
    out = bytearray()
    n = 0
    while len(out) < size:
        head = f"\nblock {n:08d}:".encode()
        out += (head + filler * (block // len(filler) + 1))[:block]
        n += 1
    return bytes(out[:size])


def _jsonable(value: Any) -> Any:
    """Client option values (pybind enums included) as JSON values."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


def _new_topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:12]}"


def _topic_of(entry_topic: str, mid: dict[str, Any]) -> str:
    """The (partition) topic an id belongs to: ``TOPIC-partition-N`` for partitions."""
    p = int(mid["partition"])
    suffix = f"-partition-{p}"
    return entry_topic if p < 0 or entry_topic.endswith(suffix) else entry_topic + suffix


class ClientLogRecorder(logging.Handler):
    """Keeps the client's log records at ``level`` and above (for the manifest)."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(
            {"at": record.created, "level": record.levelname, "message": record.getMessage()}
        )


class ClientRecorder:
    """Drives the official client for a scenario and keeps what the client reports.

    Every method calls the client and records its arguments and results in
    ``manifest``: producers and consumers created, every message sent (payload
    sha256/size, key, properties, producer, send result and MessageId from the send
    receipt, the (partition) topic it went to), every message received (same fields
    plus consumer, redelivery count, publish time, ``phase``), acks (individual,
    cumulative, negative), redelivery requests, seeks and quirks.  Nothing in it
    comes from the wire.  A message a consumer receives again with redelivery count
    0 outside a phase that expects repeats (e.g. after a seek) is a pulsar-lite
    duplicate dispatch: it is flagged ``duplicate`` and noted in ``quirks``.
    """

    def __init__(self, scenario: str, **fields: Any) -> None:
        self.manifest: dict[str, Any] = {"scenario": scenario, **fields}
        self.manifest.update(
            topics=[],
            producers_created=0,
            consumers_created=0,
            producers=[],
            consumers=[],
            sent=[],
            received=[],
            acks=[],
            redelivery_requests=[],
            seeks=[],
            quirks=[],
            notes=[],
            started_at=time.time(),
        )
        self._lock = threading.Lock()
        self._outstanding = 0
        self._sends_done = threading.Event()
        self._sends_done.set()
        self._producers: list[Any] = []
        self._consumers: list[Any] = []
        self._seen: list[set[TopicIdKey]] = []

    # -- bookkeeping --------------------------------------------------------
    def _add_topics(self, topics: str | list[str]) -> None:
        for topic in [topics] if isinstance(topics, str) else topics:
            if topic not in self.manifest["topics"]:
                self.manifest["topics"].append(topic)

    def consumer_index(self, consumer: Any) -> int:
        for n, known in enumerate(self._consumers):
            if known is consumer:
                return n
        raise KeyError("consumer not created through this recorder")

    def quirk(self, text: str) -> None:
        """Record something the peers did that a real Pulsar deployment would not."""
        if text not in self.manifest["quirks"]:
            self.manifest["quirks"].append(text)

    def note(self, text: str) -> None:
        """Record a deliberate choice of the scenario (e.g. a workaround)."""
        if text not in self.manifest["notes"]:
            self.manifest["notes"].append(text)

    # -- setup ----------------------------------------------------------------
    @contextlib.contextmanager
    def connect(
        self,
        url: str,
        operation_timeout_seconds: int,
        logger: logging.Logger | None = None,
        *,
        settle: float = 0.3,
        client_options: dict[str, Any] | None = None,
    ) -> Iterator[Any]:
        """A ``pulsar.Client`` on ``url`` for the ``with`` block, logging through ``logger``.

        ``logger`` defaults to the ``pulsar`` Python logger (the client then prints
        nothing to stdout).  ``client_options`` are further ``pulsar.Client`` keyword
        arguments (e.g. ``tls_trust_certs_file_path``); they go into the manifest.
        When the block ends normally, ``settle`` seconds pass (the client groups acks
        for ~100 ms), then the producers and the consumers created through this
        recorder are closed, in that order; the client is always closed.
        """
        import pulsar  # imported lazily: only scenario users need the client

        client = pulsar.Client(
            url,
            operation_timeout_seconds=operation_timeout_seconds,
            logger=logger or logging.getLogger("pulsar"),
            **(client_options or {}),
        )
        if client_options:
            self.manifest["client_options"] = _jsonable(client_options)
        try:
            yield client
            time.sleep(settle)
            for handle in self._producers + self._consumers:
                handle.close()
        finally:
            client.close()

    def create_producer(self, client: Any, topic: str, **options: Any) -> Any:
        producer = client.create_producer(topic, **options)
        self.manifest["producers"].append(
            {
                "index": len(self.manifest["producers"]),
                "topic": topic,
                "producer_name": producer.producer_name(),
                "options": _jsonable(options),
            }
        )
        self.manifest["producers_created"] += 1
        self._producers.append(producer)
        self._add_topics(topic)
        return producer

    def subscribe(
        self, client: Any, topic: str | list[str], subscription: str, **options: Any
    ) -> Any:
        consumer = client.subscribe(topic, subscription, **options)
        self.manifest["consumers"].append(
            {
                "index": len(self._consumers),
                "topic": topic,
                "subscription": subscription,
                "consumer_name": consumer.consumer_name(),
                "options": _jsonable(options),
            }
        )
        self._consumers.append(consumer)
        self._seen.append(set())
        self.manifest["consumers_created"] += 1
        self._add_topics(topic)
        return consumer

    # -- producing --------------------------------------------------------------
    def send(
        self,
        producer: Any,
        payload: bytes,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
        sync: bool = True,
        **extra: Any,
    ) -> dict[str, Any]:
        """Send one message (``send`` or ``send_async``); returns its manifest entry.

        ``extra`` fields are copied into the entry (e.g. ``burst``).  An async
        send's ``result`` and ``message_id`` appear once its callback ran: call
        ``wait_for_sends`` before reading them.
        """
        props = dict(properties or {})
        entry = _payload_entry(payload, key, props)
        entry.update(
            index=len(self.manifest["sent"]),
            producer=producer.producer_name(),
            topic=producer.topic(),
            method="sync" if sync else "async",
            sent_at=time.time(),
            **extra,
        )
        self.manifest["sent"].append(entry)
        kwargs: dict[str, Any] = {"properties": props}
        if key is not None:
            kwargs["partition_key"] = key
        if sync:
            try:
                mid = producer.send(payload, **kwargs)
            except Exception as exc:
                entry["result"] = type(exc).__name__
                raise
            self._sent(entry, "Ok", mid)
            return entry
        with self._lock:
            self._outstanding += 1
            self._sends_done.clear()

        def callback(result: Any, mid: Any) -> None:
            with self._lock:
                self._sent(entry, getattr(result, "name", str(result)), mid)
                self._outstanding -= 1
                if self._outstanding == 0:
                    self._sends_done.set()

        producer.send_async(payload, callback, **kwargs)
        return entry

    @staticmethod
    def _sent(entry: dict[str, Any], result: str, mid: Any) -> None:
        entry["result"] = result
        entry["message_id"] = _msg_id(mid)
        entry["partition_topic"] = _topic_of(entry["topic"], entry["message_id"])

    def wait_for_sends(self, timeout: float) -> None:
        """Wait until every ``send_async`` callback ran; raise if one failed."""
        if not self._sends_done.wait(timeout=timeout):
            raise TimeoutError("send_async callbacks did not all fire")
        failed = [e["index"] for e in self.manifest["sent"] if e.get("result") != "Ok"]
        if failed:
            raise RuntimeError(f"sends failed: {failed}")

    # -- consuming --------------------------------------------------------------
    def receive(
        self,
        consumer: Any,
        timeout_ms: int,
        *,
        phase: str | None = None,
        expect_repeats: bool = False,
    ) -> Any | None:
        """One ``consumer.receive``; the message (recorded) or None on timeout."""
        import pulsar

        try:
            msg = consumer.receive(timeout_millis=max(1, timeout_ms))
        except pulsar.Timeout:
            return None
        self._received(consumer, msg, phase, expect_repeats)
        return msg

    def _received(self, consumer: Any, msg: Any, phase: str | None, expect_repeats: bool) -> None:
        n = self.consumer_index(consumer)
        entry = _payload_entry(msg.data(), msg.partition_key() or None, msg.properties())
        mid = _msg_id(msg.message_id())
        entry.update(
            consumer=n,
            subscription=self.manifest["consumers"][n]["subscription"],
            message_id=mid,
            topic_name=msg.topic_name(),
            producer_name=msg.producer_name(),
            publish_timestamp=int(msg.publish_timestamp()),
            event_timestamp=int(msg.event_timestamp()),
            redelivery_count=int(msg.redelivery_count()),
            phase=phase,
            received_at=time.time(),
        )
        key = (msg.topic_name(), *_id_key(mid))
        entry["duplicate"] = key in self._seen[n]
        self._seen[n].add(key)
        if entry["duplicate"] and entry["redelivery_count"] == 0 and not expect_repeats:
            entry["unexpected_duplicate"] = True
            self.quirk(
                "pulsar-lite dispatched a message again with redelivery count 0 "
                "(duplicate dispatch); see received[].unexpected_duplicate"
            )
        self.manifest["received"].append(entry)

    def receive_sent(
        self,
        consumer: Any,
        sent: list[dict[str, Any]],
        timeout: float,
        *,
        phase: str | None = None,
        expect_repeats: bool = False,
        ack: bool = False,
    ) -> list[Any]:
        """Receive until each of the ``sent`` entries arrived; returns every message received.

        Messages are matched by (topic, message id); duplicates and other messages are
        returned (and recorded) too.  Raises TimeoutError after ``timeout`` seconds.
        With ``ack``, every message returned is then acked individually.
        """
        wanted = {(_topic_of(e["topic"], e["message_id"]), *_id_key(e["message_id"])) for e in sent}
        got: set[TopicIdKey] = set()
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while not wanted <= got:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise TimeoutError(f"received {len(wanted & got)}/{len(wanted)} messages")
            msg = self.receive(consumer, left_ms, phase=phase, expect_repeats=expect_repeats)
            if msg is not None:
                out.append(msg)
                got.add((msg.topic_name(), *_id_key(_msg_id(msg.message_id()))))
        for msg in out if ack else ():
            self.ack(consumer, msg)
        return out

    def drain(
        self,
        consumer: Any,
        idle_ms: int,
        *,
        phase: str | None = None,
        expect_repeats: bool = False,
    ) -> list[Any]:
        """Receive until nothing arrives for ``idle_ms``; returns the messages."""
        out: list[Any] = []
        while (
            msg := self.receive(consumer, idle_ms, phase=phase, expect_repeats=expect_repeats)
        ) is not None:
            out.append(msg)
        return out

    # -- acknowledging ------------------------------------------------------------
    def _ack_entry(self, consumer: Any, msg: Any, kind: str) -> None:
        self.manifest["acks"].append(
            {
                "consumer": self.consumer_index(consumer),
                "kind": kind,
                "message_id": _msg_id(msg.message_id()),
                "topic_name": msg.topic_name(),
                "at": time.time(),
            }
        )

    def ack(self, consumer: Any, msg: Any, *, cumulative: bool = False) -> None:
        """``acknowledge`` (or ``acknowledge_cumulative``) one received message."""
        if cumulative:
            consumer.acknowledge_cumulative(msg)
        else:
            consumer.acknowledge(msg)
        self._ack_entry(consumer, msg, "cumulative" if cumulative else "individual")

    def nack(self, consumer: Any, msg: Any) -> None:
        """``negative_acknowledge`` one received message (kind ``negative``)."""
        consumer.negative_acknowledge(msg)
        self._ack_entry(consumer, msg, "negative")

    def redeliver_unacknowledged(self, consumer: Any) -> None:
        consumer.redeliver_unacknowledged_messages()
        self.manifest["redelivery_requests"].append(
            {"consumer": self.consumer_index(consumer), "at": time.time()}
        )

    def seek(self, consumer: Any, target: Any) -> dict[str, Any]:
        """``consumer.seek`` to a MessageId or a publish time (int, ms); returns the record."""
        entry: dict[str, Any] = {"consumer": self.consumer_index(consumer), "at": time.time()}
        if isinstance(target, int):
            entry["publish_time_ms"] = target
        else:
            entry["message_id"] = _msg_id(target)
        self.manifest["seeks"].append(entry)
        try:
            consumer.seek(target)
        except Exception as exc:
            entry["result"] = f"{type(exc).__name__}: {exc}"
            raise
        entry["result"] = "Ok"
        return entry

    def finish(self) -> dict[str, Any]:
        """Close the record: summary counts and ``finished_at``; returns the manifest."""
        received = self.manifest["received"]
        self.manifest["duplicates_received"] = sum(bool(e["duplicate"]) for e in received)
        self.manifest["unexpected_duplicates"] = sum(
            bool(e.get("unexpected_duplicate")) for e in received
        )
        self.manifest["finished_at"] = time.time()
        return self.manifest


# --------------------------------------------------------------------------- scenarios


def run_scenario(
    url: str,
    *,
    messages: int = 10,
    batching: bool = True,
    async_every: int = 2,
    compression: str = "NONE",
    payload_size: int | None = None,
    consumer_type: str = "Exclusive",
    cumulative_ack_last: bool = True,
    topic: str | None = None,
    subscription: str = "sub-dissector",
    operation_timeout_seconds: int = 10,
    idle_secs: float = 0.0,
    logger: logging.Logger | None = None,
    client_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Produce ``messages`` keyed messages with properties, consume and ack them.

    The consumer subscribes first (so nothing is missed), then the producer sends
    messages whose index is a multiple of ``async_every`` with ``send`` (blocking),
    the others with ``send_async``, so that batching can group them (``batching=False`` disables
    batching).  ``compression`` is a ``pulsar.CompressionType`` name (NONE, LZ4,
    ZLib, ZSTD, SNAPPY).  Received messages are acked individually, except that
    with ``cumulative_ack_last`` (Exclusive/Failover only; the client forbids it
    on Shared) the one with the highest id is acked cumulatively, last.
    Receiving goes on until every sent message id was seen; duplicate deliveries
    (a pulsar-lite quirk) are kept in ``received`` with ``duplicate: true``.
    ``idle_secs`` > the broker keep-alive interval idles before closing, so that
    PING/PONG frames are exchanged.
    The client logs through ``logger`` (default: the ``pulsar`` Python logger)
    instead of printing to stdout; ``client_options`` go to ``pulsar.Client`` (TLS
    trust file, ...).  Returns the manifest (JSON-serialisable, see ``ClientRecorder``).
    """
    import pulsar

    topic = topic or _new_topic("dissector")
    rec = ClientRecorder(
        "run_scenario",
        topic=topic,
        subscription=subscription,
        consumer_type=consumer_type,
        batching=batching,
        compression=compression,
        idle_secs=idle_secs,
    )
    settle = max(0.3, idle_secs)  # idle_secs > keep-alive interval: PING/PONG before closing
    with rec.connect(
        url, operation_timeout_seconds, logger, settle=settle, client_options=client_options
    ) as client:
        consumer = rec.subscribe(
            client, topic, subscription, consumer_type=getattr(pulsar.ConsumerType, consumer_type)
        )
        producer = rec.create_producer(
            client,
            topic,
            batching_enabled=batching,
            batching_max_publish_delay_ms=10,
            compression_type=getattr(pulsar.CompressionType, compression),
        )
        rec.manifest["producer_name"] = producer.producer_name()
        for i in range(messages):
            sync = i % async_every == 0
            props = {"index": str(i), "kind": "sync" if sync else "async"}
            payload = _make_payload(i, payload_size)
            rec.send(producer, payload, key=f"key-{i % 3}", properties=props, sync=sync)
        producer.flush()
        rec.wait_for_sends(operation_timeout_seconds)
        # pulsar-lite occasionally dispatches an entry twice: receive until every
        # sent id was seen (duplicates are kept in the manifest, flagged).
        received = rec.receive_sent(consumer, rec.manifest["sent"], operation_timeout_seconds)
        # Cumulative acks are refused by the client on Shared/Key_Shared subscriptions.
        cumulative = cumulative_ack_last and consumer_type in ("Exclusive", "Failover")
        last = max(range(len(received)), key=lambda n: _id_key(_msg_id(received[n].message_id())))
        order = [n for n in range(len(received)) if not (cumulative and n == last)]
        for n in order + ([last] if cumulative else []):
            rec.ack(consumer, received[n], cumulative=cumulative and n == last)
    return rec.finish()


def run_compression_scenario(url: str, *, compression: str = "LZ4", **kw: Any) -> dict[str, Any]:
    """``run_scenario`` with compression (LZ4, ZLib, ZSTD, SNAPPY) and compressible payloads."""
    kw.setdefault("payload_size", 2048)
    manifest = run_scenario(url, compression=compression, **kw)
    manifest["scenario"] = "run_compression_scenario"
    return manifest


def run_large_message_scenario(url: str, *, size: int = 1 << 20, **kw: Any) -> dict[str, Any]:
    """One message of ``size`` bytes (default 1 MiB), sent without batching."""
    kw.setdefault("messages", 1)
    kw.setdefault("batching", False)
    kw.setdefault("async_every", 1)
    manifest = run_scenario(url, payload_size=size, **kw)
    manifest["scenario"] = "run_large_message_scenario"
    return manifest


def run_multi_producer_scenario(
    url: str,
    *,
    producers: int = 3,
    messages_per_producer: int = 5,
    operation_timeout_seconds: int = 10,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """``producers`` producers on one client (one connection), each on its own topic.

    One multi-topic consumer subscribes to all the topics first.  The producers send
    in turn (round robin, alternately ``send`` and ``send_async``, no batching); every
    message is received and acked individually.
    """
    base = _new_topic("multi")
    topics = [f"{base}-{n}" for n in range(producers)]
    rec = ClientRecorder("run_multi_producer_scenario")
    with rec.connect(url, operation_timeout_seconds, logger) as client:
        consumer = rec.subscribe(client, topics, "sub-multi")
        prods = [rec.create_producer(client, t, batching_enabled=False) for t in topics]
        for i in range(messages_per_producer):
            for n, producer in enumerate(prods):
                rec.send(
                    producer,
                    f"producer {n} message {i}".encode(),
                    key=f"p{n}-key-{i % 2}",
                    properties={"producer": str(n), "seq": str(i)},
                    sync=i % 2 == 0,
                )
        for producer in prods:
            producer.flush()
        rec.wait_for_sends(operation_timeout_seconds)
        rec.receive_sent(consumer, rec.manifest["sent"], operation_timeout_seconds, ack=True)
    return rec.finish()


def run_batching_scenario(
    url: str,
    *,
    bursts: tuple[int, ...] = (8, 5, 3),
    operation_timeout_seconds: int = 10,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Batched producer: each burst of ``send_async`` calls is flushed as one batch.

    The publish delay is long (1 s) so that a batch closes on ``flush()``, i.e. each
    burst should become one SEND; the client's MessageIds give each message's batch
    index.  The consumer acks every message individually.
    """
    topic = _new_topic("batching")
    rec = ClientRecorder("run_batching_scenario", bursts=list(bursts))
    with rec.connect(url, operation_timeout_seconds, logger) as client:
        consumer = rec.subscribe(client, topic, "sub-batching")
        producer = _slow_batch_producer(rec, client, topic)
        i = 0
        for burst, count in enumerate(bursts):
            for _ in range(count):
                rec.send(
                    producer,
                    _make_payload(i, None),
                    key=f"key-{i % 4}",
                    properties={"index": str(i), "burst": str(burst)},
                    sync=False,
                    burst=burst,
                )
                i += 1
            producer.flush()
            rec.wait_for_sends(operation_timeout_seconds)
        rec.receive_sent(consumer, rec.manifest["sent"], operation_timeout_seconds, ack=True)
    return rec.finish()


def _slow_batch_producer(rec: ClientRecorder, client: Any, topic: str) -> Any:
    """A batching producer whose batches close on ``flush()`` (1 s publish delay)."""
    return rec.create_producer(
        client,
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=1000,
    )


def run_partitioned_scenario(
    url: str,
    *,
    messages: int = 12,
    topic: str | None = None,
    operation_timeout_seconds: int = 10,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Produce to and consume from a partitioned topic (all partitions).

    pulsar-lite creates every new topic with its ``default_partitions`` setting, so
    the broker must run with ``default_partitions`` >= 2; on another broker, ``topic``
    names a partitioned topic made beforehand.  Half the messages carry a
    key (routed by key hash), half none (round robin); no batching.
    """
    topic = topic or _new_topic("partitioned")
    rec = ClientRecorder("run_partitioned_scenario", topic=topic)
    with rec.connect(url, operation_timeout_seconds, logger) as client:
        partitions = list(client.get_topic_partitions(topic))
        rec.manifest["partitions"] = partitions
        if len(partitions) < 2:
            raise RuntimeError(
                f"{topic} is not partitioned: run the broker with default_partitions"
            )
        consumer = rec.subscribe(client, topic, "sub-partitioned")
        producer = rec.create_producer(client, topic, batching_enabled=False)
        for i in range(messages):
            key = f"key-{i % 5}" if i % 2 == 0 else None
            rec.send(producer, _make_payload(i, None), key=key, properties={"index": str(i)})
        rec.wait_for_sends(operation_timeout_seconds)
        rec.receive_sent(consumer, rec.manifest["sent"], operation_timeout_seconds, ack=True)
        counts: dict[str, int] = {}
        for entry in rec.manifest["sent"]:
            counts[entry["partition_topic"]] = counts.get(entry["partition_topic"], 0) + 1
        rec.manifest["sent_per_partition"] = counts
    return rec.finish()


def run_acks_scenario(
    url: str,
    *,
    batch: int = 8,
    shared_messages: int = 4,
    operation_timeout_seconds: int = 10,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Every kind of acknowledgement the client can send.

    Part 1 (Exclusive, ``batch_index_ack_enabled``): one batch of ``batch`` messages;
    messages 1 and 3 are acked individually (batch-index acks), then message 5
    cumulatively, then 6 and 7 individually.  Part 2 (Shared: pulsar-lite ignores
    redelivery requests on other subscription types; no batching): message 0 is
    acked, message 1 negatively acked and received again, then a redelivery of all
    unacked messages is requested and they are received again; all are then acked.
    Pauses of 0.3 s let the client's ~100 ms ack grouping flush between steps.
    """
    import pulsar

    base = _new_topic("acks")
    rec = ClientRecorder("run_acks_scenario")
    pause = 0.3
    with rec.connect(url, operation_timeout_seconds, logger, settle=pause) as client:
        # -- part 1: batch-index, individual and cumulative acks
        consumer = rec.subscribe(
            client, f"{base}-batch", "sub-batch-acks", batch_index_ack_enabled=True
        )
        producer = _slow_batch_producer(rec, client, f"{base}-batch")
        for i in range(batch):
            rec.send(producer, _make_payload(i, None), properties={"index": str(i)}, sync=False)
        producer.flush()
        rec.wait_for_sends(operation_timeout_seconds)
        first = rec.manifest["sent"][:batch]
        msgs = rec.receive_sent(consumer, first, operation_timeout_seconds, phase="batch")
        by_index = {_msg_id(m.message_id())["batch_index"]: m for m in msgs}
        for steps in (((1, False), (3, False)), ((5, True),), ((6, False), (7, False))):
            for idx, cumulative in steps:
                if idx in by_index:
                    rec.ack(consumer, by_index[idx], cumulative=cumulative)
            time.sleep(pause)
        # -- part 2: negative ack and redelivery request on a Shared subscription
        shared = rec.subscribe(
            client,
            f"{base}-shared",
            "sub-shared-acks",
            consumer_type=pulsar.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=300,
        )
        producer2 = rec.create_producer(client, f"{base}-shared", batching_enabled=False)
        entries = [
            rec.send(producer2, _make_payload(i, None), properties={"index": str(i)})
            for i in range(shared_messages)
        ]
        msgs = rec.receive_sent(shared, entries, operation_timeout_seconds, phase="shared")
        msgs.sort(key=lambda m: _id_key(_msg_id(m.message_id())))
        rec.ack(shared, msgs[0])
        rec.nack(shared, msgs[1])
        rec.receive_sent(
            shared,
            [entries[1]],
            operation_timeout_seconds,
            phase="after_nack",
            expect_repeats=True,
            ack=True,
        )
        time.sleep(pause)
        rec.redeliver_unacknowledged(shared)
        rec.receive_sent(
            shared,
            entries[2:],
            operation_timeout_seconds,
            phase="after_redeliver_request",
            expect_repeats=True,
            ack=True,
        )
    return rec.finish()


def run_seek_scenario(
    url: str,
    *,
    messages: int = 6,
    operation_timeout_seconds: int = 10,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """Consume and ack ``messages``, seek back to the first one, then to a publish time.

    The publish time lies between the first and second half of the messages.  After
    each seek the scenario waits 0.5 s for redelivered messages; pulsar-lite answers
    SEEK with SUCCESS but dispatches nothing until a new message is published (a real
    broker disconnects the consumer, which then resubscribes), so if nothing came,
    a "nudge" message is published and everything is received until it arrives.
    The client does not deliver the message a SEEK names when the broker resends it.
    """
    topic = _new_topic("seek")
    rec = ClientRecorder("run_seek_scenario", topic=topic)
    rec.note(
        "after a SEEK to a message id pulsar-lite re-dispatches that message too, but the "
        "client does not hand it to the application (seen on the wire with pulsar-client "
        "3.13): MESSAGE frames after a SEEK can outnumber the received entries"
    )
    with rec.connect(url, operation_timeout_seconds, logger) as client:
        consumer = rec.subscribe(client, topic, "sub-seek")
        producer = rec.create_producer(client, topic, batching_enabled=False)
        half = messages // 2
        for i in range(half):
            rec.send(producer, _make_payload(i, None), key=f"key-{i}", properties={"i": str(i)})
        time.sleep(0.2)
        publish_time_ms = int(time.time() * 1000)
        time.sleep(0.2)
        for i in range(half, messages):
            rec.send(producer, _make_payload(i, None), key=f"key-{i}", properties={"i": str(i)})
        initial = rec.receive_sent(
            consumer, rec.manifest["sent"], operation_timeout_seconds, phase="initial", ack=True
        )
        first = min(initial, key=lambda m: _id_key(_msg_id(m.message_id())))
        targets: list[tuple[str, Any]] = [
            ("after_seek_message_id", first.message_id()),
            ("after_seek_publish_time", publish_time_ms),
        ]
        for n, (phase, target) in enumerate(targets):
            time.sleep(0.3)  # let the acks before the seek go out
            rec.seek(consumer, target)
            got = rec.drain(consumer, 500, phase=phase, expect_repeats=True)
            if not got:
                rec.quirk(
                    "pulsar-lite dispatched nothing within 0.5 s after a successful SEEK "
                    "(a real broker disconnects the consumer); a nudge message was published"
                )
                nudge = rec.send(
                    producer, f"nudge {n}".encode(), properties={"nudge": str(n)}, sync=True
                )
                got = rec.receive_sent(
                    consumer, [nudge], operation_timeout_seconds, phase=phase, expect_repeats=True
                )
                got += rec.drain(consumer, 300, phase=phase, expect_repeats=True)
            for msg in got:
                rec.ack(consumer, msg)
    return rec.finish()


def run_chunked_scenario(
    url: str,
    *,
    size: int = (6 << 20) + 12345,
    operation_timeout_seconds: int = 20,
    logger: logging.Logger | None = None,
) -> dict[str, Any]:
    """One message larger than 5 MiB, sent with chunking (batching off), then consumed.

    pulsar-lite sends no max_message_size in CONNECTED, so the client assumes 5 MiB
    and splits the message.  The payload is compressible text (``pattern_payload``).
    The consumer subscribes only after the send, from the earliest position: with a
    consumer already attached while the chunks are published, pulsar-lite was seen
    to dispatch the first chunk twice and never the second one.
    """
    import pulsar

    topic = _new_topic("chunked")
    rec = ClientRecorder("run_chunked_scenario", topic=topic, size=size)
    rec.note(
        "the consumer subscribes only after the send (initial_position=Earliest): with a "
        "consumer attached while the chunks were published, pulsar-lite was seen to "
        "dispatch the first chunk twice and never the second one"
    )
    rec.note("message_id.chunks counts the entries from first_chunk to the last chunk")
    with rec.connect(url, operation_timeout_seconds, logger) as client:
        producer = rec.create_producer(client, topic, batching_enabled=False, chunking_enabled=True)
        entry = rec.send(
            producer, pattern_payload(size), key="chunked", properties={"kind": "chunked"}
        )
        consumer = rec.subscribe(
            client, topic, "sub-chunked", initial_position=pulsar.InitialPosition.Earliest
        )
        rec.receive_sent(consumer, [entry], operation_timeout_seconds, ack=True)
        rec.manifest["chunks"] = entry["message_id"].get("chunks")
    return rec.finish()


# --------------------------------------------------------------------------- record


def record(
    scenario: Scenario = run_scenario,
    *,
    keep_alive_interval_secs: int = 2,
    broker_config: dict[str, int | bool | str] | None = None,
    lookup_rewrite: str | None = "url",
    settle: float = 0.3,
    **kw: Any,
) -> tuple[list[RecordedConnection], dict[str, Any]]:
    """Start broker + proxy, run ``scenario(proxy.url, **kw)``, return (connections, manifest).

    ``settle`` seconds are waited after the scenario so trailing frames are recorded
    before the proxy shuts down.  The manifest gains ``broker_port``, ``proxy_port``,
    ``lookup_rewrite``, ``connections`` (count) and ``lookup_rewrites`` entries.
    """
    with PulsarLite(
        keep_alive_interval_secs=keep_alive_interval_secs, extra_config=broker_config
    ) as broker:
        with RecordingProxy(broker.port, lookup_rewrite=lookup_rewrite) as proxy:
            manifest = scenario(proxy.url, **kw)
            time.sleep(settle)
        manifest["broker_port"] = broker.port
        manifest["proxy_port"] = proxy.port
        manifest["lookup_rewrite"] = lookup_rewrite
        manifest["connections"] = len(proxy.connections)
        manifest["lookup_rewrites"] = sum(c.lookup_rewrites for c in proxy.connections)
    return proxy.connections, manifest
