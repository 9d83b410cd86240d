"""The record ciphers of one TLS session, by side, key stage and generation.

Input: the session's key log (it may gain secrets at any time), the hellos as the session
reads them (`client`, `server`, `suite`; `retry`: a HelloRetryRequest), and requests for
the cipher of one side at one (stage, generation).
Output: `RecordCipher`s, or None while a piece is missing (the ClientHello's random, the
ServerHello's version and suite, the secret in the key log); `has_keys`.
Rules:
- TLS 1.3: stage HS is the handshake traffic secret, stage APP the application traffic
  secret (..._TRAFFIC_SECRET_0); generation n is that secret after n KeyUpdates (RFC 8446
  section 7.2). The latest secret derived for each side and stage is kept, so each new
  generation costs one update: a chain of n KeyUpdates costs n derivations, not n^2/2
  (fuzzing finding F1).
- TLS 1.2: one cipher per side, from the master secret (stage HS, generation 0).
- A missing piece is never remembered: it is looked for again at the next request, so records
  that waited for the ServerHello (or for the key log) open once it is here (finding F3).
- A side never needs a generation older than the one before the latest it asked for (its
  generation only grows): asking for generation g drops the ciphers below g - 1, so a side
  keeps at most a few ciphers, however long its KeyUpdate chain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissector.events import Direction
from dissector.tls.handshake import ClientHello, ServerHello
from dissector.tls.keylog import KeyLog
from dissector.tls.keys import Keys, Suite, tls12_keys, tls13_keys, tls13_update

if TYPE_CHECKING:
    from dissector.tls.cipher import RecordCipher

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
HS, APP = 0, 1  # TLS 1.3 key stages
_LABELS = {
    (C2B, HS): "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    (B2C, HS): "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    (C2B, APP): "CLIENT_TRAFFIC_SECRET_0",
    (B2C, APP): "SERVER_TRAFFIC_SECRET_0",
}


class KeyRing:
    """The ciphers of one session; see the module docstring."""

    __slots__ = ("_ciphers", "_secrets", "client", "keylog", "retry", "server", "suite")

    def __init__(self, keylog: KeyLog | None) -> None:
        self.keylog = keylog
        self.client: ClientHello | None = None
        self.server: ServerHello | None = None
        self.retry: ServerHello | None = None  # a HelloRetryRequest, before the ServerHello
        self.suite: Suite | None = None  # the ServerHello's, when known here
        self._ciphers: dict[tuple[Direction, int, int], RecordCipher] = {}
        # (side, stage) -> (secret from the key log, generation, its secret): the latest derived
        self._secrets: dict[tuple[Direction, int], tuple[bytes, int, bytes]] = {}

    @property
    def tls13(self) -> bool:
        """TLS 1.3 negotiated (a HelloRetryRequest already says so)."""
        hello = self.server if self.server is not None else self.retry
        return hello is not None and hello.version == 0x0304

    def has_keys(self, direction: Direction) -> bool:
        """Whether some key of this side can be made now (else its records wait)."""
        if self._suite() is None:
            return False
        if self.tls13:
            return any(self._base(direction, stage) is not None for stage in (HS, APP))
        return self._master() is not None

    def cipher(self, direction: Direction, stage: int, gen: int) -> RecordCipher | None:
        key = (direction, stage, gen)
        found = self._ciphers.get(key)
        if found is not None:
            return found
        made = self._make(direction, stage, gen)
        if made is not None:
            ciphers = self._ciphers
            for old in [k for k in ciphers if k[0] is direction and k[1] == stage]:
                if old[2] < gen - 1:
                    del ciphers[old]
            ciphers[key] = made
        return made

    def _suite(self) -> Suite | None:
        """The suite, when everything but the secrets is known."""
        suite = self.suite
        if self.keylog is None or self.client is None or self.server is None:
            return None
        return None if suite is None or suite.cipher is None else suite

    def _base(self, direction: Direction, stage: int) -> bytes | None:
        keylog, client = self.keylog, self.client
        if keylog is None or client is None:
            return None
        return keylog.get(client.random, _LABELS[direction, stage])

    def _master(self) -> bytes | None:
        keylog, client = self.keylog, self.client
        if keylog is None or client is None:
            return None
        return keylog.get(client.random, "CLIENT_RANDOM")

    def _make(self, direction: Direction, stage: int, gen: int) -> RecordCipher | None:
        # Imported on first use: plaintext reads and TLS without a key log never need
        # cryptography's ciphers (their import costs ~0.1 s).
        from dissector.tls.cipher import RecordCipher

        suite, server, client = self._suite(), self.server, self.client
        if suite is None or server is None or client is None:
            return None
        if self.tls13:
            secret = self._secret(suite, direction, stage, gen)
            return None if secret is None else RecordCipher(tls13_keys(suite, secret), tls13=True)
        master = self._master()
        if stage or gen or master is None:
            return None
        keys: tuple[Keys, Keys] = tls12_keys(suite, master, client.random, server.random)
        mine = keys[0] if direction is C2B else keys[1]
        return RecordCipher(mine, tls13=False, etm=server.etm)

    def _secret(self, suite: Suite, direction: Direction, stage: int, gen: int) -> bytes | None:
        """The traffic secret of generation `gen`, from the nearest one derived before."""
        base = self._base(direction, stage)
        if base is None:
            return None
        at, secret = 0, base
        latest = self._secrets.get((direction, stage))
        if latest is not None and latest[0] == base and latest[1] <= gen:
            at, secret = latest[1], latest[2]
        while at < gen:
            secret = tls13_update(suite, secret)
            at += 1
        if latest is None or latest[0] != base or latest[1] < gen:
            self._secrets[direction, stage] = (base, gen, secret)
        return secret
