"""Hand-made TLS 1.3 sessions: records protected with traffic secrets of the test's choosing.

Input: a seed (the session's client random and secrets derive from it), then what each side
writes: application data, KeyUpdates.
Output: `Tls13Craft`: the ClientHello and ServerHello records (in clear), one `Writer` per
side (its Finished, application data and KeyUpdate records, protected), and the NSS key log
lines of the session.
Rule: nothing here comes from the dissector: HKDF-Expand-Label (RFC 8446 section 7.1), the
traffic keys (7.3), the KeyUpdate schedule (7.2) and record protection (5.2, 5.3) are
written from the RFC with `hmac` and cryptography's AESGCM. Suite TLS_AES_128_GCM_SHA256
(0x1301). What OpenSSL does not let Python do (send KeyUpdates, put a record anywhere) is
what this is for; tests/support/memory_tls.py makes real sessions otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SUITE = 0x1301  # TLS_AES_128_GCM_SHA256
_HANDSHAKE, _APPDATA = 22, 23
_FINISHED, _KEY_UPDATE = 20, 24


def expand_label(secret: bytes, label: str, length: int) -> bytes:
    """HKDF-Expand-Label(secret, label, "", length) with SHA-256 (RFC 8446 7.1, RFC 5869)."""
    full = b"tls13 " + label.encode()
    info = struct.pack(">H", length) + bytes([len(full)]) + full + b"\x00"
    out, block, n = b"", b"", 1
    while len(out) < length:
        block = hmac.new(secret, block + info + bytes([n]), hashlib.sha256).digest()
        out += block
        n += 1
    return out[:length]


def record(ctype: int, body: bytes, version: int = 0x0303) -> bytes:
    return struct.pack(">BHH", ctype, version, len(body)) + body


def handshake(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "big") + body


class Writer:
    """One side's protected records: handshake keys until its Finished, then application
    keys, the next generation after each KeyUpdate; sequence numbers from 0 per key."""

    def __init__(self, hs_secret: bytes, app_secret: bytes) -> None:
        self._app = app_secret
        self._set(hs_secret)

    def _set(self, secret: bytes) -> None:
        self.secret = secret
        self._aead = AESGCM(expand_label(secret, "key", 16))
        self._iv = int.from_bytes(expand_label(secret, "iv", 12), "big")
        self.seq = 0

    def protect(self, inner_type: int, data: bytes) -> bytes:
        """TLSCiphertext of TLSInnerPlaintext(data, inner_type) (RFC 8446 5.2)."""
        inner = data + bytes([inner_type])
        header = struct.pack(">BHH", _APPDATA, 0x0303, len(inner) + 16)
        nonce = (self._iv ^ self.seq).to_bytes(12, "big")
        self.seq += 1
        return header + self._aead.encrypt(nonce, inner, header)

    def finished(self) -> bytes:
        """The side's Finished (its verify_data is never checked), then application keys."""
        out = self.protect(_HANDSHAKE, handshake(_FINISHED, bytes(32)))
        self._set(self._app)
        return out

    def app(self, data: bytes) -> bytes:
        return self.protect(_APPDATA, data)

    def key_update(self) -> bytes:
        """A KeyUpdate (update_not_requested), then the next generation (RFC 8446 7.2)."""
        out = self.protect(_HANDSHAKE, handshake(_KEY_UPDATE, b"\x00"))
        self._set(expand_label(self.secret, "traffic upd", 32))
        return out


class Tls13Craft:
    """One session: hellos in clear, a Writer per side, the key log lines."""

    def __init__(self, seed: int | str) -> None:
        def take(name: str) -> bytes:
            return hashlib.sha256(f"{seed}/{name}".encode()).digest()

        self.client_random = take("client random")
        self.secrets = {
            label: take(label)
            for label in (
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
                "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                "CLIENT_TRAFFIC_SECRET_0",
                "SERVER_TRAFFIC_SECRET_0",
            )
        }
        self.client = Writer(
            self.secrets["CLIENT_HANDSHAKE_TRAFFIC_SECRET"], self.secrets["CLIENT_TRAFFIC_SECRET_0"]
        )
        self.server = Writer(
            self.secrets["SERVER_HANDSHAKE_TRAFFIC_SECRET"], self.secrets["SERVER_TRAFFIC_SECRET_0"]
        )
        versions = struct.pack(">HHB", 43, 3, 2) + struct.pack(">H", 0x0304)
        body = (
            struct.pack(">H", 0x0303)
            + self.client_random
            + b"\x00"  # session id
            + struct.pack(">HH", 2, SUITE)
            + b"\x01\x00"  # compression: null
            + struct.pack(">H", len(versions))
            + versions
        )
        self.client_hello = record(_HANDSHAKE, handshake(1, body), 0x0301)
        chosen = struct.pack(">HHH", 43, 2, 0x0304)
        body = (
            struct.pack(">H", 0x0303)
            + take("server random")
            + b"\x00"
            + struct.pack(">HB", SUITE, 0)
            + struct.pack(">H", len(chosen))
            + chosen
        )
        self.server_hello = record(_HANDSHAKE, handshake(2, body))

    def keylog(self) -> str:
        """The NSS key log lines of this session."""
        random = self.client_random.hex()
        return "".join(f"{label} {random} {s.hex()}\n" for label, s in self.secrets.items())

    def server_flight(self) -> bytes:
        """ServerHello, then EncryptedExtensions and Finished protected (handshake keys)."""
        ee = self.server.protect(_HANDSHAKE, handshake(8, b"\x00\x00"))
        return self.server_hello + ee + self.server.finished()
