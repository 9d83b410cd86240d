"""The `tls` level: genuine TLS sessions carrying Pulsar frames, read with their key logs.

Input: a `random.Random`; the sessions of fuzz.tls_pool (TLS 1.3 and 1.2, five suites).
Output: `make` gives a `Case` (capture bytes; the key log files and what each session must
decrypt to in its settings); `run` reads it with the reader's own loop and checks it.
What an input is: one to four sessions (sometimes a dozen or thirty, most waiting for keys
they never get), each on its own TCP connection, sequential or interleaved packet by packet;
per session the directions reordered (fuzz.tls_inputs.ORDERS: protected records before the
ServerHello, ...), TLS 1.3 KeyUpdate chains (up to hundreds), segments of 1 to 1400 bytes,
sometimes damage (garbage runs inside the TLS stream that make the reader resync, bit flips,
a lost segment, a cut end, a replayed record); key logs as written, duplicated, CRLF,
upper-case, with noise lines, split over two files, or missing, partial, cut or wrong; or no
key log at all.
Invariants: those of every capture (fuzz.checks.read_checked: no exception, byte accounting
per direction, ...), and per session: undamaged with its keys, its conversation has exactly
the frames and frame bytes put in each way and no gap; without its keys, no frame at all.
"""

from __future__ import annotations

from pathlib import Path
from random import Random
from typing import Any

from dissector.read import ReaderOptions
from fuzz import tls_inputs as ti
from fuzz.checks import Case, Seen, read_checked, require
from fuzz.mutators import flip_bits
from fuzz.packets import B2C, C2B, Conn, Pkt, pcap, stamp
from fuzz.seeds import Corpus
from fuzz.tls_pool import TlsSeed, pool

#: Sessions in one input, and how often (the last ones: many sessions waiting for keys).
SESSIONS = (1, 2, 3, 4, 12, 30)
SESSION_WEIGHTS = (60, 12, 8, 5, 10, 5)
#: Segment sizes (TCP payload bytes) a session is cut into.
MSS = (1400, 1400, 1400, 536, 100, 7, 1)
#: Lengths of a KeyUpdate chain.
CHAINS = (1, 2, 3, 10, 50, 300)
#: Lengths of a garbage run inside a TLS stream.
GARBAGE = (1, 5, 6, 100, 2000, 20_000)


def _session(rng: Random, seed: TlsSeed, ops: list[str]) -> tuple[Any, bool]:
    """The session's packets as a function of a Conn, and whether it is undamaged."""
    flights: ti.Flights = list(seed.wire)
    if seed.tls13 and rng.random() < 0.3:
        records = ti.app_records(seed)
        updates: dict[int, dict[int, int]] = {}
        for side in rng.sample((0, 1), rng.choice((1, 1, 2))):
            chain = rng.choice(CHAINS)
            spots = rng.choice((1, 1, 3))
            updates[side] = {rng.randrange(records[side] + 1): chain for _ in range(spots)}
            ops.append(f"key_updates[{side}]={sorted(updates[side].items())}")
        flights = ti.with_key_updates(seed, updates)
    damaged = drop = False
    for _ in range(rng.choice((0, 0, 0, 1, 1, 2))):
        kind = rng.choice(ti.DAMAGE)
        side = rng.choice((C2B, B2C))
        mine = [i for i, (d, _) in enumerate(flights) if d == side]
        if not mine:  # an earlier truncation left this side nothing to damage
            continue
        k = rng.randrange(len(mine))
        if kind == "garbage":
            size = rng.choice(GARBAGE)
            junk = ti.plausible_garbage(rng, size) if rng.random() < 0.6 else rng.randbytes(size)
            flights = ti.with_garbage(flights, side, k, rng.randrange(2000), junk)
            ops.append(f"garbage[{side}]#{k}={size}")
        elif kind == "flip":
            d, data = flights[mine[k]]
            flights[mine[k]] = (d, flip_bits(rng, data, 0, len(data), rng.choice((1, 1, 3))))
            ops.append(f"flip[{side}]#{k}")
        elif kind == "truncate":
            d, data = flights[mine[k]]
            flights = flights[: mine[k]] + [(d, data[: rng.randrange(len(data) + 1)])]
            ops.append(f"truncate[{side}]#{k}")
        elif kind == "replay":
            d, data = flights[mine[k]]
            flights.insert(mine[k] + 1, (d, data[: rng.randrange(len(data) + 1)]))
            ops.append(f"replay[{side}]#{k}")
        else:
            drop = True
            ops.append("drop")
        damaged = True
    mss = rng.choice(MSS)
    segs = ti.segments(flights, mss)
    if drop and any(segs):
        side = C2B if segs[C2B] and (not segs[B2C] or rng.random() < 0.5) else B2C
        del segs[side][rng.randrange(len(segs[side]))]
    order = rng.choice(ti.ORDERS)
    ordered = ti.interleave(segs, order, rng)
    ops.append(f"{seed.name}:{order}:mss{mss}")

    def packets(conn: Conn) -> list[Pkt]:
        return ti.session_packets(conn, ordered)

    return packets, not damaged


