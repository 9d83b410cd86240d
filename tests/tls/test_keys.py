"""TLS key schedules and record protection against published vectors.

TLS 1.3: RFC 8448 section 3 ("Simple 1-RTT Handshake"): from the published traffic secrets,
the published write keys and IVs; the published protected records open to the published
plaintext (client Finished, both sides' 50 bytes of application data, close_notify alerts).
TLS 1.2: the PRF against the widely used P_SHA256 test vector (IETF TLS WG mailing list,
"TLS 1.2 PRF test vectors", also in Go's and Botan's test suites).
"""

from __future__ import annotations

from dissector.tls.cipher import RecordCipher
from dissector.tls.keys import SUITES, prf12, suite_name, tls13_keys, tls13_update


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


AES128 = SUITES[0x1301]

# RFC 8448 section 3, as published.
C_HS_SECRET = h(
    "b3 ed db 12 6e 06 7f 35 a7 80 b3 ab f4 5e 2d 8f"
    " 3b 1a 95 07 38 f5 2e 96 00 74 6a 0e 27 a5 5a 21"
)
S_HS_SECRET = h(
    "b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4"
    " e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38"
)
C_AP_SECRET = h(
    "9e 40 64 6c e7 9a 7f 9d c0 5a f8 88 9b ce 65 52"
    " 87 5a fa 0b 06 df 00 87 f7 92 eb b7 c1 75 04 a5"
)
S_AP_SECRET = h(
    "a1 1a f9 f0 55 31 f8 56 ad 47 11 6b 45 a9 50 32"
    " 82 04 b4 f4 4b fb 6b 3a 4b 4f 1f 3f cb 63 16 43"
)
PUBLISHED_KEYS = [  # (traffic secret, write key, write IV)
    (S_HS_SECRET, "3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e e4 03 bc", "5d313eb2671276ee13000b30"),
    (C_HS_SECRET, "db fa a6 93 d1 76 2c 5b 66 6a f5 d9 50 25 8d 01", "5bd3c71b836e0b76bb73265f"),
    (S_AP_SECRET, "9f 02 28 3b 6c 9c 07 ef c2 6b b9 f2 ac 92 e3 56", "cf782b88dd83549aadf1e984"),
    (C_AP_SECRET, "17 42 2d da 59 6e d5 d9 ac d8 90 e3 c6 3f 50 51", "5b78923dee08579033e523d9"),
]
CLIENT_FINISHED = h(
    """17 03 03 00 35 75 ec 4d c2 38 cc e6 0b 29 80 44 a7 1e 21 9c 56 cc 77 b0 51 7f e9 b9 3c
    7a 4b fc 44 d8 7f 38 f8 03 38 ac 98 fc 46 de b3 84 bd 1c ae ac ab 68 67 d7 26 c4 05 46"""
)
CLIENT_APP = h(
    """17 03 03 00 43 a2 3f 70 54 b6 2c 94 d0 af fa fe 82 28 ba 55 cb ef ac ea 42 f9 14 aa 66
    bc ab 3f 2b 98 19 a8 a5 b4 6b 39 5b d5 4a 9a 20 44 1e 2b 62 97 4e 1f 5a 62 92 a2 97 70
    14 bd 1e 3d ea e6 3a ee bb 21 69 49 15 e4"""
)
SERVER_APP = h(
    """17 03 03 00 43 2e 93 7e 11 ef 4a c7 40 e5 38 ad 36 00 5f c4 a4 69 32 fc 32 25 d0 5f 82
    aa 1b 36 e3 0e fa f9 7d 90 e6 df fc 60 2d cb 50 1a 59 a8 fc c4 9c 4b f2 e5 f0 a2 1c 00
    47 c2 ab f3 32 54 0d d0 32 e1 67 c2 95 5d"""
)
CLIENT_ALERT = h("17 03 03 00 13 c9 87 27 60 65 56 66 b7 4d 7f f1 15 3e fd 6d b6 d0 b0 e3")
SERVER_ALERT = h("17 03 03 00 13 b5 8f d6 71 66 eb f5 99 d2 47 20 cf be 7e fa 7a 88 64 a9")
#: The client's Finished message as published (verify_data of 32 bytes).
FINISHED_MESSAGE = h(
    """14 00 00 20 a8 ec 43 6d 67 76 34 ae 52 5a c1 fc eb e1 1a 03 9e c1 76 94 fa c6 e9 85 27
    b6 42 f2 ed d5 ce 61"""
)


