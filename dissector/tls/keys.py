"""TLS cipher suites and key schedules: from a key log's secrets to record keys.

Input: a cipher suite number and the secrets of one session (a TLS 1.3 traffic secret, or a
TLS 1.2 master secret with both hello randoms).
Output: `SUITES` (IANA name and parameters by number, `suite_name` for any number) and the
write keys of each side (`Keys`: AEAD or CBC key, IV, MAC key): `tls13_keys`, `tls13_update`
(KeyUpdate) and `tls12_keys`.
Rules: RFC 8446 section 7 (HKDF-Expand-Label, traffic keys, key update) and RFC 5246
section 5/6.3 (P_hash PRF, key expansion). The primitives (HKDF-Expand, HMAC) are the
`cryptography` package's; the schedule is written here because no well-kept Python library
exposes it for captured sessions. Pure: no I/O, nothing kept.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

GCM128, GCM256, CHACHA, CBC128, CBC256 = (
    "AES_128_GCM",
    "AES_256_GCM",
    "CHACHA20_POLY1305",
    "AES_128_CBC",
    "AES_256_CBC",
)
_KEY_LEN = {GCM128: 16, GCM256: 32, CHACHA: 32, CBC128: 16, CBC256: 32}
AEADS = frozenset({GCM128, GCM256, CHACHA})


@dataclass(frozen=True, slots=True)
class Suite:
    code: int
    name: str
    cipher: str | None  # GCM128, GCM256, CHACHA, CBC128, CBC256; None: not decrypted here
    hash: str  # the PRF / HKDF hash: sha256 or sha384
    mac: str | None = None  # CBC suites: the record MAC's hash (sha1, sha256, sha384)
    tls13: bool = False

    @property
    def key_len(self) -> int:
        return _KEY_LEN.get(self.cipher or "", 0)


def _suites() -> dict[int, Suite]:
    out: dict[int, Suite] = {}

    def add(code: int, name: str, cipher: str | None, h: str = "sha256", **kw: object) -> None:
        out[code] = Suite(code, name, cipher, h, **kw)  # type: ignore[arg-type]

    add(0x1301, "TLS_AES_128_GCM_SHA256", GCM128, tls13=True)
    add(0x1302, "TLS_AES_256_GCM_SHA384", GCM256, "sha384", tls13=True)
    add(0x1303, "TLS_CHACHA20_POLY1305_SHA256", CHACHA, tls13=True)
    add(0x1304, "TLS_AES_128_CCM_SHA256", None, tls13=True)
    add(0x1305, "TLS_AES_128_CCM_8_SHA256", None, tls13=True)
    # TLS 1.2 AEAD suites (RFC 5288, 5289, 7905).
    for base, kx in ((0x009C, "RSA"), (0x009E, "DHE_RSA")):
        add(base, f"TLS_{kx}_WITH_AES_128_GCM_SHA256", GCM128)
        add(base + 1, f"TLS_{kx}_WITH_AES_256_GCM_SHA384", GCM256, "sha384")
    for base, kx in ((0xC02B, "ECDHE_ECDSA"), (0xC02F, "ECDHE_RSA")):
        add(base, f"TLS_{kx}_WITH_AES_128_GCM_SHA256", GCM128)
        add(base + 1, f"TLS_{kx}_WITH_AES_256_GCM_SHA384", GCM256, "sha384")
    add(0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA)
    add(0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA)
    add(0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA)
    # TLS 1.2 CBC suites (RFC 5246, 4492, 5289).
    for code, kx, cipher, mac in (
        (0x002F, "RSA", CBC128, "sha1"),
        (0x0035, "RSA", CBC256, "sha1"),
        (0x003C, "RSA", CBC128, "sha256"),
        (0x003D, "RSA", CBC256, "sha256"),
        (0x0033, "DHE_RSA", CBC128, "sha1"),
        (0x0039, "DHE_RSA", CBC256, "sha1"),
        (0x0067, "DHE_RSA", CBC128, "sha256"),
        (0x006B, "DHE_RSA", CBC256, "sha256"),
        (0xC009, "ECDHE_ECDSA", CBC128, "sha1"),
        (0xC00A, "ECDHE_ECDSA", CBC256, "sha1"),
        (0xC013, "ECDHE_RSA", CBC128, "sha1"),
        (0xC014, "ECDHE_RSA", CBC256, "sha1"),
        (0xC023, "ECDHE_ECDSA", CBC128, "sha256"),
        (0xC024, "ECDHE_ECDSA", CBC256, "sha384"),
        (0xC027, "ECDHE_RSA", CBC128, "sha256"),
        (0xC028, "ECDHE_RSA", CBC256, "sha384"),
    ):
        bits = 128 if cipher == CBC128 else 256
        tail = {"sha1": "SHA", "sha256": "SHA256", "sha384": "SHA384"}[mac]
        prf = "sha384" if mac == "sha384" else "sha256"
        add(code, f"TLS_{kx}_WITH_AES_{bits}_CBC_{tail}", cipher, prf, mac=mac)
    return out


#: Cipher suites by number: those decrypted here, and a few more known by name.
SUITES = _suites()


def suite_name(code: int) -> str:
    """The IANA name of a suite, or its number (0x....) when it is not in SUITES."""
    suite = SUITES.get(code)
    return suite.name if suite is not None else f"0x{code:04X}"


@dataclass(frozen=True, slots=True)
class Keys:
    """One side's write keys: cipher key, IV (TLS 1.3 and ChaCha: 12 bytes; TLS 1.2 GCM: the
    4-byte salt; CBC: unused) and, for CBC suites, the MAC key."""

    suite: Suite
    key: bytes
    iv: bytes
    mac_key: bytes = b""

    def __repr__(self) -> str:
        return f"Keys({self.suite.name})"  # never the key material


_DIGEST_LEN = {"sha1": 20, "sha256": 32, "sha384": 48}


def hkdf_expand_label(secret: bytes, label: str, context: bytes, length: int, hash: str) -> bytes:
    """HKDF-Expand-Label (RFC 8446 section 7.1)."""
    # Imported on first use: only key log reads derive keys (cryptography takes ~0.1 s).
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    algorithm = hashes.SHA384() if hash == "sha384" else hashes.SHA256()
    full = b"tls13 " + label.encode()
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    return HKDFExpand(algorithm, length, info).derive(secret)


def tls13_keys(suite: Suite, secret: bytes) -> Keys:
    """A TLS 1.3 traffic secret's write key and IV (RFC 8446 section 7.3)."""
    key = hkdf_expand_label(secret, "key", b"", suite.key_len, suite.hash)
    iv = hkdf_expand_label(secret, "iv", b"", 12, suite.hash)
    return Keys(suite, key, iv)


