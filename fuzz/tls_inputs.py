"""TLS captures made from the pool's sessions: reordered, updated, damaged, with key logs.

Input: `TlsSeed`s (fuzz.tls_pool) and a `random.Random`.
Output: per session the packets of one TCP connection (`session_packets`), key log text in
the variants users meet (`keylog_text`), and the building blocks fuzz.growth scales up:
KeyUpdate chains (`with_key_updates`), garbage runs inside a direction's TLS stream
(`with_garbage`) and protected records no key of the key log opens (`waiting_records`).
Rules: a session's TLS bytes stay in order within each direction whatever the interleaving
of the directions (`ORDERS`), so an undamaged session with its keys must decrypt to exactly
the frames put in, whichever order the capture shows; every damage that can lose data is
named in DAMAGE, and a session that has any is not held to that.
"""

from __future__ import annotations

import struct
from random import Random

from fuzz.packets import B2C, C2B, Conn, Pkt
from fuzz.tls13 import Tls13Rewriter
from fuzz.tls_pool import TlsSeed

Flights = list[tuple[int, bytes]]  # (0 client / 1 broker, TLS bytes) in sending order
#: How the two directions of a session interleave in the capture (each one's order kept):
#: as sent; at random; the client's bytes first; the broker's first (after the ClientHello);
#: the client's second flight (TLS 1.3 Finished, TLS 1.2 key exchange) before the broker's
#: first (the ServerHello): what a full-duplex TAP with one file per direction and a clock
#: ahead on one side gives when merged.
ORDERS = ("sent", "random", "client_first", "broker_first", "finished_first")
#: Damage that may lose bytes or keys: a session with any is not checked against its frames.
DAMAGE = ("garbage", "flip", "drop", "truncate", "replay")
#: Key log variants that hold the session's keys (checked), and those that do not.
COMPLETE_KEYS = ("as_written", "duplicated", "crlf", "upper_case", "noise", "split")
INCOMPLETE_KEYS = ("missing", "partial", "truncated", "wrong")


def with_key_updates(seed: TlsSeed, updates: dict[int, dict[int, int]]) -> Flights:
    """The session sealed again with KeyUpdate messages inserted (TLS 1.3 only):
    updates[side][k] of them before that side's k-th application record."""
    rewriter = Tls13Rewriter(list(seed.wire), seed.keylog, seed.suite)
    return rewriter.rebuild(updates)


def app_records(seed: TlsSeed) -> tuple[int, int]:
    """Application-phase records of each side (TLS 1.3), where key updates can go."""
    rewriter = Tls13Rewriter(list(seed.wire), seed.keylog, seed.suite)
    return rewriter.app_records(0), rewriter.app_records(1)


def plausible_garbage(rng: Random, size: int) -> bytes:
    """`size` bytes of record headers that look like TLS application data (type 23,
    version 3.3, a length within bounds) and random filler: what makes a resync scan try
    every offset."""
    out = bytearray()
    while len(out) < size:
        out += struct.pack(">BHH", 23, 0x0303, rng.choice((0x3FF0, 0x4000, 17, 100, 1000)))
        out += rng.randbytes(rng.choice((0, 0, 3, 20)))
    return bytes(out[:size])


def with_garbage(flights: Flights, side: int, at_flight: int, where: int, junk: bytes) -> Flights:
    """`junk` inserted in `side`'s at_flight-th flight (counting that side's flights only),
    `where` bytes into it (clamped)."""
    out = list(flights)
    seen = -1
    for i, (d, data) in enumerate(out):
        if d != side:
            continue
        seen += 1
        if seen == at_flight:
            at = min(where, len(data))
            out[i] = (d, data[:at] + junk + data[at:])
            break
    return out


def waiting_records(rng: Random, size: int) -> bytes:
    """Protected-looking application data records (random bytes) of about `size` bytes:
    no key opens them, so with a key log they wait for a key that never comes."""
    out = bytearray()
    while len(out) < size:
        body = rng.randbytes(16384)
        out += struct.pack(">BHH", 23, 0x0303, len(body)) + body
    return bytes(out)


