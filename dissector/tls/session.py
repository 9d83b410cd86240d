"""One TLS connection: its handshake in clear, and with a key log its decrypted streams.

Input: each direction's TCP stream (`feed`, `gap`), then `close`; the session's `KeyLog`
(None: describe the handshake only) may gain secrets at any time (live capture).
Output: `Plain` (decrypted application data, in order per direction), `PlainGap` (bytes of
the decrypted stream that cannot be known) and `Anomaly` events; `info()` gives what the
handshake showed (`TlsInfo`).
Rules:
- Records come from `tls.records.RecordReader`; handshake messages in clear (and, for TLS
  1.3, decrypted ones) and alerts go to `tls.facts.Facts` (version, suite, SNI, ALPN,
  certificate; `tls.alert`, `tls.handshake_failure`).
- Keys (`tls.keyring.KeyRing`): TLS 1.3 from the handshake and application traffic secrets
  (the switch follows each side's Finished, KeyUpdate gives the next secret); TLS 1.2 from
  the master secret. Only application data becomes Plain: handshake messages, tickets, key
  updates and alerts inside protected records never do.
- Without a key log nothing is decrypted and nothing reaches the decrypted streams. With one,
  protected records whose keys cannot be made yet wait: for the key log, and for the hellos
  (a capture may show a side's protected records before the other side's hello). They are
  tried again whenever one of these arrives. A session keeps at most MAX_WAITING bytes
  waiting, all the sessions sharing a `WaitingPool` at most MAX_WAITING_TOTAL together;
  beyond the first, or at the end, `tls.no_key` (once), beyond the second
  `tls.waiting_dropped` (once), and the waiting bytes become PlainGap.
- A record that does not open is `tls.decrypt_failed` (one row per run of failures) and a
  PlainGap of its plaintext size; the next one is tried at the next sequence number. Where
  a record is tried, and what a resync may spend, is `tls.side.Side`'s business: after
  lost bytes the reader resyncs on a record that opens near where one is expected, and the
  trial decryptions of garbage cost a bounded amount of work per byte.
- Every protected or lost byte is either Plain or PlainGap: decrypted stream length ==
  Plain bytes + PlainGap bytes.
"""

from __future__ import annotations

from dissector.anomalies import AnomalyCode
from dissector.events import Direction, TlsInfo
from dissector.tls import handshake as hs
from dissector.tls.facts import Facts
from dissector.tls.keylog import KeyLog
from dissector.tls.keyring import APP, HS, KeyRing
from dissector.tls.keys import CHACHA
from dissector.tls.plain import Plain, PlainGap, TlsEvent
from dissector.tls.records import Lost, Record
from dissector.tls.side import Side

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
#: Bytes of records one session keeps while its key is missing from the key log (a live key
#: log may be written after the first records are captured).
MAX_WAITING = 1 << 20
#: Bytes of records waiting for a key in all the sessions of one pipeline together: enough
#: for 32 sessions at their own bound at once; past it, the session whose record does not
#: fit stops waiting (fuzzing finding F4: 160 waiting sessions held 170 MB).
MAX_WAITING_TOTAL = 32 << 20
#: What one waiting record costs beyond its fragment (the Record tuple, its bytes object, its
#: ints): without it a flood of empty records would wait without bound.
RECORD_COST = 256
_CCS, _ALERT, _HANDSHAKE, _APPDATA = 20, 21, 22, 23


_Out = list[TlsEvent]


class WaitingPool:
    """Bytes of records waiting for a key, counted over every session that shares it (one
    per pipeline, as `reassembly.RetransmitWindow` is one per flow table): MAX_WAITING_TOTAL
    unless told."""

    __slots__ = ("limit", "total")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_WAITING_TOTAL if limit is None else limit
        self.total = 0


