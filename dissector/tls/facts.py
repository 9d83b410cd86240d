"""What one TLS connection's handshake shows: hellos, suite, ALPN, certificate, alerts.

Input: the handshake messages (kind, body) and alert bodies of one connection, in clear or
decrypted, each with the record it came in (`TlsSession` hands them over in order); the
session's `KeyRing`, which this fills in.
Output: the KeyRing's hellos and suite; anomalies (`tls.unsupported_cipher`,
`tls.certificate_undecodable`, `tls.alert`, `tls.handshake_failure`); `info()`, the
conversations table's TLS columns; `done`, `failed` and `unsupported` for the session.
Rules:
- The ClientHello and ServerHello go to the KeyRing (a HelloRetryRequest as `retry`); after
  either, `message` says so, since records waiting for that hello may now open.
- With a key log, a suite we cannot decrypt is `tls.unsupported_cipher` (once).
- ALPN: the server's choice (ServerHello or EncryptedExtensions), else what the client
  offered. The certificate is the server's first one; one that is not X.509 is
  `tls.certificate_undecodable`.
- Alerts other than close_notify are `tls.alert`; a fatal one before the handshake is done
  is `tls.handshake_failure` (the session reports an unfinished handshake at its end).
"""

from __future__ import annotations

from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly, Direction, TlsInfo
from dissector.tls import handshake as hs
from dissector.tls.keyring import KeyRing
from dissector.tls.keys import SUITES, suite_name
from dissector.tls.plain import TlsEvent
from dissector.tls.records import Record
from dissector.tls.side import Side

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT


class Facts:
    """The handshake of one TLS connection as far as it has been seen."""

    __slots__ = ("_alpn", "_cert", "_keys", "conn_id", "done", "failed", "unsupported")

    def __init__(self, conn_id: int, keys: KeyRing) -> None:
        self.conn_id = conn_id
        self._keys = keys
        self._alpn: str | None = None
        self._cert: hs.CertInfo | None = None
        self.unsupported = False  # the suite cannot be decrypted (reported)
        self.failed = False  # handshake failure reported
        self.done = False  # handshake completed (as far as can be seen)

    def message(
        self, side: Side, rec: Record, kind: int, body: bytes, decrypting: bool, out: list[TlsEvent]
    ) -> bool:
        """Read one handshake message of `side`; True when it was a hello the keys needed."""
        keys = self._keys
        hello = False
        if kind == hs.CLIENT_HELLO and keys.client is None:
            keys.client = hs.read_client_hello(body)
            hello = True  # records of the server may have waited for its random
        elif kind == hs.SERVER_HELLO:
            server = hs.read_server_hello(body)
            if server is not None and server.retry:
                keys.retry = server  # TLS 1.3: the CCS that follows changes nothing
            elif server is not None:
                keys.server = server
                suite = keys.suite = SUITES.get(server.suite)
                side.hs.clear()
                if decrypting and (suite is None or not suite.cipher):
                    self.unsupported = True
                    out.append(
                        self.anomaly(
                            AnomalyCode.TLS_UNSUPPORTED_CIPHER,
                            side.direction,
                            rec.offset,
                            f"{suite_name(server.suite)}: not decrypted",
                            rec.packet,
                            rec.ts,
                        )
                    )
                hello = True  # records of the client may have waited for it
        elif kind == hs.ENCRYPTED_EXTENSIONS:
            self._alpn = hs.read_encrypted_extensions_alpn(body)
        elif kind == hs.CERTIFICATE and side.direction is B2C and self._cert is None:
            self._cert = hs.read_certificate(body, keys.tls13)
            if self._cert is None:
                out.append(
                    self.anomaly(
                        AnomalyCode.TLS_CERTIFICATE_UNDECODABLE,
                        side.direction,
                        rec.offset,
                        "the server certificate does not parse as X.509",
                        rec.packet,
                        rec.ts,
                    )
                )
        if kind == hs.SERVER_HELLO and keys.server is not None and keys.server.alpn:
            self._alpn = keys.server.alpn
        return hello

    def alert(self, direction: Direction, rec: Record, body: bytes, out: list[TlsEvent]) -> None:
        """An alert of `direction` (in clear, or decrypted)."""
        if len(body) != 2:
            return  # an encrypted TLS 1.2 alert, or garbage: nothing to read
        level, description = body[0], body[1]
        if description == 0:
            return  # close_notify: the normal end
        name = hs.alert_name(description)
        who = "client" if direction is C2B else "server"
        fatal = level == 2
        detail = f"{'fatal' if fatal else 'warning'} alert {name} ({description}) from the {who}"
        code = AnomalyCode.TLS_ALERT
        if fatal and not self.done:
            code = AnomalyCode.TLS_HANDSHAKE_FAILURE
            self.failed = True
        out.append(self.anomaly(code, direction, rec.offset, detail, rec.packet, rec.ts))

    def info(self, decrypted: bool) -> TlsInfo:
        server, client, cert = self._keys.server, self._keys.client, self._cert
        alpn = self._alpn
        if alpn is None and client is not None and client.alpn:
            alpn = ",".join(client.alpn)
        return TlsInfo(
            version=None if server is None else hs.version_name(server.version),
            cipher=None if server is None else suite_name(server.suite),
            sni=None if client is None else client.sni,
            alpn=alpn,
            cert_subject=None if cert is None else cert.subject,
            cert_issuer=None if cert is None else cert.issuer,
            cert_not_after=None if cert is None else cert.not_after,
            decrypted=decrypted,
        )

    def anomaly(
        self,
        code: str,
        direction: Direction | None,
        offset: int | None,
        detail: str,
        packet: int,
        ts: int,
        length: int = 0,
    ) -> Anomaly:
        """An anomaly row of this connection."""
        return Anomaly.of(
            code,
            conn_id=self.conn_id,
            direction=direction,
            stream_offset=offset,
            detail=detail,
            length=length,
            packet=packet,
            ts=ts,
        )
