"""Genuine TLS sessions carrying Pulsar frames, with their key logs: the `tls` level's seeds.

Input: the corpus' reassembled Pulsar streams (fuzz.seeds), OpenSSL through Python's `ssl`
(fuzz.memory_tls): TLS 1.3 and TLS 1.2 with AES-GCM, ChaCha20-Poly1305 and AES-CBC (with and
without encrypt-then-MAC).
Output: `TlsSeed`s: each side's TLS bytes in the order they were sent, the session's NSS key
log, and what was put in (frames and plaintext bytes per direction: the known truth the
decrypted rows are checked against). `pool()` loads them from POOL_FILE.
Rule: OpenSSL's randomness makes every run different, so the sessions are made once
(`python -m fuzz.tls_pool`, a few seconds) and kept in POOL_FILE (committed): inputs made from
them are a function of the campaign's Random alone, and `--replay` makes the same bytes.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dissector.events import Direction
from fuzz.memory_tls import OP_NO_ENCRYPT_THEN_MAC, SNI, run_tls
from fuzz.seeds import Corpus, load
from fuzz.tls_pki import make_pki

POOL_FILE = Path(__file__).resolve().parent / "tls_pool.json.gz"
#: Plaintext bytes of Pulsar frames per direction of one session (inputs stay small).
PLAIN_BYTES = 3000
#: Sessions made per TLS setting, each from another sample connection.
PER_SETTING = 2
SETTINGS: dict[str, dict[str, object]] = {
    "tls13": {},
    "tls12-aes128gcm": {"tls12": True, "ciphers": "ECDHE-RSA-AES128-GCM-SHA256"},
    "tls12-chacha20": {"tls12": True, "ciphers": "ECDHE-RSA-CHACHA20-POLY1305"},
    "tls12-cbc-etm": {"tls12": True, "ciphers": "ECDHE-RSA-AES128-SHA"},
    "tls12-cbc-mte": {
        "tls12": True,
        "ciphers": "ECDHE-RSA-AES256-SHA384",
        "options": OP_NO_ENCRYPT_THEN_MAC,
    },
}
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT


@dataclass(frozen=True)
class TlsSeed:
    name: str
    tls13: bool
    suite: int  # the cipher suite's number
    wire: tuple[tuple[int, bytes], ...]  # (0 client / 1 broker, TLS bytes) in sending order
    keylog: str  # the NSS key log OpenSSL wrote for this session
    frames: tuple[int, int]  # Pulsar frames sent (client to broker, broker to client)
    plain: tuple[int, int]  # their bytes


def exchanges(corpus: Corpus, count: int) -> list[list[tuple[Direction, bytes]]]:
    """`count` exchanges: the first frames (up to PLAIN_BYTES per side) of sample connections
    seen both ways, client and broker frames alternating."""
    streams = {s.name: s for s in corpus.streams}
    out = []
    for name in sorted(streams):
        if not name.endswith(".c") or name[:-1] + "b" not in streams:
            continue
        sides: list[list[bytes]] = []
        for seed in (streams[name], streams[name[:-1] + "b"]):
            if seed.offsets[0] != 0:  # a stream that does not start with a frame
                break
            ends = [*seed.offsets[1:], len(seed.data)]
            frames: list[bytes] = []
            total = 0
            for start, end in zip(seed.offsets, ends, strict=True):
                if total + end - start > PLAIN_BYTES and frames:
                    break
                frames.append(seed.data[start:end])
                total += end - start
            sides.append(frames)
        if len(sides) < 2 or not sides[0] or not sides[1]:
            continue
        items = []
        for k in range(max(len(sides[0]), len(sides[1]))):
            items += [(C2B, f) for f in sides[0][k : k + 1]] + [
                (B2C, f) for f in sides[1][k : k + 1]
            ]
        out.append(items)
        if len(out) == count:
            break
    return out


def make_pool() -> list[TlsSeed]:
    """New sessions of every setting (OpenSSL in memory; see the module docstring)."""
    corpus = load()
    pool = []
    with tempfile.TemporaryDirectory(prefix="pulsar-fuzz-tls-") as tmp:
        folder = Path(tmp)
        pki = make_pki(folder / "pki", SNI)
        every = exchanges(corpus, PER_SETTING * len(SETTINGS))
        for k, (setting, kw) in enumerate(SETTINGS.items()):
            for n, exchange in enumerate(every[k * PER_SETTING : (k + 1) * PER_SETTING]):
                name = f"{setting}-{n}"
                run = run_tls(folder, exchange, keylog_name=f"{name}.log", pki=pki, **kw)  # type: ignore[arg-type]
                frames = tuple(sum(1 for d, _ in exchange if d is side) for side in (C2B, B2C))
                plain = tuple(sum(len(b) for d, b in exchange if d is side) for side in (C2B, B2C))
                pool.append(
                    TlsSeed(
                        name,
                        run.version == "TLSv1.3",
                        run.cipher_id,
                        tuple((0 if d is C2B else 1, data) for d, data in run.wire),
                        run.keylog.read_text(),
                        (frames[0], frames[1]),
                        (plain[0], plain[1]),
                    )
                )
    return pool


def save(pool: list[TlsSeed], path: Path = POOL_FILE) -> None:
    items = [
        {
            "name": s.name,
            "tls13": s.tls13,
            "suite": s.suite,
            "wire": [[d, base64.b64encode(b).decode()] for d, b in s.wire],
            "keylog": s.keylog,
            "frames": list(s.frames),
            "plain": list(s.plain),
        }
        for s in pool
    ]
    path.write_bytes(gzip.compress(json.dumps(items, indent=0).encode(), mtime=0))


@cache
def pool(path: Path = POOL_FILE) -> tuple[TlsSeed, ...]:
    """The sessions kept in POOL_FILE."""
    items = json.loads(gzip.decompress(path.read_bytes()))
    return tuple(
        TlsSeed(
            i["name"],
            i["tls13"],
            i["suite"],
            tuple((d, base64.b64decode(b)) for d, b in i["wire"]),
            i["keylog"],
            (i["frames"][0], i["frames"][1]),
            (i["plain"][0], i["plain"][1]),
        )
        for i in items
    )


if __name__ == "__main__":
    made = make_pool()
    save(made)
    print(f"{len(made)} sessions written to {POOL_FILE}", file=sys.stderr)
