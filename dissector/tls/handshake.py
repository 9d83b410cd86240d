"""TLS handshake messages: split them out of handshake records and read what they show.

Input: the bytes of handshake records of one side, in order (`HandshakeBuffer.feed`; clear
ones, or decrypted ones for TLS 1.3), and each message for `Hello`/`read_*` functions.
Output: (type, body) of each whole message; what the hellos say (`ClientHello`,
`ServerHello`), the ALPN protocol of EncryptedExtensions, the server certificate's subject,
issuer and expiry (`CertInfo`), alert names.
Rules: RFC 8446 section 4 and RFC 5246 section 7.4 layouts; anything that does not parse
gives None (the caller reports it), never an exception; a message is buffered up to
MAX_MESSAGE bytes (a certificate chain fits), larger ones are dropped. X.509 parsing is the
`cryptography` package's.
"""

from __future__ import annotations

import struct
from datetime import UTC
from typing import NamedTuple

#: Largest handshake message buffered (certificate chains are a few KiB to tens of KiB).
MAX_MESSAGE = 256 << 10

CLIENT_HELLO, SERVER_HELLO, NEW_SESSION_TICKET = 1, 2, 4
ENCRYPTED_EXTENSIONS, CERTIFICATE, FINISHED, KEY_UPDATE = 8, 11, 20, 24
#: ServerHello.random of a HelloRetryRequest (RFC 8446 section 4.1.3).
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
_EXT_SNI, _EXT_ALPN, _EXT_ETM, _EXT_VERSIONS = 0, 16, 22, 43

VERSIONS = {0x0300: "SSL 3.0", 0x0301: "TLS 1.0", 0x0302: "TLS 1.1", 0x0303: "TLS 1.2"}
VERSIONS[0x0304] = "TLS 1.3"

ALERTS = {
    0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac", 22: "record_overflow",
    40: "handshake_failure", 42: "bad_certificate", 43: "unsupported_certificate",
    44: "certificate_revoked", 45: "certificate_expired", 46: "certificate_unknown",
    47: "illegal_parameter", 48: "unknown_ca", 49: "access_denied", 50: "decode_error",
    51: "decrypt_error", 70: "protocol_version", 71: "insufficient_security",
    80: "internal_error", 86: "inappropriate_fallback", 90: "user_canceled",
    100: "no_renegotiation", 109: "missing_extension", 110: "unsupported_extension",
    112: "unrecognized_name", 113: "bad_certificate_status_response",
    115: "unknown_psk_identity", 116: "certificate_required", 120: "no_application_protocol",
}  # fmt: skip

_U16 = struct.Struct(">H")


def version_name(version: int) -> str:
    return VERSIONS.get(version, f"0x{version:04X}")


def alert_name(description: int) -> str:
    return ALERTS.get(description, f"alert {description}")


