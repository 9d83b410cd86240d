"""The server side of TLS over one accepted TCP socket, for the recording proxy's TLS option.

Input:  an accepted (blocking) TCP socket and a server ``ssl.SSLContext`` (certificate,
        versions, ``keylog_filename``: the test's choice).
Output: a socket-like object whose ``recv`` / ``sendall`` / ``shutdown`` carry plaintext,
        and ``TlsInfo``: what the ``ssl`` module itself reported about the session
        (``version()``, ``cipher()``, the SNI the ``sni_callback`` saw, ALPN).
Rule:   OpenSSL objects are not safe to use from two threads at once, and the proxy pumps
        each direction in its own thread; so the TLS state lives in an ``ssl.SSLObject``
        over two memory BIOs, every use of it holds one lock, and the TLS bytes it
        produces are written to the socket under that same lock (in order).  The socket
        is read outside the lock.  A close_notify or a TCP EOF from the client is an EOF
        (``b""``); TLS failures raise ``ssl.SSLError`` (an ``OSError``), which ends the
        proxy's pump like any socket error.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from dataclasses import dataclass

__all__ = ["TlsInfo", "TlsSession", "record_sni"]

_SNI_ATTR = "_recorded_sni"


@dataclass
class TlsInfo:
    """What the terminator's ``ssl`` object reported (filled in when the handshake completes)."""

    version: str | None = None  # SSLObject.version(), e.g. "TLSv1.3"
    cipher: str | None = None  # SSLObject.cipher()[0], the OpenSSL name (TLS 1.3: IANA name)
    cipher_bits: int | None = None
    sni: str | None = None  # server_name as the sni_callback received it
    alpn: str | None = None  # SSLObject.selected_alpn_protocol()


def record_sni(context: ssl.SSLContext) -> None:
    """Make ``context`` remember, on each session's SSLObject, the SNI the client sent.

    Replaces the context's ``sni_callback``.  Python hands the callback the very
    SSLObject that ``wrap_bio`` returned (``name`` is None without SNI).
    """

    def callback(obj: ssl.SSLObject, name: str, ctx: ssl.SSLContext) -> None:
        setattr(obj, _SNI_ATTR, name)

    context.sni_callback = callback


class TlsSession:
    """Server-side TLS on ``sock``: plaintext in and out, usable from two threads."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.sock = sock
        self.info = TlsInfo()
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._lock = threading.Lock()
        self._handshaken = threading.Event()
        self._closed = False

    def _flush(self) -> None:
        """Send what OpenSSL wrote (handshake, tickets, records, alerts); lock held."""
        pending = self._outgoing.read()
        if pending:
            self.sock.sendall(pending)

    def _step(self, size: int) -> bytes | None:
        """Handshake, then read plaintext; None when more TLS bytes are needed; lock held."""
        try:
            if not self._handshaken.is_set():
                self._tls.do_handshake()
                cipher = self._tls.cipher()
                info = self.info
                info.version = self._tls.version()
                info.cipher = cipher[0] if cipher else None
                info.cipher_bits = cipher[2] if cipher else None
                info.sni = getattr(self._tls, _SNI_ATTR, None)
                info.alpn = self._tls.selected_alpn_protocol()
                self._handshaken.set()
            return self._tls.read(size)
        except ssl.SSLWantReadError:
            return None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify, or a bare TCP EOF
            return b""
        finally:
            self._flush()

    def recv(self, size: int) -> bytes:
        """Up to ``size`` plaintext bytes from the client; ``b""`` at its end."""
        while True:
            with self._lock:
                data = self._step(size)
            if data is not None:
                return data
            raw = self.sock.recv(max(size, 1 << 16))
            with self._lock:
                if not raw:
                    self._incoming.write_eof()
                    if not self._handshaken.is_set():
                        return b""
                else:
                    self._incoming.write(raw)

    def sendall(self, data: bytes) -> None:
        """Encrypt ``data`` to the client (waits for the handshake to finish)."""
        if not self._handshaken.wait(timeout=30):
            raise ssl.SSLError("TLS handshake did not complete within 30 s")
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[self._tls.write(view) :]
                self._flush()

    def shutdown(self, how: int) -> None:
        """Send close_notify (once), then shut the TCP socket down (``how``)."""
        with self._lock:
            if not self._closed and self._handshaken.is_set():
                self._closed = True
                # want-read: the peer's close_notify is not awaited
                with contextlib.suppress(ssl.SSLError):
                    self._tls.unwrap()
                self._flush()
        self.sock.shutdown(how)
