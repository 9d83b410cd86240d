"""One TLS connection: its handshake in clear, and with a key log its decrypted streams.

Input: each direction's TCP stream (`feed`, `gap`), then `close`; the session's `KeyLog`
(None: describe the handshake only) may gain secrets at any time (live capture).
Output: `Plain` (decrypted application data, in order per direction), `PlainGap` (bytes of
the decrypted stream that cannot be known) and `Anomaly` events; `info()` gives what the
handshake showed (`TlsInfo`).
Rules:
- Records come from `tls_records.RecordReader`; handshake messages in clear (and, for TLS
  1.3, decrypted ones) are read for version, suite, SNI, ALPN and certificate. Alerts other
  than close_notify are `tls.alert`, or `tls.handshake_failure` before the handshake is done.
- Keys: TLS 1.3 from the handshake and application traffic secrets (the switch follows each
  side's Finished, KeyUpdate gives the next secret); TLS 1.2 from the master secret.
  Only application data becomes Plain: handshake messages, tickets, key updates and alerts
  inside protected records never do.
- Without a key log nothing is decrypted and nothing reaches the decrypted streams. With one,
  protected records of a session whose key is missing wait (at most MAX_WAITING bytes per
  session) for the key to arrive; beyond that, or at the end, `tls.no_key` (once) and their
  bytes become PlainGap. A record that does not open is `tls.decrypt_failed` (one row per
  run of failures) and a PlainGap of its plaintext size; the next one is tried at the next
  sequence number. After lost bytes the reader resyncs on a record that opens at one of the
  next SEQ_WINDOW sequence numbers (or, for TLS 1.3, with the next keys).
- Every protected or lost byte is either Plain or PlainGap: decrypted stream length ==
  Plain bytes + PlainGap bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from dissector.events import Anomaly, Direction, TlsInfo
from dissector.flow import tls_handshake as hs
from dissector.flow.tls_keylog import KeyLog
from dissector.flow.tls_keys import (
    SUITES,
    Keys,
    Suite,
    suite_name,
    tls12_keys,
    tls13_keys,
    tls13_update,
)
from dissector.flow.tls_records import Lost, Record, RecordReader

if TYPE_CHECKING:
    from dissector.flow.tls_cipher import RecordCipher

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
#: Protected bytes of one session kept while its key is missing from the key log (a live key
#: log may be written after the first records are captured).
MAX_WAITING = 1 << 20
#: Sequence numbers tried past the expected one after lost bytes or a failed record.
SEQ_WINDOW = 8
_HS, _APP = 0, 1  # TLS 1.3 key stages
_LABELS = {
    (C2B, _HS): "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    (B2C, _HS): "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    (C2B, _APP): "CLIENT_TRAFFIC_SECRET_0",
    (B2C, _APP): "SERVER_TRAFFIC_SECRET_0",
}
_CCS, _ALERT, _HANDSHAKE, _APPDATA = 20, 21, 22, 23


class Plain(NamedTuple):
    direction: Direction
    data: bytes
    packet: int
    ts: int


class PlainGap(NamedTuple):
    direction: Direction
    length: int
    packet: int
    ts: int


TlsEvent = Plain | PlainGap | Anomaly
_Out = list[TlsEvent]


class _Side:
    __slots__ = (
        "ccs",
        "ciphers",
        "direction",
        "failing",
        "gen",
        "hs",
        "protected",
        "reader",
        "seq",
        "stage",
        "waiting",
        "widen",
    )

    def __init__(self, direction: Direction) -> None:
        self.direction = direction
        self.reader = RecordReader()
        self.hs = hs.HandshakeBuffer()
        self.ccs = False  # TLS 1.2: ChangeCipherSpec seen, records are protected
        self.protected = 0  # protected records seen
        self.stage = _HS  # TLS 1.3 key stage
        self.gen = 0  # TLS 1.3 key updates so far
        self.seq = 0  # expected sequence number of the next protected record
        self.ciphers: dict[tuple[int, int], RecordCipher | None] = {}
        self.waiting: list[Record] = []  # protected records waiting for their key
        self.failing = False  # in a run of records that do not open
        self.widen = False  # sequence number uncertain: try the next few


class TlsSession:
    """One TLS connection; see the module docstring."""

    def __init__(self, conn_id: int, keylog: KeyLog | None) -> None:
        self.conn_id = conn_id
        self.keylog = keylog
        self._sides: dict[Direction, _Side] = {}
        self._client: hs.ClientHello | None = None
        self._server: hs.ServerHello | None = None
        self._suite: Suite | None = None
        self._alpn: str | None = None
        self._cert: hs.CertInfo | None = None
        self._seen = -1 if keylog is None else keylog.version
        self._waiting = 0  # bytes of records waiting for a key, both sides
        self._no_key = False  # tls.no_key reported (waiting given up)
        self._unsupported = False
        self.decrypted = False
        self._failed = False  # handshake failure reported
        self._done = False  # handshake completed (as far as can be seen)
        self._stopped = False

    # ----------------------------------------------------------------- public API

    @property
    def idle(self) -> bool:
        """Nothing more to learn: no key log and the handshake is over (the caller may stop
        feeding, and `stop`)."""
        return self.keylog is None and self._done and not self._stopped

    def stop(self) -> None:
        """No more bytes will be fed: `close` reports nothing about unfinished records."""
        self._stopped = True

    def feed(
        self, direction: Direction, data: bytes, packet: int, ts: int, synced: bool = True
    ) -> list[TlsEvent]:
        out: _Out = []
        if self._stopped:
            return out
        self._retry(out)
        side = self._side(direction, synced)
        for item in side.reader.feed(data, packet, ts):
            self._item(side, item, out)
        return out

    def gap(self, direction: Direction, length: int, packet: int, ts: int) -> list[TlsEvent]:
        out: _Out = []
        if self._stopped:
            return out
        self._retry(out)
        side = self._side(direction, False)
        side.reader.packet, side.reader.ts = packet, ts
        for item in side.reader.gap(length):
            self._item(side, item, out)
        return out

    def retry(self) -> list[TlsEvent]:
        """What records waiting for a key give now that the key log may have more."""
        out: _Out = []
        self._retry(out)
        return out

    def close(self) -> list[TlsEvent]:
        out: _Out = []
        self._retry(out)
        for side in () if self._stopped else self._sides.values():
            for item in side.reader.close():
                self._item(side, item, out)
        if any(s.waiting for s in self._sides.values()):
            self._give_up(out, "the connection ended")
        if self._client is not None and not self._done and not self._failed:
            self._failed = True
            detail = "the connection ended before the handshake completed"
            if self._server is None:
                detail += " (no ServerHello)"
            out.append(self._anomaly("tls.handshake_failure", None, None, detail, 0, 0))
        return out

    def info(self) -> TlsInfo:
        server, client, cert = self._server, self._client, self._cert
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
            decrypted=self.decrypted,
        )

    # ----------------------------------------------------------------- records

    def _side(self, direction: Direction, synced: bool) -> _Side:
        side = self._sides.get(direction)
        if side is None:
            new = self._sides[direction] = _Side(direction)
            new.reader = RecordReader(synced=synced, check=lambda r: self._check(new, r))
            return new
        return side

    @property
    def _tls13(self) -> bool:
        return self._server is not None and self._server.version == 0x0304

    def _item(self, side: _Side, item: Record | Lost, out: _Out) -> None:
        if type(item) is Lost:
            self._lost(side, item, out)
            return
        assert type(item) is Record
        if item.resynced:
            side.widen = True
        protected = item.ctype == _APPDATA or (side.ccs and not self._tls13)
        if not protected:
            self._clear(side, item, out)
            return
        side.protected += 1
        if side.direction is C2B and self._server is not None:
            self._done = True  # the client protects its records: its Finished went out
        if self.keylog is None:
            return
        if self._unsupported:
            self._undecrypted(side, item, out)
            return
        if side.waiting:
            self._wait(side, item, out)
            return
        self._protected(side, item, out)

    def _lost(self, side: _Side, lost: Lost, out: _Out) -> None:
        if lost.reason == "cut":  # one record, whose place and size are known
            if lost.ctype == _APPDATA or (side.ccs and not self._tls13):
                side.protected += 1
                if self.keylog is not None:
                    side.seq += 1
                    size = self._plain_size(lost.length - 5)
                    out.append(PlainGap(side.direction, size, lost.packet, lost.ts))
            return
        side.widen = True
        if lost.reason == "skipped":
            out.append(
                self._anomaly(
                    "tls.skipped_bytes",
                    side.direction,
                    lost.offset,
                    f"{lost.length} bytes that are not TLS records skipped to resync",
                    lost.packet,
                    lost.ts,
                    lost.length,
                )
            )
        elif lost.reason == "truncated":
            out.append(
                self._anomaly(
                    "tls.truncated_record",
                    side.direction,
                    lost.offset,
                    f"the stream ended {lost.length} bytes into a record",
                    lost.packet,
                    lost.ts,
                    lost.length,
                )
            )
        if self.keylog is not None and (side.protected or side.ccs):
            out.append(PlainGap(side.direction, lost.length, lost.packet, lost.ts))

    def _clear(self, side: _Side, rec: Record, out: _Out) -> None:
        """A record in clear: handshake, alert, ChangeCipherSpec."""
        if rec.ctype == _CCS:
            if not self._tls13:
                side.ccs = True
                side.seq = 0
            return
        if rec.ctype == _ALERT:
            self._alert(side, rec, rec.fragment, out)
        elif rec.ctype == _HANDSHAKE:
            for kind, body in side.hs.feed(rec.fragment):
                self._handshake(side, rec, kind, body, out)

    def _handshake(self, side: _Side, rec: Record, kind: int, body: bytes, out: _Out) -> None:
        if kind == hs.CLIENT_HELLO and self._client is None:
            self._client = hs.read_client_hello(body)
        elif kind == hs.SERVER_HELLO:
            server = hs.read_server_hello(body)
            if server is not None and not server.retry:
                self._server = server
                self._suite = SUITES.get(server.suite)
                side.hs.clear()
                if self.keylog is not None and (self._suite is None or not self._suite.cipher):
                    self._unsupported = True
                    out.append(
                        self._anomaly(
                            "tls.unsupported_cipher",
                            side.direction,
                            rec.offset,
                            f"{suite_name(server.suite)}: not decrypted",
                            rec.packet,
                            rec.ts,
                        )
                    )
        elif kind == hs.ENCRYPTED_EXTENSIONS:
            self._alpn = hs.read_encrypted_extensions_alpn(body)
        elif kind == hs.CERTIFICATE and side.direction is B2C and self._cert is None:
            self._cert = hs.read_certificate(body, self._tls13)
            if self._cert is None:
                out.append(
                    self._anomaly(
                        "tls.certificate_undecodable",
                        side.direction,
                        rec.offset,
                        "the server certificate does not parse as X.509",
                        rec.packet,
                        rec.ts,
                    )
                )
        if kind == hs.SERVER_HELLO and self._server is not None and self._server.alpn:
            self._alpn = self._server.alpn

    def _alert(self, side: _Side, rec: Record, body: bytes, out: _Out) -> None:
        if len(body) != 2:
            return  # an encrypted TLS 1.2 alert, or garbage: nothing to read
        level, description = body[0], body[1]
        if description == 0:
            return  # close_notify: the normal end
        name = hs.alert_name(description)
        who = "client" if side.direction is C2B else "server"
        fatal = level == 2
        detail = f"{'fatal' if fatal else 'warning'} alert {name} ({description}) from the {who}"
        code = "tls.alert"
        if fatal and not self._done:
            code = "tls.handshake_failure"
            self._failed = True
        out.append(self._anomaly(code, side.direction, rec.offset, detail, rec.packet, rec.ts))

    # ----------------------------------------------------------------- decryption

    def _wait(self, side: _Side, rec: Record, out: _Out) -> None:
        """The record's key is missing: keep it (bounded), or give up waiting."""
        if self._no_key:
            self._undecrypted(side, rec, out)
            return
        side.waiting.append(rec)
        self._waiting += len(rec.fragment)
        if self._waiting > MAX_WAITING:
            self._give_up(out, f"over {MAX_WAITING} bytes waited for a key")

    def _give_up(self, out: _Out, why: str) -> None:
        first = next((s.waiting[0] for s in self._sides.values() if s.waiting), None)
        if not self._no_key:
            self._no_key = True
            where = (first.offset, first.packet, first.ts) if first else (None, 0, 0)
            side_dir = next((s.direction for s in self._sides.values() if s.waiting), None)
            out.append(
                self._anomaly(
                    "tls.no_key",
                    side_dir,
                    where[0],
                    f"no key for this TLS session in the key log ({why}): not decrypted",
                    where[1],
                    where[2],
                )
            )
        for side in self._sides.values():
            records, side.waiting = side.waiting, []
            for rec in records:
                self._undecrypted(side, rec, out)
        self._waiting = 0

    def _undecrypted(self, side: _Side, rec: Record, out: _Out) -> None:
        side.seq += 1
        size = self._plain_size(len(rec.fragment))
        out.append(PlainGap(side.direction, size, rec.packet, rec.ts))

    def _plain_size(self, n: int) -> int:
        """The plaintext size of an n-byte fragment that cannot be opened (its overhead
        removed; TLS 1.3 padding and CBC padding cannot be known)."""
        suite = self._suite
        if suite is None or self._tls13:
            return max(n - 17, 0)
        if suite.mac is not None:
            return max(n - 16 - 20 - 1, 0)
        return max(n - (16 if suite.cipher == "CHACHA20_POLY1305" else 24), 0)

    def _retry(self, out: _Out) -> None:
        """Secrets were added to the key log since last time: retry waiting records."""
        keylog = self.keylog
        if keylog is None or keylog.version == self._seen:
            return
        self._seen = keylog.version
        for side in self._sides.values():
            side.widen = side.widen or self._no_key
            side.ciphers = {k: v for k, v in side.ciphers.items() if v is not None}
            if side.waiting and self._cipher(side, side.stage, side.gen) is not None:
                records, side.waiting = side.waiting, []
                self._waiting -= sum(len(r.fragment) for r in records)
                for rec in records:
                    self._protected(side, rec, out)

    def _protected(self, side: _Side, rec: Record, out: _Out) -> None:
        opened = self._open(side, rec)
        if opened is None:
            if not self._has_keys(side):
                self._wait(side, rec, out)
                return
            if not side.failing:
                side.failing = True
                out.append(
                    self._anomaly(
                        "tls.decrypt_failed",
                        side.direction,
                        rec.offset,
                        f"a {len(rec.fragment)}-byte record does not decrypt "
                        "(wrong key or corrupted record); later failures of this run folded",
                        rec.packet,
                        rec.ts,
                        len(rec.fragment),
                    )
                )
            side.widen = True
            self._undecrypted(side, rec, out)
            return
        side.failing = False
        side.widen = False
        ctype, plain = opened
        if ctype == _APPDATA:
            self.decrypted = True
            if plain:
                out.append(Plain(side.direction, plain, rec.packet, rec.ts))
        elif ctype == _ALERT:
            self._alert(side, rec, plain, out)
        elif ctype == _HANDSHAKE and self._tls13:
            for kind, body in side.hs.feed(plain):
                self._handshake(side, rec, kind, body, out)
                if kind == hs.FINISHED and side.stage == _HS:
                    side.stage, side.seq = _APP, 0
                    side.hs.clear()
                elif kind == hs.KEY_UPDATE and side.stage == _APP:
                    side.gen, side.seq = side.gen + 1, 0
                    side.hs.clear()

    def _has_keys(self, side: _Side) -> bool:
        """Whether some key of this side is known (else its records wait for one)."""
        if self._tls13:
            return any(self._cipher(side, stage, 0) is not None for stage in (_HS, _APP))
        return self._cipher(side, 0, 0) is not None

    def _open(self, side: _Side, rec: Record) -> tuple[int, bytes] | None:
        """Open a record at the expected (stage, generation, sequence number), or with
        `widen` at the next few; on success the side moves to where it opened."""
        for stage, gen, seq in self._candidates(side):
            cipher = self._cipher(side, stage, gen)
            if cipher is None:
                continue
            opened = cipher.open(seq, rec.ctype, rec.version, rec.fragment)
            if opened is not None:
                side.stage, side.gen, side.seq = stage, gen, seq + 1
                return opened
        return None

    def _candidates(self, side: _Side) -> list[tuple[int, int, int]]:
        stage, gen, seq = side.stage, side.gen, side.seq
        out = [(stage, gen, seq)]
        if side.widen:
            out += [(stage, gen, seq + d) for d in range(1, SEQ_WINDOW + 1)]
            if self._tls13:
                if stage == _HS:
                    out += [(_APP, 0, s) for s in range(SEQ_WINDOW + 1)]
                out += [(_APP, gen + 1, s) for s in range(SEQ_WINDOW + 1)]
        return out

    def _check(self, side: _Side, rec: Record) -> bool | None:
        """Resync: whether a record found by scanning is real (it opens); None: cannot say."""
        protected = rec.ctype == _APPDATA or (side.ccs and not self._tls13)
        if self.keylog is None or not protected or not self._has_keys(side):
            return None
        saved = (side.stage, side.gen, side.seq)
        side.widen = True
        ok = self._open(side, rec) is not None
        side.stage, side.gen, side.seq = saved
        return ok

    def _cipher(self, side: _Side, stage: int, gen: int) -> RecordCipher | None:
        key = (stage, gen)
        if key in side.ciphers:
            return side.ciphers[key]
        cipher = self._make_cipher(side, stage, gen)
        side.ciphers[key] = cipher
        return cipher

    def _make_cipher(self, side: _Side, stage: int, gen: int) -> RecordCipher | None:
        # Imported on first use: plaintext reads and TLS without a key log never need
        # cryptography's ciphers (their import costs ~0.1 s).
        from dissector.flow.tls_cipher import RecordCipher

        keylog, client, server, suite = self.keylog, self._client, self._server, self._suite
        if keylog is None or client is None or server is None:
            return None
        if suite is None or suite.cipher is None:
            return None
        if self._tls13:
            secret = keylog.get(client.random, _LABELS[side.direction, stage])
            if secret is None:
                return None
            for _ in range(gen):
                secret = tls13_update(suite, secret)
            return RecordCipher(tls13_keys(suite, secret), tls13=True)
        if stage or gen:
            return None
        master = keylog.get(client.random, "CLIENT_RANDOM")
        if master is None:
            return None
        keys: tuple[Keys, Keys] = tls12_keys(suite, master, client.random, server.random)
        mine = keys[0] if side.direction is C2B else keys[1]
        return RecordCipher(mine, tls13=False, etm=server.etm)

    def _anomaly(
        self,
        code: str,
        direction: Direction | None,
        offset: int | None,
        detail: str,
        packet: int,
        ts: int,
        length: int = 0,
    ) -> Anomaly:
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