class HandshakeBuffer:
    """Whole handshake messages out of one side's handshake bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        out: list[tuple[int, bytes]] = []
        at = 0
        while len(buf) - at >= 4:
            length = int.from_bytes(buf[at + 1 : at + 4], "big")
            if length > MAX_MESSAGE:
                buf.clear()  # not a message we can hold: drop what is here
                return out
            if len(buf) - at - 4 < length:
                break
            out.append((buf[at], bytes(buf[at + 4 : at + 4 + length])))
            at += 4 + length
        del buf[:at]
        return out

    def clear(self) -> None:
        self._buf.clear()


class ClientHello(NamedTuple):
    random: bytes
    sni: str | None
    alpn: tuple[str, ...]


class ServerHello(NamedTuple):
    random: bytes
    version: int  # negotiated: supported_versions when present, else legacy_version
    suite: int
    alpn: str | None
    etm: bool  # encrypt_then_mac (RFC 7366)
    retry: bool  # a HelloRetryRequest


class CertInfo(NamedTuple):
    subject: str
    issuer: str
    not_after: int  # microseconds since the epoch, UTC


class _Reader:
    """Bounds-checked reads; IndexError/ValueError on short input (caught by callers)."""

    __slots__ = ("at", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise ValueError("short")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(_U16.unpack(self.take(2))[0])

    def u24(self) -> int:
        return int.from_bytes(self.take(3), "big")

    def vec(self, size: int) -> bytes:
        n = {1: self.u8, 2: self.u16, 3: self.u24}[size]()
        return self.take(n)

    def left(self) -> int:
        return len(self.data) - self.at


def _extensions(r: _Reader) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    if r.left() < 2:
        return out
    ext = _Reader(r.vec(2))
    while ext.left() >= 4:
        kind = ext.u16()
        out[kind] = ext.vec(2)
    return out


def _alpn_list(data: bytes) -> tuple[str, ...]:
    r = _Reader(_Reader(data).vec(2))
    names = []
    while r.left():
        names.append(r.vec(1).decode("ascii", "replace"))
    return tuple(names)


def read_client_hello(body: bytes) -> ClientHello | None:
    try:
        r = _Reader(body)
        r.take(2)
        random = r.take(32)
        r.vec(1)  # session id
        r.vec(2)  # cipher suites
        r.vec(1)  # compression methods
        ext = _extensions(r)
        sni = None
        if _EXT_SNI in ext:
            names = _Reader(_Reader(ext[_EXT_SNI]).vec(2))
            while names.left():
                kind, name = names.u8(), names.vec(2)
                if kind == 0:
                    sni = name.decode("ascii", "replace")
                    break
        alpn = _alpn_list(ext[_EXT_ALPN]) if _EXT_ALPN in ext else ()
        return ClientHello(random, sni, alpn)
    except (ValueError, IndexError):
        return None


def read_server_hello(body: bytes) -> ServerHello | None:
    try:
        r = _Reader(body)
        version = r.u16()
        random = r.take(32)
        r.vec(1)
        suite = r.u16()
        r.u8()
        ext = _extensions(r)
        if _EXT_VERSIONS in ext and len(ext[_EXT_VERSIONS]) == 2:
            version = int(_U16.unpack(ext[_EXT_VERSIONS])[0])
        alpn = _alpn_list(ext[_EXT_ALPN]) if _EXT_ALPN in ext else ()
        return ServerHello(
            random, version, suite, alpn[0] if alpn else None, _EXT_ETM in ext, random == HRR_RANDOM
        )
    except (ValueError, IndexError):
        return None


def read_encrypted_extensions_alpn(body: bytes) -> str | None:
    """The ALPN protocol a TLS 1.3 server chose (in EncryptedExtensions), if any."""
    try:
        ext = _extensions(_Reader(body))
        alpn = _alpn_list(ext[_EXT_ALPN]) if _EXT_ALPN in ext else ()
        return alpn[0] if alpn else None
    except (ValueError, IndexError):
        return None


def read_certificate(body: bytes, tls13: bool) -> CertInfo | None:
    """The first (the server's own) certificate of a Certificate message."""
    try:
        r = _Reader(body)
        if tls13:
            r.vec(1)  # certificate_request_context
        chain = _Reader(r.vec(3))
        der = chain.vec(3)
    except (ValueError, IndexError):
        return None
    return cert_info(der)


def cert_info(der: bytes) -> CertInfo | None:
    """Subject, issuer (RFC 4514) and expiry of a DER certificate; None if it does not parse."""
    from cryptography import x509  # imported on the first certificate only

    try:
        cert = x509.load_der_x509_certificate(der)
        after = cert.not_valid_after_utc.astimezone(UTC)
        ts = int(after.timestamp()) * 1_000_000 + after.microsecond
        return CertInfo(cert.subject.rfc4514_string(), cert.issuer.rfc4514_string(), ts)
    except Exception:  # any certificate the library refuses (InvalidVersion, ValueError, ...)
        return None  # is reported by the caller as undecodable (fuzzing: InvalidVersion)
