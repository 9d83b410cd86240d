"""EDGE: the metrics endpoint of `live --metrics`: an HTTP server on its own threads.

Input: the address asked for (`parse_address("[HOST:]PORT")`) and `get_snapshot`, a callable
giving the latest `store.Snapshot` the dissector published (a reference, swapped whole).
Output: `MetricsServer`: `GET /metrics` renders that snapshot as OpenMetrics 1.0 or
Prometheus text 0.0.4 by the scraper's Accept header (prometheus_client's negotiation and
gzip, through `openmetrics.SnapshotCollector`); `/health` and `/-/healthy` answer 200 "ok";
any other path 404.
Rules:
- Loopback unless an address is asked for: "9464" and ":9464" are 127.0.0.1; "0.0.0.0:9464",
  "[::1]:9464", "host:9464" bind there and nowhere else. Port 0 takes a free port (`url`
  says which). A bad address is a UsageError, one that cannot be bound (in use, not on this
  machine, not permitted) an InputError, one line each, raised by the constructor before
  any thread starts: nothing is half-started.
- The dissector never waits for a scraper: it only swaps the reference `get_snapshot`
  reads; rendering happens on the request's thread. Each connection has its own daemon
  thread, at most MAX_CONNECTIONS at once (more are closed at once), and every socket
  operation of one gives up after SOCKET_SECONDS: a scraper that connects and sends nothing,
  or never reads, holds one thread for that long and nothing else.
- A process forked while the server is bound (the capturer, the workers of -j) closes its
  copy of the listening socket at once: only the process serving holds the port.
- prometheus_client is imported only here and in `openmetrics` (only with --metrics).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import socketserver
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from dissector.errors import InputError, UsageError, os_reason

if TYPE_CHECKING:
    from dissector.metrics.store import Snapshot

DEFAULT_HOST = "127.0.0.1"  # loopback unless asked: metrics are not published by accident
MAX_CONNECTIONS = 8  # scrapes served at once; a ninth connection is closed at once
SOCKET_SECONDS = 10.0  # a scraper's socket waits this long for each read or write
POLL_SECONDS = 0.5  # how soon `close()` returns (the serving loop looks this often)
HEALTH_PATHS = frozenset({"/health", "/-/healthy"})
_HOSTNAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_FORM = "expected [HOST:]PORT, e.g. 9464, 127.0.0.1:9464, 0.0.0.0:9464 or [::1]:9464"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def parse_address(text: str) -> tuple[str, int]:
    """'[HOST:]PORT' as (host, port): loopback when no host is given; IPv6 in brackets."""
    raw = text.strip()
    if raw.startswith("["):
        host, sep, port = raw[1:].partition("]:")
        if not sep:
            raise UsageError(f"metrics address {text!r}: {_FORM}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise UsageError(f"metrics address {text!r}: {host!r} is not an IPv6 address") from None
    elif ":" in raw:
        host, _, port = raw.rpartition(":")
        if ":" in host:
            raise UsageError(
                f"metrics address {text!r}: put an IPv6 address in brackets: [::1]:9464"
            )
        host = host or DEFAULT_HOST
        if not _HOSTNAME.match(host):
            raise UsageError(f"metrics address {text!r}: {host!r} is not a host name or address")
    else:
        host, port = DEFAULT_HOST, raw
    if not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"metrics address {text!r}: the port must be a number 0-65535; {_FORM}")
    return host, int(port)


def url_of(host: str, port: int, path: str = "/metrics") -> str:
    """The http URL of a path on host:port (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


class MetricsServer:
    """The endpoint, bound by the constructor (errors: module rules); `start()` serves on a
    daemon thread, `close()` stops serving and releases the port."""

    def __init__(self, host: str, port: int, get_snapshot: Callable[[], Snapshot]) -> None:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        from dissector.metrics.openmetrics import SnapshotCollector

        where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (socket.gaierror, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
            raise InputError(f"cannot serve metrics on {where}: {reason}") from None
        family, _, _, _, sockaddr = infos[0]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(get_snapshot))
        try:
            address = (str(sockaddr[0]), int(sockaddr[1]))
            self._server = _Server(family, address, _app(make_wsgi_app(registry)))
        except OSError as exc:
            raise InputError(f"cannot serve metrics on {where}: {os_reason(exc)}") from None
        bound = self._server.socket.getsockname()
        self.host, self.port = str(bound[0]), int(bound[1])
        self.url = url_of(self.host, self.port)
        self._thread: threading.Thread | None = None
        _BOUND.add(self)

    def start(self) -> None:
        """Serve on a daemon thread (after any fork: module rules)."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(POLL_SECONDS,),
            name="metrics-server",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving (connections being answered finish on their own threads); free the port."""
        _BOUND.discard(self)
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def _forked(self) -> None:
        """In a child process: its copy of the listening socket closed (module rules)."""
        with contextlib.suppress(OSError):
            self._server.socket.close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_BOUND: weakref.WeakSet[MetricsServer] = weakref.WeakSet()


def _after_fork() -> None:
    for server in list(_BOUND):
        server._forked()
    _BOUND.clear()


os.register_at_fork(after_in_child=_after_fork)


def _app(metrics: App) -> App:
    """/metrics to prometheus_client's app (negotiation, gzip); health paths; 404 elsewhere."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            try:
                return metrics(environ, start_response)
            except Exception as exc:  # a bug in rendering: one line to the scraper, not a trace
                body = f"cannot render the metrics: {type(exc).__name__}: {exc}\n".encode()
                start_response("500 Internal Server Error", _text(body))
                return [body]
        if path in HEALTH_PATHS:
            body = b"ok\n"
            start_response("200 OK", _text(body))
            return [body]
        body = b"not found: the metrics are at /metrics, the health check at /health\n"
        start_response("404 Not Found", _text(body))
        return [body]

    return app


def _text(body: bytes) -> list[tuple[str, str]]:
    return [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]


class _Handler(WSGIRequestHandler):
    """One request per connection, every socket operation bounded (module rules), quiet."""

    timeout = SOCKET_SECONDS

    def handle(self) -> None:
        with contextlib.suppress(OSError):  # timeouts, resets: the scraper's loss only
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on live's stderr."""


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """wsgiref's server, a daemon thread per connection, at most MAX_CONNECTIONS at once."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, family: int, address: tuple[str, int], app: App) -> None:
        self.address_family = family
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)
        self.set_app(app)

    def server_bind(self) -> None:
        """Bound as asked (IPv6: that family only), without HTTPServer's reverse look-up of
        the host name (a DNS query, possibly slow)."""
        if self.address_family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: this one is closed
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper's broken connection is not the dissector's error: nothing printed."""
