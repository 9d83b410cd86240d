"""Genuine TLS sessions made in memory (Python's `ssl` with `MemoryBIO`s), for crafted captures.

Input: the plaintext each side writes, in order (Pulsar frames), and TLS settings (version,
OpenSSL cipher string).
Output: `TlsRun`: the TLS bytes each side put on the wire, in order (`wire`: one item per
flight), the NSS key log OpenSSL wrote (`keylog_filename`), and what `ssl` itself reports
(`version()`, `cipher()`), the independent record the tests compare with.
Rule: nothing here knows TLS internals: OpenSSL makes every byte; the certificates are
fuzz/tls_pki.py's (a CA and an RSA server certificate for SNI), made per call unless one is
given (the fuzz campaign makes one per worker: an RSA key takes tens of milliseconds).
The tests (tests/test_tls_crafted.py) and the fuzz campaign's `tls` level share this module;
it lives in fuzz/ because fuzz/ does not import tests/.
"""

from __future__ import annotations

import contextlib
import datetime
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dissector.events import Direction
from fuzz.tls_pki import TestPki, make_pki

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
SNI = "broker.pulsar.test"
#: The server certificate make_pki builds, as RFC 4514 strings (most specific first).
SUBJECT = f"CN={SNI},O=pulsar-dissector tests,C=CH"
ISSUER = "CN=pulsar-dissector test CA,O=pulsar-dissector tests,C=CH"
#: OpenSSL's SSL_OP_NO_ENCRYPT_THEN_MAC (not exported by the ssl module).
OP_NO_ENCRYPT_THEN_MAC = 1 << 19


@dataclass
class TlsRun:
    wire: list[tuple[Direction, bytes]]  # TLS bytes in the order they were sent
    keylog: Path
    version: str  # ssl's version(): "TLSv1.3", "TLSv1.2"
    cipher: str  # ssl's cipher()[0] (OpenSSL's name; the IANA name for TLS 1.3)
    cipher_id: int  # the suite's number, from ssl's get_ciphers()
    not_after: datetime.datetime  # the server certificate's expiry, as built


def run_tls(
    folder: Path,
    exchange: Sequence[tuple[Direction, bytes]],
    *,
    tls12: bool = False,
    ciphers: str | None = None,
    options: int = 0,
    keylog_name: str = "keys.log",
    alpn: Sequence[str] = (),
    pki: TestPki | None = None,
    server_curve: str | None = None,
) -> TlsRun:
    """A TLS session whose client and server write `exchange` (each item: who writes what),
    then close with close_notify both ways. server_curve: the only ECDH group the server
    accepts (e.g. "secp384r1", for which OpenSSL's client sends no key share: TLS 1.3 then
    starts with a HelloRetryRequest)."""
    if pki is None:
        pki = make_pki(folder / f"pki-{keylog_name}", SNI)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.cert_path, pki.key_path)
    if server_curve is not None:
        server_ctx.set_ecdh_curve(server_curve)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(pki.ca_path)
    keylog = folder / keylog_name
    client_ctx.keylog_filename = str(keylog)
    for ctx in (server_ctx, client_ctx):
        ctx.options |= options
        if tls12:
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        if ciphers:
            ctx.set_ciphers(ciphers)
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
    bios = {side: (ssl.MemoryBIO(), ssl.MemoryBIO()) for side in (C2B, B2C)}  # (in, out)
    client = client_ctx.wrap_bio(*bios[C2B], server_hostname=SNI)
    server = server_ctx.wrap_bio(*bios[B2C], server_side=True)
    ends = {C2B: client, B2C: server}
    wire: list[tuple[Direction, bytes]] = []
    shaken: set[Direction] = set()
    received = {C2B: bytearray(), B2C: bytearray()}  # plaintext each side read

    def step(side: Direction) -> None:
        end = ends[side]
        try:
            if side not in shaken:
                end.do_handshake()
                shaken.add(side)
            while True:
                chunk = end.read(1 << 20)
                if not chunk:
                    break
                received[side] += chunk
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass

    def pump() -> None:
        """Move what each side wrote to the other, recording it, until nothing moves."""
        moved = True
        while moved:
            moved = False
            for side, peer in ((C2B, B2C), (B2C, C2B)):
                data = bios[side][1].read()
                if data:
                    wire.append((side, data))
                    bios[peer][0].write(data)
                    moved = True
            for side in (C2B, B2C):
                step(side)
            moved = moved or any(bios[side][1].pending for side in (C2B, B2C))

    step(C2B)
    pump()
    for side, data in exchange:
        ends[side].write(data)
        pump()
    for end in (client, server):
        with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLError):
            end.unwrap()
        pump()
    sent = {side: b"".join(d for s, d in exchange if s is side) for side in (C2B, B2C)}
    assert bytes(received[B2C]) == sent[C2B] and bytes(received[C2B]) == sent[B2C]
    name, _, _ = client.cipher() or ("", "", 0)
    ids = {c["name"]: c["id"] & 0xFFFF for c in client_ctx.get_ciphers()}
    return TlsRun(wire, keylog, client.version() or "", name, ids.get(name, -1), pki.not_after)