def segments(flights: Flights, mss: int) -> list[list[tuple[int, bytes]]]:
    """Each direction's TCP segments: (flight index, bytes), at most `mss` bytes each."""
    out: list[list[tuple[int, bytes]]] = [[], []]
    for i, (d, data) in enumerate(flights):
        out[d] += [(i, data[k : k + mss]) for k in range(0, len(data), mss)]
    return out


def interleave(
    segs: list[list[tuple[int, bytes]]], order: str, rng: Random
) -> list[tuple[int, bytes]]:
    """The segments of both directions in capture order (see ORDERS)."""
    c, b = segs[C2B], segs[B2C]
    if order == "sent":
        tagged = [(i, 0, d, k) for d in (C2B, B2C) for k, (i, _) in enumerate(segs[d])]
        return [
            (d, segs[d][k][1]) for _, _, d, k in sorted(tagged, key=lambda t: (t[0], t[2], t[3]))
        ]
    if order == "client_first":
        return [(C2B, s) for _, s in c] + [(B2C, s) for _, s in b]
    first = [s for s in c if s[0] == c[0][0]] if c else []
    rest = c[len(first) :]
    if order == "broker_first":
        return [(C2B, s) for _, s in first] + [(B2C, s) for _, s in b] + [(C2B, s) for _, s in rest]
    if order == "finished_first":
        second = [s for s in rest if s[0] == rest[0][0]] if rest else []
        later = rest[len(second) :]
        head = [(C2B, s) for _, s in first + second]
        others = interleave([later, b], "sent", rng)
        return head + others
    out: list[tuple[int, bytes]] = []
    ci = bi = 0
    while ci < len(c) or bi < len(b):
        if bi >= len(b) or (ci < len(c) and rng.random() < 0.5):
            out.append((C2B, c[ci][1]))
            ci += 1
        else:
            out.append((B2C, b[bi][1]))
            bi += 1
    return out


def session_packets(conn: Conn, ordered: list[tuple[int, bytes]], close: bool = True) -> list[Pkt]:
    """The TCP connection: handshake, the segments in the given order, FIN both ways."""
    pkts = conn.handshake()
    for d, data in ordered:
        pkts += conn.send(d, data, mss=1 << 16)
    return pkts + (conn.close() if close else [])


def keylog_text(seed: TlsSeed, variant: str, rng: Random, other: TlsSeed) -> list[str]:
    """The session's key log lines as one or two files' texts (see COMPLETE_KEYS and
    INCOMPLETE_KEYS); `other`: another session, whose secrets a wrong key log uses."""
    lines = [ln for ln in seed.keylog.splitlines() if ln and not ln.startswith("#")]
    if variant == "duplicated":
        lines = lines + lines
    elif variant == "upper_case":
        lines = [ln.split()[0] + " " + " ".join(ln.split()[1:]).upper() for ln in lines]
    elif variant == "noise":
        noisy = []
        for ln in lines:
            noisy.append(
                rng.choice(("# a comment", "", "   ", "NOT A LINE", "EXPORTER_SECRET 00 11"))
            )
            noisy.append(ln)
        lines = noisy
    elif variant == "missing":
        lines = []
    elif variant == "partial":  # some lines, never every traffic secret
        needed = [ln for ln in lines if "TRAFFIC_SECRET" in ln or ln.startswith("CLIENT_RANDOM")]
        gone = rng.choice(needed) if needed else ""
        lines = [ln for ln in lines if ln != gone and rng.random() < 0.7]
    elif variant == "wrong":
        theirs = {
            ln.split()[0]: ln.split()[2] for ln in other.keylog.splitlines() if ln.count(" ") == 2
        }
        lines = [
            f"{label} {random_hex} {theirs.get(label, secret[::-1])}"
            for label, random_hex, secret in (ln.split() for ln in lines)
        ]
    if variant == "split" and len(lines) > 1:
        cut = rng.randrange(1, len(lines))
        return ["\n".join(lines[:cut]) + "\n", "\n".join(lines[cut:]) + "\n"]
    text = ("\r\n" if variant == "crlf" else "\n").join(lines) + "\n"
    if variant == "truncated" and text.strip():
        text = text.rstrip("\n")
        text = text[: len(text) - rng.randrange(1, 40)]
    return [text]
