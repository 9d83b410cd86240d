"""TLS secrets from NSS key log text (SSLKEYLOGFILE, Python's `SSLContext.keylog_filename`).

Input: key log text, in pieces as it is read or as a live file grows (`KeyLog.feed`), then
`flush` for a last line without its newline.
Output: the secrets of each session by its ClientHello random (`get`), and `version`, a
counter that grows whenever a secret is added (sessions waiting for a key retry then).
Rules:
- A line is `LABEL <client_random hex> <secret hex>`; `#` lines, blank lines and lines that
  do not parse are passed over (`bad_lines` counts them; their text is never kept, never
  shown). Labels kept: CLIENT_RANDOM (TLS 1.2 master secret), CLIENT/SERVER
  HANDSHAKE_TRAFFIC_SECRET and CLIENT/SERVER_TRAFFIC_SECRET_0 (TLS 1.3); others are ignored.
- A trailing piece without its newline is held until the rest arrives (a growing file may be
  read in the middle of a line: a cut secret could otherwise look whole), or until `flush`.
- Pure and sans-IO: reading files is the edge's job. Secrets never appear in `repr`.
"""

from __future__ import annotations

import binascii

#: The labels whose secrets are kept (others, e.g. EXPORTER_SECRET, are of no use here).
LABELS = frozenset(
    {
        "CLIENT_RANDOM",
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
    }
)
#: A partial line longer than this is not a key log line: dropped (bounds the held piece).
MAX_LINE = 1024


class KeyLog:
    """Secrets by client random, fed key log text; see the module docstring."""

    __slots__ = ("_partial", "_secrets", "bad_lines", "version")

    def __init__(self, text: str = "") -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self._partial = ""
        self.bad_lines = 0
        self.version = 0
        if text:
            self.feed(text)
            self.flush()

    def feed(self, text: str) -> int:
        """Add the next piece of key log text; returns the number of secrets added."""
        if not text:
            return 0
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            self._partial = ""
            self.bad_lines += 1
        return sum(self._line(line) for line in lines)

    def flush(self) -> int:
        """The held last line is whole (the end of a file): take it."""
        line, self._partial = self._partial, ""
        return self._line(line)

    def _line(self, line: str) -> int:
        line = line.strip()
        if not line or line.startswith("#"):
            return 0
        parts = line.split()
        if len(parts) != 3:
            self.bad_lines += 1
            return 0
        label, random_hex, secret_hex = parts
        try:
            random, secret = bytes.fromhex(random_hex), bytes.fromhex(secret_hex)
        except (ValueError, binascii.Error):
            self.bad_lines += 1
            return 0
        if len(random) != 32 or not secret:
            self.bad_lines += 1
            return 0
        if label not in LABELS:
            return 0
        known = self._secrets.setdefault(random, {})
        if known.get(label) == secret:
            return 0
        known[label] = secret
        self.version += 1
        return 1

    def get(self, client_random: bytes, label: str) -> bytes | None:
        """The secret `label` of the session whose ClientHello random is `client_random`."""
        known = self._secrets.get(client_random)
        return None if known is None else known.get(label)

    def has(self, client_random: bytes) -> bool:
        """Whether any secret of that session is known."""
        return client_random in self._secrets

    def __len__(self) -> int:
        """Sessions with at least one secret."""
        return len(self._secrets)

    def __repr__(self) -> str:
        return f"KeyLog({len(self._secrets)} sessions)"  # never the secrets
