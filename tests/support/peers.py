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
        fly: by default it replaces brokerServiceUrl with the proxy URL (the client
        then reuses its single connection, as with a real broker whose advertised
        address is the service URL); ``lookup_rewrite="proxy_flag"`` instead sets
        proxy_through_service_url=true (the client opens a second connection to the
        proxy whose CONNECT carries proxy_to_broker_url).  Recorded broker->client
        bytes are the bytes delivered to the client, i.e. after the rewrite.
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
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "PulsarLite",
    "RecordedConnection",
    "RecordingProxy",
    "Scenario",
    "find_pulsar_lite_binary",
    "free_port",
    "record",
    "run_compression_scenario",
    "run_large_message_scenario",
    "run_scenario",
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


# --------------------------------------------------------------------------- broker


class PulsarLite:
    """A pulsar-lite broker process on 127.0.0.1 with a fresh database.

    Use as a context manager; ``.port`` and ``.url`` are valid inside it.
    ``extra_config`` adds top-level TOML keys (ints, bools, strings), e.g.
    ``{"max_message_size_bytes": 8 << 20, "default_partitions": 0}``.
    """

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
        self._proc: subprocess.Popen[bytes] | None = None
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
        return "\n".join(self.log_text().splitlines()[-n:])

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> PulsarLite:
        self.workdir = Path(tempfile.mkdtemp(prefix="pulsar-lite-"))
        config = self.workdir / "pulsar-lite.toml"
        config.write_text(self.config_text())
        self.log_path = self.workdir / "broker.log"
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                [
                    self.binary,
                    "--config",
                    str(config),
                    "--addr",
                    f"{LOOPBACK}:{self.port}",
                    "--db-path",
                    str(self.workdir / "db"),
                    "--log-level",
                    self.log_level,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(self.workdir),
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None and self.log_path is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"pulsar-lite exited with code {self._proc.returncode} before listening; "
                    f"log tail:\n{self.log_tail()}"
                )
            log = self.log_path.read_bytes()
            if b"Server listening" in log:
                self._check_config_applied(log)
                return
            time.sleep(0.02)
        raise RuntimeError(
            f"pulsar-lite did not log 'Server listening' within {self.startup_timeout}s "
            f"on port {self.port}; log tail:\n{self.log_tail()}"
        )

    def _check_config_applied(self, log: bytes) -> None:
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
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self.workdir is not None:
            self._final_log = self.log_text()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = self.log_path = None

    def __enter__(self) -> PulsarLite:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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
    """

    index: int
    client_port: int
    opened_at: float
    closed_at: float | None = None
    lookup_rewrites: int = 0
    c2b_chunks: list[tuple[float, bytes]] = field(default_factory=list)
    b2c_chunks: list[tuple[float, bytes]] = field(default_factory=list)

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
    """

    def __init__(
        self,
        target_port: int,
        *,
        target_host: str = LOOPBACK,
        drain_timeout: float = 2.0,
        lookup_rewrite: str | None = "url",
    ) -> None:
        if lookup_rewrite not in ("url", "proxy_flag", None):
            raise ValueError(
                f"lookup_rewrite must be 'url', 'proxy_flag' or None: {lookup_rewrite!r}"
            )
        self.target = (target_host, target_port)
        self.drain_timeout = drain_timeout
        self.lookup_rewrite = lookup_rewrite
        self.connections: list[RecordedConnection] = []
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port: int = int(self._listener.getsockname()[1])
        self.url: str = f"pulsar://{LOOPBACK}:{self.port}"
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
                _LookupRewriter(conn, self.url, self.lookup_rewrite)
                if self.lookup_rewrite
                else None
            )
            for src, dst, chunks, name, rw in (
                (client, upstream, conn.c2b_chunks, "c2b", None),
                (upstream, client, conn.b2c_chunks, "b2c", rewriter),
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
    src: socket.socket,
    dst: socket.socket,
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


_LOOKUP_RESPONSE = 24  # BaseCommand.Type.LOOKUP_RESPONSE == field number of lookupTopicResponse


class _LookupRewriter:
    """Streaming broker->client filter that rewrites LOOKUP_RESPONSE frames.

    Frames are ``[totalSize u32][commandSize u32][BaseCommand]...``.  Only the
    first bytes of each frame are held back until its type is known; every
    other frame (including large MESSAGE frames) streams through unchanged.
    """

    def __init__(self, conn: RecordedConnection, proxy_url: str, mode: str) -> None:
        self.conn = conn
        self.proxy_url = proxy_url.encode()
        self.mode = mode
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
            if len(buf) < 10:  # totalSize, commandSize, tag of field 1, type
                break
            total = int.from_bytes(buf[:4], "big")
            if buf[8] == 0x08 and buf[9] == _LOOKUP_RESPONSE:
                if len(buf) < 4 + total:
                    break
                out.append(self._rewrite(buf[: 4 + total]))
                buf = buf[4 + total :]
            else:
                self._passthrough = 4 + total
        self._buf = buf
        return b"".join(out)

    def _rewrite(self, frame: bytes) -> bytes:
        cmd_size = int.from_bytes(frame[4:8], "big")
        if 8 + cmd_size != len(frame):  # a lookup response never has a payload
            return frame
        fields = _pb_fields(frame[8:])
        new_fields: list[tuple[int, int, Any]] = []
        for num, wt, val in fields:
            if num == _LOOKUP_RESPONSE and wt == 2:
                inner = _pb_fields(val)
                if self.mode == "url":
                    inner = [
                        (n, w, self.proxy_url if n == 1 and w == 2 else v) for n, w, v in inner
                    ]
                else:  # proxy_flag: proxy_through_service_url (field 8) = true
                    inner = [(n, w, v) for n, w, v in inner if n != 8] + [(8, 0, 1)]
                    inner.sort(key=lambda f: f[0])
                val = _pb_encode(inner)
            new_fields.append((num, wt, val))
        cmd = _pb_encode(new_fields)
        self.conn.lookup_rewrites += 1
        return (4 + len(cmd)).to_bytes(4, "big") + len(cmd).to_bytes(4, "big") + cmd


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _enc_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _pb_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Decode protobuf fields as (number, wire type, int | bytes), in order."""
    fields: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        val: Any
        if wt == 0:
            val, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            val, i = buf[i : i + n], i + n
        elif wt == 1:
            val, i = buf[i : i + 8], i + 8
        elif wt == 5:
            val, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        fields.append((num, wt, val))
    return fields


def _pb_encode(fields: list[tuple[int, int, Any]]) -> bytes:
    out = bytearray()
    for num, wt, val in fields:
        out += _enc_varint(num << 3 | wt)
        if wt == 0:
            out += _enc_varint(val)
        elif wt == 2:
            out += _enc_varint(len(val)) + val
        else:
            out += val
    return bytes(out)


# --------------------------------------------------------------------------- scenarios


def _msg_id(mid: Any) -> dict[str, int]:
    return {
        "ledger_id": int(mid.ledger_id()),
        "entry_id": int(mid.entry_id()),
        "batch_index": int(mid.batch_index()),
        "partition": int(mid.partition()),
    }


def _id_key(mid: dict[str, int]) -> tuple[int, int, int, int]:
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
    instead of printing to stdout.  Returns the manifest (JSON-serialisable).
    """
    import pulsar  # imported lazily: only scenario users need the client

    topic = topic or f"persistent://public/default/dissector-{uuid.uuid4().hex[:12]}"
    comp = getattr(pulsar.CompressionType, compression)
    ctype = getattr(pulsar.ConsumerType, consumer_type)
    manifest: dict[str, Any] = {
        "scenario": "run_scenario",
        "topic": topic,
        "subscription": subscription,
        "consumer_type": consumer_type,
        "batching": batching,
        "compression": compression,
        "idle_secs": idle_secs,
        "producers_created": 0,
        "consumers_created": 0,
        "sent": [],
        "received": [],
        "acks": [],
        "started_at": time.time(),
    }
    client = pulsar.Client(
        url,
        operation_timeout_seconds=operation_timeout_seconds,
        logger=logger or logging.getLogger("pulsar"),
    )
    try:
        consumer = client.subscribe(topic, subscription, consumer_type=ctype)
        manifest["consumers_created"] += 1
        producer = client.create_producer(
            topic,
            batching_enabled=batching,
            batching_max_publish_delay_ms=10,
            compression_type=comp,
        )
        manifest["producers_created"] += 1
        manifest["producer_name"] = producer.producer_name()

        pending: dict[int, Any] = {}
        lock = threading.Lock()
        all_done = threading.Event()
        remaining = [0]

        def _callback_for(idx: int) -> Callable[[Any, Any], None]:
            def cb(result: Any, mid: Any) -> None:
                with lock:
                    pending[idx] = (getattr(result, "name", str(result)), mid)
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        all_done.set()

            return cb

        sent: list[dict[str, Any]] = []
        for i in range(messages):
            payload = _make_payload(i, payload_size)
            key = f"key-{i % 3}"
            props = {"index": str(i), "kind": "async" if i % async_every else "sync"}
            entry = _payload_entry(payload, key, props)
            entry["index"] = i
            entry["method"] = props["kind"]
            sent.append(entry)
            if i % async_every:
                with lock:
                    remaining[0] += 1
                    all_done.clear()
                producer.send_async(payload, _callback_for(i), properties=props, partition_key=key)
            else:
                mid = producer.send(payload, properties=props, partition_key=key)
                entry["result"] = "Ok"
                entry["message_id"] = _msg_id(mid)
        producer.flush()
        with lock:
            if remaining[0] == 0:
                all_done.set()
        if not all_done.wait(timeout=operation_timeout_seconds):
            raise TimeoutError("send_async callbacks did not all fire")
        for idx, (result, mid) in pending.items():
            sent[idx]["result"] = result
            sent[idx]["message_id"] = _msg_id(mid)
        manifest["sent"] = sent

        # pulsar-lite occasionally dispatches an entry twice: receive until every
        # sent id was seen (duplicates are kept in the manifest, flagged).
        expected = {_id_key(e["message_id"]) for e in sent}
        seen: set[tuple[int, int, int, int]] = set()
        received: list[Any] = []
        deadline = time.monotonic() + operation_timeout_seconds
        while not expected <= seen:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                raise TimeoutError(f"received {len(seen & expected)}/{len(expected)} messages")
            try:
                msg = consumer.receive(timeout_millis=left_ms)
            except pulsar.Timeout:
                continue
            received.append(msg)
            entry = _payload_entry(msg.data(), msg.partition_key() or None, msg.properties())
            entry["message_id"] = _msg_id(msg.message_id())
            entry["topic_name"] = msg.topic_name()
            entry["publish_timestamp"] = int(msg.publish_timestamp())
            entry["redelivery_count"] = int(msg.redelivery_count())
            entry["duplicate"] = _id_key(entry["message_id"]) in seen
            seen.add(_id_key(entry["message_id"]))
            manifest["received"].append(entry)
        manifest["duplicates_received"] = sum(e["duplicate"] for e in manifest["received"])
        # Cumulative acks are refused by the client on Shared/Key_Shared subscriptions.
        cumulative = cumulative_ack_last and consumer_type in ("Exclusive", "Failover")
        last = max(range(len(received)), key=lambda n: _id_key(_msg_id(received[n].message_id())))
        order = [n for n in range(len(received)) if not (cumulative and n == last)]
        for n in order + ([last] if cumulative else []):
            msg = received[n]
            if cumulative and n == last:
                consumer.acknowledge_cumulative(msg)
                kind = "cumulative"
            else:
                consumer.acknowledge(msg)
                kind = "individual"
            manifest["acks"].append({"kind": kind, "message_id": _msg_id(msg.message_id())})
        time.sleep(max(0.3, idle_secs))  # acks are grouped by the client for ~100 ms
        producer.close()
        consumer.close()
    finally:
        client.close()
    manifest["finished_at"] = time.time()
    return manifest


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