def _open(secret: bytes, record: bytes, seq: int) -> tuple[int, bytes] | None:
    cipher = RecordCipher(tls13_keys(AES128, secret), tls13=True)
    ctype, version = record[0], int.from_bytes(record[1:3], "big")
    assert int.from_bytes(record[3:5], "big") == len(record) - 5
    return cipher.open(seq, ctype, version, record[5:])


def test_rfc8448_traffic_keys() -> None:
    for secret, key, iv in PUBLISHED_KEYS:
        keys = tls13_keys(AES128, secret)
        assert (keys.key, keys.iv) == (h(key), h(iv))
        assert "key" not in repr(keys).lower().replace("keys(", "")  # no key material shown


def test_rfc8448_records_open_to_the_published_plaintext() -> None:
    # The client's first protected record (its Finished) is sequence 0 under its handshake
    # keys; application data and alerts are sequence 0 and 1 under the application keys
    # (the server sent its NewSessionTicket as application-key record 0 first).
    assert _open(C_HS_SECRET, CLIENT_FINISHED, 0) == (22, FINISHED_MESSAGE)
    assert _open(C_AP_SECRET, CLIENT_APP, 0) == (23, bytes(range(50)))
    assert _open(S_AP_SECRET, SERVER_APP, 1) == (23, bytes(range(50)))
    assert _open(C_AP_SECRET, CLIENT_ALERT, 1) == (21, b"\x01\x00")  # warning close_notify
    assert _open(S_AP_SECRET, SERVER_ALERT, 2) == (21, b"\x01\x00")


def test_rfc8448_wrong_sequence_key_or_byte_does_not_open() -> None:
    assert _open(C_AP_SECRET, CLIENT_APP, 1) is None
    assert _open(S_AP_SECRET, CLIENT_APP, 0) is None
    bad = bytearray(CLIENT_APP)
    bad[20] ^= 1
    assert _open(C_AP_SECRET, bytes(bad), 0) is None


def test_key_update_is_hkdf_expand_label_traffic_upd() -> None:
    # RFC 8446 7.2: application_traffic_secret_N+1 = HKDF-Expand-Label(secret_N,
    # "traffic upd", "", Hash.length); checked against HKDF-Expand computed by hand below.
    import hashlib
    import hmac

    label = b"tls13 traffic upd"
    info = (32).to_bytes(2, "big") + bytes([len(label)]) + label + b"\x00"
    expected = hmac.new(C_AP_SECRET, info + b"\x01", hashlib.sha256).digest()
    assert tls13_update(AES128, C_AP_SECRET) == expected


def test_tls12_prf_sha256_vector() -> None:
    secret = h("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35")
    seed = h("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c")
    expected = h(
        """e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53 c2 aa b2 1d 07 c3 d4 95 32 9b 52 d4
        e6 1e db 5a 6b 30 17 91 e9 0d 35 c9 c9 a4 6b 4e 14 ba f9 af 0f a0 22 f7 07 7d ef 17
        ab fd 37 97 c0 56 4b ab 4f bc 91 66 6e 9d ef 9b 97 fc e3 4f 79 67 89 ba a4 80 82 d1
        22 ee 42 c5 a7 2e 5a 51 10 ff f7 01 87 34 7b 66"""
    )
    assert prf12(secret, b"test label", seed, len(expected)) == expected


def test_suite_names_are_iana() -> None:
    assert suite_name(0x1301) == "TLS_AES_128_GCM_SHA256"
    assert suite_name(0xC030) == "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
    assert suite_name(0xCCA8) == "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
    assert suite_name(0xC013) == "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
    assert suite_name(0xABCD) == "0xABCD"
