"""TLS 1.3 records opened and sealed with a session's key log secrets, to rewrite sessions.

Input: the TLS bytes each side of a genuine TLS 1.3 session sent (OpenSSL's, fuzz.memory_tls),
its NSS key log and its cipher suite.
Output: `Tls13Rewriter`: the session's records with every protected application-phase record
opened (its inner content type and plaintext), then sealed again under new keys, with
KeyUpdate messages inserted where asked (each one moves its side to the next traffic secret),
so a chain of updates is a valid session a peer would accept.
Rule: RFC 8446 only (HKDF-Expand-Label section 7.1, traffic keys 7.3, key update 7.2, record
protection 5.2/5.3), written here with `hmac` and `cryptography`'s AEADs: nothing of the
dissector's own TLS code is used, so what it decrypts is checked against an independent
implementation.
"""

from __future__ import annotations

import hmac
import struct
from collections.abc import Callable
from typing import NamedTuple

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

# suite id -> (hash, key length, AEAD)
SUITES: dict[int, tuple[str, int, Callable[[bytes], AESGCM | ChaCha20Poly1305]]] = {
    0x1301: ("sha256", 16, AESGCM),
    0x1302: ("sha384", 32, AESGCM),
    0x1303: ("sha256", 32, ChaCha20Poly1305),
}
HANDSHAKE, APPLICATION_DATA, ALERT, CCS = 22, 23, 21, 20
KEY_UPDATE = 24  # handshake message type
_LABELS = {
    0: ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0"),
    1: ("SERVER_HANDSHAKE_TRAFFIC_SECRET", "SERVER_TRAFFIC_SECRET_0"),
}


def hkdf_expand_label(hash_name: str, secret: bytes, label: bytes, length: int) -> bytes:
    """HKDF-Expand-Label(secret, label, "", length) (RFC 8446 7.1)."""
    full = b"tls13 " + label
    info = struct.pack(">HB", length, len(full)) + full + b"\x00"
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(secret, block + info + bytes([i]), hash_name).digest()
        out += block
        i += 1
    return out[:length]


class Protection:
    """One direction's record protection under one traffic secret; counts its records."""

    def __init__(self, suite: int, secret: bytes) -> None:
        hash_name, key_len, aead = SUITES[suite]
        self.suite, self.secret, self.seq = suite, secret, 0
        self._aead = aead(hkdf_expand_label(hash_name, secret, b"key", key_len))
        self._iv = hkdf_expand_label(hash_name, secret, b"iv", 12)

    def _nonce(self) -> bytes:
        return bytes(a ^ b for a, b in zip(self._iv, self.seq.to_bytes(12, "big"), strict=True))

    def seal(self, inner_type: int, plaintext: bytes, padding: int = 0) -> bytes:
        inner = plaintext + bytes([inner_type]) + bytes(padding)
        header = struct.pack(">BHH", APPLICATION_DATA, 0x0303, len(inner) + 16)
        sealed = self._aead.encrypt(self._nonce(), inner, header)
        self.seq += 1
        return header + sealed

    def open(self, record: bytes) -> tuple[int, bytes] | None:
        """(inner content type, plaintext), or None when it does not open at seq."""
        try:
            inner = self._aead.decrypt(self._nonce(), record[5:], record[:5])
        except Exception:  # cryptography's InvalidTag
            return None
        self.seq += 1
        body = inner.rstrip(b"\x00")
        return body[-1], body[:-1]

    def updated(self) -> Protection:
        """The protection of the next traffic secret (RFC 8446 7.2)."""
        hash_name = SUITES[self.suite][0]
        size = len(self.secret)
        return Protection(
            self.suite, hkdf_expand_label(hash_name, self.secret, b"traffic upd", size)
        )


def split_records(data: bytes) -> list[bytes]:
    """Whole records of a TLS byte stream (an incomplete tail is left out)."""
    out, at = [], 0
    while at + 5 <= len(data):
        end = at + 5 + (data[at + 3] << 8 | data[at + 4])
        if end > len(data):
            break
        out.append(data[at:end])
        at = end
    return out


def secrets_of(keylog: str) -> dict[str, bytes]:
    """label -> secret of a key log holding one session."""
    out = {}
    for line in keylog.splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith("#"):
            out[parts[0]] = bytes.fromhex(parts[2])
    return out


class Item(NamedTuple):
    """A record of the session: `raw` as sent, or (for the application phase) opened."""

    flight: int  # index of the flight (run.wire item) that carried it
    raw: bytes
    inner: int  # inner content type of an opened application-phase record; -1 otherwise
    plain: bytes


class Tls13Rewriter:
    """A TLS 1.3 session's records per direction, application phase opened (see module)."""

    def __init__(self, wire: list[tuple[int, bytes]], keylog: str, suite: int) -> None:
        secrets = secrets_of(keylog)
        self.suite = suite
        self.flights = [d for d, _ in wire]
        self.items: dict[int, list[Item]] = {0: [], 1: []}
        for side in (0, 1):
            hs_label, app_label = _LABELS[side]
            hs_keys = Protection(suite, secrets[hs_label])
            app_keys = Protection(suite, secrets[app_label])
            stream = b"".join(d for s, d in wire if s == side)
            ends, at = [], 0  # where each flight of this side ends in its stream
            for s, d in wire:
                at += len(d) if s == side else 0
                ends.append(at)
            at = 0
            for rec in split_records(stream):
                flight = next(i for i, e in enumerate(ends) if e > at)
                at += len(rec)
                if rec[0] != APPLICATION_DATA or hs_keys.open(rec) is not None:
                    self.items[side].append(Item(flight, rec, -1, b""))
                    continue
                opened = app_keys.open(rec)
                if opened is None:
                    raise ValueError(f"side {side}: a record opens with no key of the key log")
                self.items[side].append(Item(flight, rec, *opened))
        self.secrets = secrets

    def app_records(self, side: int) -> int:
        return sum(1 for it in self.items[side] if it.inner >= 0)

    def rebuild(self, updates: dict[int, dict[int, int]]) -> list[tuple[int, bytes]]:
        """The session's flights again, the application phase sealed anew; updates[side][k]:
        KeyUpdate messages sent before that side's k-th application record (k may equal
        the number of records: at the end of its last flight)."""
        out: list[list[bytes]] = [[] for _ in self.flights]
        for side in (0, 1):
            keys = Protection(self.suite, self.secrets[_LABELS[side][1]])
            chain = updates.get(side, {})
            k = 0
            last = 0
            for it in self.items[side]:
                last = it.flight
                if it.inner < 0:
                    out[it.flight].append(it.raw)
                    continue
                for _ in range(chain.get(k, 0)):
                    out[it.flight].append(keys.seal(HANDSHAKE, key_update()))
                    keys = keys.updated()
                out[it.flight].append(keys.seal(it.inner, it.plain))
                k += 1
            for _ in range(chain.get(k, 0)):
                out[last].append(keys.seal(HANDSHAKE, key_update()))
                keys = keys.updated()
        return [(d, b"".join(parts)) for d, parts in zip(self.flights, out, strict=True)]


def key_update(request: bool = False) -> bytes:
    """A KeyUpdate handshake message (RFC 8446 4.6.3)."""
    return bytes([KEY_UPDATE, 0, 0, 1, 1 if request else 0])