def make(rng: Random, corpus: Corpus) -> Case:
    del corpus  # the sessions come from the pool
    seeds = pool()
    count = rng.choices(SESSIONS, SESSION_WEIGHTS)[0]
    ops: list[str] = [f"sessions={count}"]
    chosen = [rng.choice(seeds) for _ in range(count)]
    variants = {}  # per seed (sessions of one seed share its keys)
    no_keylog = rng.random() < 0.05
    for s in chosen:
        if s.name not in variants:
            many = count > 4 and rng.random() < 0.8  # most of many sessions wait for keys
            pick = ti.INCOMPLETE_KEYS if many or rng.random() < 0.25 else ti.COMPLETE_KEYS
            variants[s.name] = "missing" if many else rng.choice(pick)
    files: list[str] = []
    if not no_keylog:
        for name, variant in sorted(variants.items()):
            seed = next(s for s in seeds if s.name == name)
            texts = ti.keylog_text(seed, variant, rng, rng.choice(seeds))
            files += texts
            ops.append(f"keys:{name}={variant}")
        if rng.random() < 0.3:
            # one file holding them all: each piece ends its last line, or a cut last
            # line (the "truncated" variant) would run into the next seed's first secret,
            # which the file then really does not hold (tls input 243 of seed 31)
            files = ["".join(t if t.endswith("\n") else t + "\n" for t in files)]
        rng.shuffle(files)
    else:
        ops.append("no_keylog")
    port = rng.choice((6651, 6651, 6651, 443))
    sessions: list[list[Pkt]] = []
    expect: dict[int, tuple[int, int, int, int] | None] = {}
    for i, seed in enumerate(chosen):
        build, undamaged = _session(rng, seed, ops)
        conn = Conn(
            client=f"10.0.{i // 200}.{i % 200 + 1}", client_port=40000 + i, server_port=port
        )
        sessions.append(build(conn))
        keys = not no_keylog and variants[seed.name] in ti.COMPLETE_KEYS
        if no_keylog or variants[seed.name] == "missing":
            expect[40000 + i] = (0, 0, -1, -1)
        elif keys and undamaged:
            expect[40000 + i] = (*seed.frames, *seed.plain)
        else:
            expect[40000 + i] = None
    pkts: list[Pkt] = []
    if rng.random() < 0.5:
        for one in sessions:
            pkts += one
    else:  # packet by packet, round robin
        at = [0] * len(sessions)
        while any(at[k] < len(one) for k, one in enumerate(sessions)):
            for k, one in enumerate(sessions):
                if at[k] < len(one):
                    pkts.append(one[at[k]])
                    at[k] += 1
    data = pcap(stamp(pkts))
    settings = {
        "keylogs": files,
        "expect": expect,
        "tls_ports": (port,),
        "ports": (port,),
        "idle_timeout": rng.choice((None,) * 9 + (1.0,)),
    }
    return Case("tls", len(data), ops, data, settings)


def run(case: Case, workdir: Path) -> Seen:
    path = workdir / "input.pcap"
    path.write_bytes(case.data)
    keylogs = []
    for i, text in enumerate(case.settings["keylogs"]):
        keylogs.append(workdir / f"keys{i}.log")
        keylogs[-1].write_text(text)
    s = case.settings
    options = ReaderOptions.make(
        s["ports"],
        tls_ports=frozenset(s["tls_ports"]),
        tls_keylog=tuple(str(k) for k in keylogs),
        idle_timeout=s["idle_timeout"],
    )
    seen = Seen()
    tables = read_checked(str(path), options, seen)
    cols = ["client_port", "frames_c2b", "frames_b2c", "frame_bytes_c2b", "frame_bytes_b2c"]
    rows = tables["conversations"].select([*cols, "gap_bytes_c2b", "gap_bytes_b2c"]).to_pylist()
    by_port: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_port.setdefault(row["client_port"], []).append(row)
    for port, want in s["expect"].items():
        if want is None:
            continue
        got = by_port.get(port, [])
        total = [sum(r[c] for r in got) for c in cols[1:]]
        if want[2] < 0:  # no key: nothing decrypted
            require(total[:2] == [0, 0], "tls_frames_without_keys", f"port {port}: {total}")
            continue
        gaps = sum(r["gap_bytes_c2b"] + r["gap_bytes_b2c"] for r in got)
        require(
            total == list(want) and gaps == 0,
            "tls_frames_lost",
            f"port {port}: frames c2b/b2c, bytes c2b/b2c {total} (gap bytes {gaps}); "
            f"sent {list(want)}",
        )
    return seen
