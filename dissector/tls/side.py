"""One direction of a TLS session: where its next protected record is expected, and opening it.

Input: the direction's protected records, handed over in order by `tls.session.TlsSession`,
and the session's `tls.keyring.KeyRing`; records found by the direction's `RecordReader`
while it resyncs (`check`).
Output: `open` -> (content type, plaintext), or None when the record does not open (`spent`
tells whether the trial budget stopped the trials); `check` -> the reader's verdict on a
resync candidate (True: it opens, False: it cannot be a record of this side, None: cannot
say). The session updates `stage`, `gen` and `seq` as handshake messages switch keys.
Rules:
- A record is tried at the expected (stage, generation, sequence number). After lost bytes,
  a resync or a failure (`widen`), also at the next SEQ_WINDOW sequence numbers and, for TLS
  1.3, with the next keys (application keys after the handshake keys, the next generation);
  on success the side moves to where it opened.
- Every trial but a record's expected one is charged to the side's budget: at most
  TRIAL_WORK_PER_BYTE bytes of work per byte received (gaps earn nothing), each trial
  costing its fragment plus TRIAL_COST. A resync candidate is first checked cheaply (the
  record version of this side's records, room for the suite's overhead), and with no budget
  left the verdict is None: the reader then judges it as it does without a key log, and the
  record is tried where it is expected. So garbage costs a bounded amount of work per byte
  whatever it holds, and a resync after loss or ordinary garbage fits many times over.
"""

from __future__ import annotations

from dissector.events import Direction
from dissector.tls import handshake as hs
from dissector.tls.keyring import APP, HS, KeyRing
from dissector.tls.keys import CHACHA
from dissector.tls.records import HEADER_LEN, Record, RecordReader

#: Sequence numbers tried past the expected one after lost bytes or a failed record.
SEQ_WINDOW = 8
#: Work a side may spend on trial decryptions other than a record's expected one, in bytes
#: per byte received; each trial costs its fragment plus TRIAL_COST (the call itself).
#: Resyncing after loss takes at most 27 trials of one record (under 29 bytes of work per
#: byte of a 16 KiB record, 14 per byte of the first 1 KiB of a stream): ordinary resyncs
#: fit; a run of plausible headers cannot make the work per byte grow (fuzzing finding F2:
#: up to 18 trials of up to 16 KiB per garbage byte).
TRIAL_WORK_PER_BYTE = 32
TRIAL_COST = 1024
#: Largest TLS 1.3 protected fragment: 2^14 + 256 (RFC 8446 section 5.2).
_MAX_FRAGMENT13 = (1 << 14) + 256
_APPDATA = 23


class Side:
    """One direction's decryption state; see the module docstring."""

    __slots__ = (
        "ccs",
        "direction",
        "failing",
        "gaps",
        "gen",
        "hs",
        "keys",
        "protected",
        "reader",
        "seq",
        "spent",
        "stage",
        "version",
        "waiting",
        "widen",
        "work",
    )

    def __init__(self, direction: Direction, keys: KeyRing, synced: bool = True) -> None:
        self.direction = direction
        self.keys = keys
        self.reader = RecordReader(synced=synced, check=self.check)
        self.hs = hs.HandshakeBuffer()
        self.ccs = False  # TLS 1.2: ChangeCipherSpec seen, records are protected
        self.protected = 0  # protected records seen
        self.stage = HS  # TLS 1.3 key stage
        self.gen = 0  # TLS 1.3 key updates so far
        self.seq = 0  # expected sequence number of the next protected record
        self.version = 0  # record version of the last record that opened (0: none yet)
        self.waiting: list[Record] = []  # protected records waiting for their key
        self.failing = False  # in a run of records that do not open
        self.widen = False  # sequence number uncertain: try the next few
        self.gaps = 0  # stream bytes lost by the capture
        self.work = 0  # trial decryption work spent (see TRIAL_WORK_PER_BYTE)
        self.spent = False  # the last trials stopped for want of budget

    def protects(self, ctype: int) -> bool:
        """Whether a record of this content type is protected."""
        return ctype == _APPDATA or (self.ccs and not self.keys.tls13)

    def open(self, rec: Record, speculative: bool = False) -> tuple[int, bytes] | None:
        """(content type, plaintext) of a record that opens where it is expected, or with
        `widen` at the next few places; every trial but the expected one (all of them when
        `speculative`) is charged to the budget."""
        cost = len(rec.fragment) + TRIAL_COST
        self.spent = False
        for n, (stage, gen, seq) in enumerate(self._candidates()):
            cipher = self.keys.cipher(self.direction, stage, gen)
            if cipher is None:
                continue
            if n or speculative:
                if self.work + cost > self._earned(rec):
                    self.spent = True
                    return None
                self.work += cost
            opened = cipher.open(seq, rec.ctype, rec.version, rec.fragment)
            if opened is not None:
                self.stage, self.gen, self.seq = stage, gen, seq + 1
                return opened
        return None

    def check(self, rec: Record) -> bool | None:
        """Resync: whether a record found by scanning is real (it opens); None: cannot say."""
        if self.keys.keylog is None or not self.protects(rec.ctype):
            return None
        if self.work + len(rec.fragment) + TRIAL_COST > self._earned(rec):
            return None  # not one trial left: the cheapest way out
        if not self.keys.has_keys(self.direction):
            return None
        if not self._plausible(rec):
            return False
        saved = (self.stage, self.gen, self.seq)
        self.widen = True
        opened = self.open(rec, speculative=True)
        self.stage, self.gen, self.seq = saved
        if opened is None and self.spent:
            return None
        return opened is not None

    def _earned(self, rec: Record) -> int:
        """The budget earned by the bytes received up to the end of `rec`."""
        return TRIAL_WORK_PER_BYTE * (rec.offset + HEADER_LEN + len(rec.fragment) - self.gaps)

    def _candidates(self) -> list[tuple[int, int, int]]:
        stage, gen, seq = self.stage, self.gen, self.seq
        out = [(stage, gen, seq)]
        if self.widen:
            out += [(stage, gen, seq + d) for d in range(1, SEQ_WINDOW + 1)]
            if self.keys.tls13:
                if stage == HS:
                    out += [(APP, 0, s) for s in range(SEQ_WINDOW + 1)]
                out += [(APP, gen + 1, s) for s in range(SEQ_WINDOW + 1)]
        return out

    def _plausible(self, rec: Record) -> bool:
        """Whether a protected record of this side could look like this: the record version
        of its last record that opened, and room for the suite's overhead (RFC 8446 5.2:
        tag and content type; RFC 5288 and 7905: explicit nonce and tag; CBC: IV and a
        block)."""
        if self.version and rec.version != self.version:
            return False
        n = len(rec.fragment)
        if self.keys.tls13:
            return 17 <= n <= _MAX_FRAGMENT13
        suite = self.keys.suite
        if suite is None or suite.mac is not None:
            return n >= 32
        return n >= (16 if suite.cipher == CHACHA else 24)
