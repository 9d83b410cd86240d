"""Open one protected TLS record: AEAD (TLS 1.3, TLS 1.2 GCM and ChaCha20) or AES-CBC (1.2).

Input: one side's `Keys` (dissector.tls.keys) and, per record, its sequence number,
content type, legacy version and protected fragment.
Output: `RecordCipher.open` -> (content type, plaintext), or None when the record does not
authenticate with these keys at that sequence number (wrong key, wrong sequence number,
corrupted record): never an exception.
Rules: RFC 8446 section 5.2-5.4 (nonce = IV xor sequence number; additional data = the
record header; the plaintext ends with its real content type, after zero padding); RFC 5288
(TLS 1.2 GCM: 4-byte salt + 8-byte explicit nonce; additional data = sequence number, type,
version, plaintext length); RFC 7905 (TLS 1.2 ChaCha20: nonce as TLS 1.3); RFC 5246 6.2.3.2
and RFC 7366 (CBC: explicit IV, MAC-then-encrypt or encrypt-then-MAC). The ciphers are the
`cryptography` package's.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from dissector.tls.keys import CHACHA, GCM128, GCM256, Keys

_TAG = 16
_SEQ = struct.Struct(">Q")
_AAD12 = struct.Struct(">QBHH")
_HEADER = struct.Struct(">BHH")


class RecordCipher:
    """Opens the records of one side of one session (see the module docstring)."""

    __slots__ = ("_aead", "_iv", "_mac", "_mac_key", "etm", "keys", "tls13")

    def __init__(self, keys: Keys, *, tls13: bool, etm: bool = False) -> None:
        """etm: the session negotiated encrypt_then_mac (RFC 7366; CBC suites only)."""
        self.keys = keys
        self.tls13 = tls13
        self.etm = etm
        cipher = keys.suite.cipher
        self._aead: AESGCM | ChaCha20Poly1305 | None = None
        if cipher in (GCM128, GCM256):
            self._aead = AESGCM(keys.key)
        elif cipher == CHACHA:
            self._aead = ChaCha20Poly1305(keys.key)
        self._iv = int.from_bytes(keys.iv, "big") if len(keys.iv) == 12 else 0
        self._mac = getattr(hashlib, keys.suite.mac) if keys.suite.mac else None
        self._mac_key = keys.mac_key

    def open(self, seq: int, ctype: int, version: int, fragment: bytes) -> tuple[int, bytes] | None:
        """(content type, plaintext) of one record, or None if it does not authenticate."""
        try:
            if self.tls13:
                return self._open13(seq, ctype, version, fragment)
            if self._aead is not None:
                return self._open12_aead(seq, ctype, version, fragment)
            return self._open12_cbc(seq, ctype, version, fragment)
        except (InvalidTag, ValueError, OverflowError):
            return None

    def _nonce(self, seq: int) -> bytes:
        return (self._iv ^ seq).to_bytes(12, "big")

    def _open13(self, seq: int, ctype: int, version: int, fragment: bytes) -> tuple[int, bytes]:
        aead = self._aead
        if aead is None or ctype != 23 or len(fragment) <= _TAG:
            raise ValueError("not a TLS 1.3 protected record")
        header = _HEADER.pack(ctype, version, len(fragment))
        inner = aead.decrypt(self._nonce(seq), fragment, header)
        end = len(inner.rstrip(b"\x00"))
        if end == 0:
            raise ValueError("TLSInnerPlaintext without a content type")
        return inner[end - 1], inner[: end - 1]

    def _open12_aead(
        self, seq: int, ctype: int, version: int, fragment: bytes
    ) -> tuple[int, bytes]:
        aead = self._aead
        assert aead is not None
        if self.keys.suite.cipher == CHACHA:
            nonce, body = self._nonce(seq), fragment
        else:
            nonce, body = self.keys.iv + fragment[:8], fragment[8:]
        if len(body) < _TAG:
            raise ValueError("record shorter than its tag")
        aad = _AAD12.pack(seq, ctype, version, len(body) - _TAG)
        return ctype, aead.decrypt(nonce, body, aad)

    def _open12_cbc(self, seq: int, ctype: int, version: int, fragment: bytes) -> tuple[int, bytes]:
        digest = self._mac
        if digest is None:
            raise ValueError("no cipher for this suite")
        mac_len = digest().digest_size
        key = self.keys.key
        if self.etm:
            body, tag = fragment[:-mac_len], fragment[-mac_len:]
            mac = hmac.new(
                self._mac_key, _AAD12.pack(seq, ctype, version, len(body)) + body, digest
            )
            if len(fragment) < mac_len + 32 or not hmac.compare_digest(mac.digest(), tag):
                raise ValueError("bad MAC")
            return ctype, _cbc_plain(key, body)
        if len(fragment) < 32 or len(fragment) % 16:
            raise ValueError("not a whole number of blocks")
        padded = _cbc_plain(key, fragment)
        if len(padded) < mac_len:
            raise ValueError("shorter than its MAC")
        plain, tag = padded[:-mac_len], padded[-mac_len:]
        mac = hmac.new(self._mac_key, _AAD12.pack(seq, ctype, version, len(plain)) + plain, digest)
        if not hmac.compare_digest(mac.digest(), tag):
            raise ValueError("bad MAC")
        return ctype, plain


def _cbc_plain(key: bytes, body: bytes) -> bytes:
    """AES-CBC decryption of explicit IV + blocks, padding checked and removed."""
    if len(body) < 32 or len(body) % 16:
        raise ValueError("not a whole number of blocks")
    dec = Cipher(algorithms.AES(key), modes.CBC(body[:16])).decryptor()
    padded = dec.update(body[16:]) + dec.finalize()
    pad = padded[-1]
    if pad + 1 > len(padded) or padded[-pad - 1 :] != bytes([pad]) * (pad + 1):
        raise ValueError("bad padding")
    return padded[: -pad - 1]