def tls13_update(suite: Suite, secret: bytes) -> bytes:
    """The next traffic secret after a KeyUpdate (RFC 8446 section 7.2)."""
    return hkdf_expand_label(secret, "traffic upd", b"", _DIGEST_LEN[suite.hash], suite.hash)


def prf12(secret: bytes, label: bytes, seed: bytes, length: int, hash: str = "sha256") -> bytes:
    """The TLS 1.2 PRF: P_hash(secret, label + seed) (RFC 5246 section 5), HMAC from hashlib."""
    digest = getattr(hashlib, hash)
    seed = label + seed
    out = bytearray()
    a = seed
    while len(out) < length:
        a = hmac.new(secret, a, digest).digest()
        out += hmac.new(secret, a + seed, digest).digest()
    return bytes(out[:length])


def tls12_keys(
    suite: Suite, master: bytes, client_random: bytes, server_random: bytes
) -> tuple[Keys, Keys]:
    """(client write keys, server write keys) from a TLS 1.2 master secret (RFC 5246 6.3)."""
    mac_len = _DIGEST_LEN[suite.mac] if suite.mac else 0
    key_len = suite.key_len
    iv_len = 4 if suite.cipher in (GCM128, GCM256) else 12 if suite.cipher == CHACHA else 16
    size = 2 * (mac_len + key_len + iv_len)
    block = prf12(master, b"key expansion", server_random + client_random, size, suite.hash)
    parts = []
    at = 0
    for n in (mac_len, mac_len, key_len, key_len, iv_len, iv_len):
        parts.append(block[at : at + n])
        at += n
    c_mac, s_mac, c_key, s_key, c_iv, s_iv = parts
    return Keys(suite, c_key, c_iv, c_mac), Keys(suite, s_key, s_iv, s_mac)