class TlsSession:
    """One TLS connection; see the module docstring."""

    def __init__(
        self, conn_id: int, keylog: KeyLog | None, pool: WaitingPool | None = None
    ) -> None:
        """pool: the bound on waiting records shared with other sessions (None: its own)."""
        self.conn_id = conn_id
        self.keylog = keylog
        self._sides: dict[Direction, Side] = {}
        self._keys = KeyRing(keylog)
        self._pool = WaitingPool() if pool is None else pool
        self._facts = Facts(conn_id, self._keys)
        self._seen = -1 if keylog is None else keylog.version
        self._waiting = 0  # cost of the records waiting for a key, both sides (RECORD_COST)
        self._no_key = False  # waiting given up (tls.no_key or tls.waiting_dropped reported)
        self.decrypted = False
        self._stopped = False

    # ----------------------------------------------------------------- public API

    @property
    def idle(self) -> bool:
        """Nothing more to learn: no key log and the handshake is over (the caller may stop
        feeding, and `stop`)."""
        return self.keylog is None and self._facts.done and not self._stopped

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
        side.gaps += length
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
            self._no_key_for("the connection ended", out)
        if self._keys.client is not None and not self._facts.done and not self._facts.failed:
            self._facts.failed = True
            detail = "the connection ended before the handshake completed"
            if self._keys.server is None:
                detail += " (no ServerHello)"
            out.append(
                self._facts.anomaly(AnomalyCode.TLS_HANDSHAKE_FAILURE, None, None, detail, 0, 0)
            )
        return out

    def info(self) -> TlsInfo:
        return self._facts.info(self.decrypted)

    # ----------------------------------------------------------------- records

    def _side(self, direction: Direction, synced: bool) -> Side:
        side = self._sides.get(direction)
        if side is None:
            side = self._sides[direction] = Side(direction, self._keys, synced)
        return side

    def _item(self, side: Side, item: Record | Lost, out: _Out) -> None:
        if type(item) is Lost:
            self._lost(side, item, out)
            return
        assert type(item) is Record
        if item.resynced:
            side.widen = True
        protected = side.protects(item.ctype)
        if not protected:
            self._clear(side, item, out)
            return
        side.protected += 1
        if side.direction is C2B and self._keys.server is not None:
            self._facts.done = True  # the client protects its records: its Finished went out
        if self.keylog is None:
            return
        if self._facts.unsupported:
            self._undecrypted(side, item, out)
            return
        if side.waiting:
            self._wait(side, item, out)
            return
        self._protected(side, item, out)

    def _lost(self, side: Side, lost: Lost, out: _Out) -> None:
        if lost.reason == "cut":  # one record, whose place and size are known
            if side.protects(lost.ctype):
                side.protected += 1
                if self.keylog is not None:
                    side.seq += 1
                    size = self._plain_size(lost.length - 5)
                    out.append(PlainGap(side.direction, size, lost.packet, lost.ts))
            return
        side.widen = True
        if lost.reason == "skipped":
            out.append(
                self._facts.anomaly(
                    AnomalyCode.TLS_SKIPPED_BYTES,
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
                self._facts.anomaly(
                    AnomalyCode.TLS_TRUNCATED_RECORD,
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

    def _clear(self, side: Side, rec: Record, out: _Out) -> None:
        """A record in clear: handshake, alert, ChangeCipherSpec."""
        if rec.ctype == _CCS:
            if not self._keys.tls13:
                side.ccs = True
                side.seq = 0
            return
        if rec.ctype == _ALERT:
            self._facts.alert(side.direction, rec, rec.fragment, out)
        elif rec.ctype == _HANDSHAKE:
            for kind, body in side.hs.feed(rec.fragment):
                self._message(side, rec, kind, body, out)

    def _message(self, side: Side, rec: Record, kind: int, body: bytes, out: _Out) -> None:
        """A handshake message: what it shows; a hello may let waiting records open."""
        if self._facts.message(side, rec, kind, body, self.keylog is not None, out):
            self._replay(out)

    # ----------------------------------------------------------------- decryption

    def _wait(self, side: Side, rec: Record, out: _Out) -> None:
        """The record's key is missing: keep it (bounded per session and over all sessions),
        or give up waiting."""
        if self._no_key:
            self._undecrypted(side, rec, out)
            return
        cost = len(rec.fragment) + RECORD_COST
        pool = self._pool
        if pool.total + cost > pool.limit:
            held = len(rec.fragment) + sum(
                len(r.fragment) for s in self._sides.values() for r in s.waiting
            )
            detail = (
                f"{held} bytes of records waiting for a key not kept: all TLS sessions "
                f"together keep at most {pool.limit} bytes waiting; not decrypted"
            )
            self._give_up(AnomalyCode.TLS_WAITING_DROPPED, detail, held, rec, out, side)
            self._undecrypted(side, rec, out)
            return
        side.waiting.append(rec)
        self._waiting += cost
        pool.total += cost
        if self._waiting > MAX_WAITING:
            self._no_key_for(f"over {MAX_WAITING} bytes waited for a key", out)

    def _no_key_for(self, why: str, out: _Out) -> None:
        detail = f"no key for this TLS session in the key log ({why}): not decrypted"
        self._give_up(AnomalyCode.TLS_NO_KEY, detail, 0, None, out)

    def _give_up(
        self,
        code: str,
        detail: str,
        length: int,
        rec: Record | None,
        out: _Out,
        side: Side | None = None,
    ) -> None:
        """Stop waiting for a key: `code` (once, where the first waiting record is, else at
        `rec` of `side`), and the waiting records become PlainGap."""
        first = next((s for s in self._sides.values() if s.waiting), None)
        if first is not None:
            side, rec = first, first.waiting[0]
        if not self._no_key:
            self._no_key = True
            out.append(
                self._facts.anomaly(
                    code,
                    None if side is None else side.direction,
                    None if rec is None else rec.offset,
                    detail,
                    0 if rec is None else rec.packet,
                    0 if rec is None else rec.ts,
                    length,
                )
            )
        for each in self._sides.values():
            for waited in self._unwait(each):
                self._undecrypted(each, waited, out)

    def _unwait(self, side: Side) -> list[Record]:
        """The side's waiting records, no longer waiting (their cost given back)."""
        records, side.waiting = side.waiting, []
        cost = sum(len(r.fragment) + RECORD_COST for r in records)
        self._waiting -= cost
        self._pool.total -= cost
        return records

    def _undecrypted(self, side: Side, rec: Record, out: _Out) -> None:
        side.seq += 1
        size = self._plain_size(len(rec.fragment))
        out.append(PlainGap(side.direction, size, rec.packet, rec.ts))

    def _plain_size(self, n: int) -> int:
        """The plaintext size of an n-byte fragment that cannot be opened (its overhead
        removed; TLS 1.3 padding and CBC padding cannot be known)."""
        suite = self._keys.suite
        if suite is None or self._keys.tls13:
            return max(n - 17, 0)
        if suite.mac is not None:
            return max(n - 16 - 20 - 1, 0)
        return max(n - (16 if suite.cipher == CHACHA else 24), 0)

    def _retry(self, out: _Out) -> None:
        """Secrets were added to the key log since last time: retry waiting records."""
        keylog = self.keylog
        if keylog is None or keylog.version == self._seen:
            return
        self._seen = keylog.version
        for side in self._sides.values():
            side.widen = side.widen or self._no_key
        self._replay(out)

    def _replay(self, out: _Out) -> None:
        """A piece of the keys may have arrived (a secret, the ClientHello, the ServerHello):
        the waiting records of each side whose keys can now be made are tried again."""
        for side in list(self._sides.values()):
            if not side.waiting:
                continue
            if self._facts.unsupported:  # reported when the ServerHello said so
                for rec in self._unwait(side):
                    self._undecrypted(side, rec, out)
            elif self._keys.has_keys(side.direction):
                for rec in self._unwait(side):
                    self._protected(side, rec, out)

    def _protected(self, side: Side, rec: Record, out: _Out) -> None:
        opened = side.open(rec)
        if opened is None:
            if not self._keys.has_keys(side.direction):
                self._wait(side, rec, out)
                return
            if not side.failing:
                side.failing = True
                out.append(
                    self._facts.anomaly(
                        AnomalyCode.TLS_DECRYPT_FAILED,
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
        side.version = rec.version
        ctype, plain = opened
        if ctype == _APPDATA:
            self.decrypted = True
            if plain:
                out.append(Plain(side.direction, plain, rec.packet, rec.ts))
        elif ctype == _ALERT:
            self._facts.alert(side.direction, rec, plain, out)
        elif ctype == _HANDSHAKE and self._keys.tls13:
            for kind, body in side.hs.feed(plain):
                self._message(side, rec, kind, body, out)
                if kind == hs.FINISHED and side.stage == HS:
                    side.stage, side.seq = APP, 0
                    side.hs.clear()
                elif kind == hs.KEY_UPDATE and side.stage == APP:
                    side.gen, side.seq = side.gen + 1, 0
                    side.hs.clear()
