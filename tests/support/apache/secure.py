"""The secured Apache broker: token authentication and authorization, TLS, transactions and a
small maxMessageSize, in one standalone broker for every test that needs them.

Input:  a folder for its TLS files; the ApacheBroker of broker.py.
Output: `SecureBroker`, an ApacheBroker whose standalone.conf turns on token authentication
        (HS256, a secret made per run), authorization (SUPER_ROLE is its superuser, also the
        role of its own internal client), a TLS port (`.tls_port`, `.tls_url`, a certificate
        made for the run: `.pki`), the transaction coordinator and MAX_MESSAGE_SIZE; `token()`
        makes a signed token for any role and lifetime, `.super_token` the superuser's;
        `grant()` gives a role actions on a namespace through the admin API; `run_client()`
        runs SecureClient.java against it.
Rule:   tokens are JWTs built by hand (RFC 7519 with HS256, RFC 7515: base64url of the
        header and claims, HMAC-SHA256 over them) as the broker's AuthenticationProviderToken
        checks them: the role is the `sub` claim, `exp` its expiry in whole seconds.
        authenticationRefreshCheckSeconds=1 so that an expired token is challenged within a
        second or so. systemTopicEnabled=true for the transaction buffer's snapshots. The
        broker's own client (transaction markers, system topics) is sent to the TLS port
        (brokerClientTlsEnabled), so that the plain port carries only the tests' clients and
        a capture of it ends when they do. `captured` runs a client under tcpdump and waits
        for every connection's end in the file (an event). Nothing here reads our
        dissector's output.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeVar

from fuzz.tls_pki import TestPki, make_pki
from tests.support.apache.admin import admin
from tests.support.apache.broker import STARTUP_TIMEOUT, ApacheBroker
from tests.support.apache.client import run_java
from tests.support.apache.maven import HERE
from tests.support.apache.raw import RawClient
from tests.support.capture import Tcpdump, wait_closed
from tests.support.peers import LOOPBACK, free_port

#: The role of the superuser: the tests' set-up and the broker's own client.
SUPER_ROLE = "superuser"
#: Small enough that a 200 KB message must be chunked (the default is 5 MB).
MAX_MESSAGE_SIZE = 65536
#: How often the broker checks its connections' tokens for expiry (seconds).
REFRESH_CHECK_SECONDS = 1
#: Our Java program driving the official client against this broker (its modes).
SECURE_SOURCE = HERE / "SecureClient.java"
#: Bounds a capture's wait for its connections' ends (generous: an event is waited for).
CLOSE_TIMEOUT = 120.0

#: The broker's log line when its own client (the superuser) has connected to it.
INTERNAL_CLIENT = f"connected with role={SUPER_ROLE} using authMethod=token".encode()

T = TypeVar("T")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_token(secret: bytes, role: str, expires_at: int | None = None) -> str:
    """A JWT signed with HS256 by `secret` whose subject is `role`, expiring at `expires_at`
    (seconds since the epoch; never when None)."""
    header = {"alg": "HS256", "typ": "JWT"}
    claims: dict[str, object] = {"sub": role}
    if expires_at is not None:
        claims["exp"] = expires_at
    signing = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    signature = hmac.new(secret, signing.encode("ascii"), hashlib.sha256).digest()
    return f"{signing}.{_b64url(signature)}"


class SecureBroker(ApacheBroker):
    """An ApacheBroker with token auth, authorization, TLS, transactions and a small
    maxMessageSize; its TLS files in `folder`."""

    name = "apache-pulsar-secure"

    def __init__(self, folder: Path) -> None:
        self.secret = secrets.token_bytes(32)
        self.super_token = make_token(self.secret, SUPER_ROLE)
        self.pki: TestPki = make_pki(folder, host="localhost")
        self.tls_port = free_port()
        self.tls_url = f"pulsar+ssl://{LOOPBACK}:{self.tls_port}"
        key = base64.b64encode(self.secret).decode("ascii")
        super().__init__(
            extra={
                "authenticationEnabled": "true",
                "authenticationProviders": (
                    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
                ),
                "tokenSecretKey": f"data:;base64,{key}",
                "authenticationRefreshCheckSeconds": str(REFRESH_CHECK_SECONDS),
                "authorizationEnabled": "true",
                "superUserRoles": SUPER_ROLE,
                "brokerClientAuthenticationPlugin": (
                    "org.apache.pulsar.client.impl.auth.AuthenticationToken"
                ),
                "brokerClientAuthenticationParameters": f"token:{self.super_token}",
                "brokerServicePortTls": str(self.tls_port),
                "webServicePortTls": str(free_port()),  # the internal admin client's, with TLS
                "brokerClientTlsEnabled": "true",
                "brokerClientTrustCertsFilePath": str(self.pki.ca_path),
                "tlsCertificateFilePath": str(self.pki.cert_path),
                "tlsKeyFilePath": str(self.pki.key_path),
                "tlsTrustCertsFilePath": str(self.pki.ca_path),
                "transactionCoordinatorEnabled": "true",
                "systemTopicEnabled": "true",
                "maxMessageSize": str(MAX_MESSAGE_SIZE),
            }
        )

    def token(self, role: str, lifetime: float | None = None) -> str:
        """A token for `role` valid for `lifetime` seconds from now (forever when None)."""
        expires = None if lifetime is None else int(time.time() + lifetime)
        return make_token(self.secret, role, expires)

    def grant(self, role: str, actions: list[str], namespace: str = "public/default") -> None:
        """Give `role` these actions (produce, consume) on `namespace` (the admin API, as the
        superuser)."""
        path = f"/admin/v2/namespaces/{namespace}/permissions/{role}"
        admin(self, "POST", path, actions, token=self.super_token)

    def start(self) -> Self:
        """Start it, then make its own client connect (see `_warm_up`)."""
        super().start()
        try:
            self._warm_up()
        except BaseException:
            self.stop()
            raise
        return self

    def _warm_up(self) -> None:
        """Load one topic (a producer on it, as the superuser, over the plain port): the
        broker's own client then opens its TLS connection to the broker (the transaction
        buffer's system topic), which it keeps. Waited for as its log line, so that no
        capture of the tests sees it open, and each ends when the tests' clients do."""
        topic = f"persistent://public/default/warm-up-{secrets.token_hex(4)}"
        with RawClient(LOOPBACK, self.port) as client:
            client.connect("warm-up", self.super_token)
            client.send("LOOKUP", topic=topic, request_id=1)
            client.expect("LOOKUP_RESPONSE")
            client.send("PRODUCER", topic=topic, producer_id=0, request_id=2)
            client.expect("PRODUCER_SUCCESS")
        assert self.log_path is not None
        self._wait_for(self.log_path, INTERNAL_CLIENT, STARTUP_TIMEOUT)

    def run_client(
        self, mode: str, topic: str, *, role: str = SUPER_ROLE, lifetime: int = 0, tls: bool = False
    ) -> dict[str, Any]:
        """Run SecureClient.java in `mode` as `role` (tokens living `lifetime` seconds, 0:
        forever), over TLS with the test CA when `tls`; its record."""
        secret = base64.b64encode(self.secret).decode("ascii")
        url, cert = (self.tls_url, str(self.pki.ca_path)) if tls else (self.url, "-")
        return run_java(SECURE_SOURCE, [mode, url, topic, secret, role, str(lifetime), cert])


def captured(path: Path, port: int, run: Callable[[], T]) -> T:
    """`run()` under tcpdump on `port`, the file complete when every connection on the port
    that it saw open has ended; what `run` returned."""
    with Tcpdump(path, f"tcp port {port}"):  # returns once tcpdump is listening
        result = run()
        assert wait_closed(path, (port,), timeout=CLOSE_TIMEOUT), "a connection did not end"
    return result
