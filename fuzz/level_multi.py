"""The `multi` level: several captures read at once (merged by time, or one after another).

Input: a `random.Random`; windows of the sample captures (fuzz.seeds) and the TLS sessions of
fuzz.tls_pool.
Output: `make` gives a `Case` whose data is the list of capture files' bytes (in the order
given to the reader) and whose settings say how they were made; `run` reads and checks them.
What an input is, one of:
- several: two or three windows of different samples, each shifted in time so that they
  overlap, follow each other or come in the wrong order, sometimes lightly damaged;
- tap: one capture (a sample window, or a TLS session with its key log) split into one file
  per direction, as a full-duplex TAP writes them, the broker's side with its clock skewed
  (0, a microsecond, 20 ms either way);
- backwards: the packets of two samples' windows interleaved in one or two files whose
  timestamps jump back (a minute, eleven days) at some packet.
Read with ReaderOptions: merged or not (--no-merge), an idle timeout or none, key logs.
Invariants: those of every capture (fuzz.checks.read_checked); `-j 2` gives the rows of
`-j 1` (sorted as dissector.read.parallel documents); --no-merge gives, table by table, the
rows of each file read alone; merging files that share no connection, without an idle
timeout, too; a TAP pair without skew gives the frames of the capture it was split from; a
TLS session split with any skew decrypts to the frames put in.
"""

from __future__ import annotations

from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dissector.read import ReaderOptions, read_tables
from dissector.read.parallel import stream_tables_parallel
from dissector.tables.schema import TABLES
from fuzz import mutators as mu
from fuzz import tls_inputs as ti
from fuzz.checks import Case, Seen, read_checked, require, table_rows
from fuzz.packets import Conn, pcap, stamp
from fuzz.seeds import Corpus
from fuzz.tls_pool import pool

KINDS = ("several", "several", "tap", "tap", "backwards")
#: Skews of the broker side's clock in a TAP pair (µs).
SKEWS = (0, 0, 1, 20_000, -20_000)
#: How far timestamps jump back in the `backwards` inputs (µs).
JUMPS = (60_000_000, 1_000_000_000_000, 1)
IDLE = (None, None, None, 0.001, 0.000001, 1.0)
#: The documented order of -j N rows (dissector.read.parallel): stable by conn_id; anomalies
#: tied to no connection by packet.
ORDER = {name: ["conn_id"] for name in TABLES} | {"anomalies": ["conn_id", "packet"]}


def _flows(recs: list[mu.Rec]) -> set[frozenset[tuple[bytes, bytes]]]:
    """Each TCP connection of the records, whichever way its packets go."""
    out = set()
    for r in recs:
        s = mu.tcp_span(r)
        if s is not None:
            a, b, pa_, pb = mu.flow_of(r, s)
            out.add(frozenset(((a, pa_), (b, pb))))
    return out


def _shifted(recs: list[mu.Rec], by: int) -> list[mu.Rec]:
    return [r._replace(ts=max(0, r.ts + by)) for r in recs]


def _several(rng: Random, corpus: Corpus, ops: list[str]) -> dict[str, Any]:
    names = rng.sample(range(len(corpus.captures)), rng.choice((2, 2, 3)))
    files, flows = [], []
    base = 1_700_000_000_000_000
    for k, i in enumerate(names):
        seed = corpus.captures[i]
        recs = mu.window(rng, seed.records)
        if rng.random() < 0.25:
            mu.mutate_records(rng, recs, [], ops, 1)
        start = recs[0].ts if recs else 0
        how = rng.choice(("overlap", "after", "before"))
        by = {"overlap": rng.randrange(0, 3000), "after": k * 10_000_000, "before": -k * 10_000_000}
        recs = _shifted(recs, base - start + by[how])
        files.append(recs)
        flows.append(_flows(recs))
        ops.append(f"{seed.name}:{how}")
    disjoint = all(not (a & b) for i, a in enumerate(flows) for b in flows[i + 1 :])
    return {"files": files, "disjoint": disjoint}


def _tap(rng: Random, corpus: Corpus, ops: list[str]) -> dict[str, Any]:
    skew = rng.choice(SKEWS)
    out: dict[str, Any] = {"skew": skew}
    if rng.random() < 0.5:
        seed = rng.choice(pool())
        order = rng.choice(ti.ORDERS)
        flights = ti.segments(list(seed.wire), 1400)
        pkts = ti.session_packets(Conn(server_port=6651), ti.interleave(flights, order, rng))
        # the session outlasts twice the skew: two files whose time spans do not overlap
        # were not taken at the same time and are read one after the other (capture.merge)
        step = max(rng.choice((100, 1000)), 2 * abs(skew) // max(1, len(pkts) - 1) + 1)
        recs = stamp(pkts, step=step)
        sides = [[r for r, p in zip(recs, pkts, strict=True) if p.direction == d] for d in (0, 1)]
        out |= {"keylog": seed.keylog, "expect": (*seed.frames, *seed.plain)}
        ops.append(f"tap:{seed.name}:{order}:skew={skew}")
    else:
        seed_c = rng.choice(corpus.captures)
        recs = list(seed_c.records[: mu.MAX_WINDOW * 2])
        sides = [[], []]
        for r in recs:
            s = mu.tcp_span(r)
            broker = s is not None and r.data[s.tcp : s.tcp + 2] in (b"\x19\xfa", b"\x19\xfb")
            sides[1 if broker else 0].append(r)
        ops.append(f"tap:{seed_c.name}:skew={skew}")
    out["whole"] = recs
    out["files"] = [sides[0], _shifted(sides[1], skew)]
    if rng.random() < 0.3:
        out["files"].reverse()
        ops.append("reversed")
    return out


def _backwards(rng: Random, corpus: Corpus, ops: list[str]) -> dict[str, Any]:
    a, b = rng.sample(corpus.captures, 2)
    ra, rb = mu.window(rng, a.records), mu.window(rng, b.records)
    rb = _shifted(rb, (ra[0].ts if ra else 0) - (rb[0].ts if rb else 0) + 50)
    recs = sorted(ra + rb, key=lambda r: r.ts)
    at = rng.randrange(len(recs))
    jump = rng.choice(JUMPS)
    recs = recs[:at] + _shifted(recs[at:], -jump)
    if rng.random() < 0.3 and at < len(recs):
        recs[at] = recs[at]._replace(ts=max(0, recs[at].ts - jump * 1000))
    ops.append(f"backwards:{a.name}+{b.name}@{at}-{jump}")
    files = [recs] if rng.random() < 0.6 else [recs[: len(recs) // 2], recs[len(recs) // 2 :]]
    return {"files": files}


def make(rng: Random, corpus: Corpus) -> Case:
    kind = rng.choice(KINDS)
    ops: list[str] = [kind]
    made = {"several": _several, "tap": _tap, "backwards": _backwards}[kind](rng, corpus, ops)
    data = []
    for recs in made.pop("files"):
        if not recs:
            recs = [mu.Rec(1_700_000_000_000_000, mu.ETHER, bytes(60), 60)]
        data.append(mu.write_pcap(rng, recs, ops)[0] if rng.random() < 0.5 else pcap(recs))
    whole = made.pop("whole", None)
    settings: dict[str, Any] = {
        **made,
        "kind": kind,
        "merge": rng.random() < 0.8,
        "idle_timeout": rng.choice(IDLE),
        "whole": None if whole is None else pcap(whole),
    }
    return Case("multi", sum(map(len, data)), ops, data, settings)


def _sorted(table: pa.Table, name: str, drop: tuple[str, ...] = ()) -> pa.Table:
    keep = [c for c in table.column_names if c not in drop]
    order = pc.sort_indices(table, [(c, "ascending") for c in ORDER[name]])
    return table.take(order).select(keep)


def _differs(a: dict[str, pa.Table], b: dict[str, pa.Table], drop: tuple[str, ...] = ()) -> str:
    for name in a:
        x, y = _sorted(a[name], name, drop), _sorted(b[name], name, drop)
        if not x.equals(y):
            return f"{name}: {x.num_rows} rows and {y.num_rows}"
    return ""


def run(case: Case, workdir: Path) -> Seen:
    s = case.settings
    paths = []
    for i, data in enumerate(case.data):
        paths.append(str(workdir / f"multi{i}.pcap"))
        Path(paths[-1]).write_bytes(data)
    keylogs: tuple[str, ...] = ()
    if "keylog" in s:
        (workdir / "multi.keys").write_text(s["keylog"])
        keylogs = (str(workdir / "multi.keys"),)
    options = ReaderOptions(merge=s["merge"], idle_timeout=s["idle_timeout"], tls_keylog=keylogs)
    seen = Seen()
    read_checked(paths, options, seen)
    if seen.rejected:
        return seen
    one = read_tables(paths, options)
    names = list(TABLES)
    made: dict[str, list[pa.RecordBatch]] = {n: [] for n in names}
    stream_tables_parallel(paths, options, names, lambda n, b: made[n].append(b), 2)
    two = {n: pa.Table.from_batches(made[n], schema=TABLES[n].schema) for n in names}
    diff = _differs(one, two)
    require(not diff, "j2_differs_from_j1", diff, diff.split(":")[0])
    if not s["merge"] or (s.get("disjoint") and s["idle_timeout"] is None):
        alone = [table_rows(read_tables(p, options)) for p in paths]
        summed = {n: sum(a[n] for a in alone) for n in names}
        why = "no_merge_rows" if not s["merge"] else "merged_rows"
        require(table_rows(one) == summed, why, f"{table_rows(one)} != {summed} (files alone)")
    if s.get("whole") is not None:
        _check_tap(case, workdir, options, one)
    return seen


def _check_tap(case: Case, workdir: Path, options: ReaderOptions, one: dict[str, pa.Table]) -> None:
    s = case.settings
    frames = one["conversations"].select(
        ["frames_c2b", "frames_b2c", "frame_bytes_c2b", "frame_bytes_b2c"]
    )
    got = [pc.sum(frames.column(i)).as_py() or 0 for i in range(4)]
    if "expect" in s:
        if s["idle_timeout"] is not None:  # a connection may end between two packets
            return
        if not s["merge"]:  # --no-merge: each half is a one-way connection of its own file
            return
        require(got == list(s["expect"]), "tap_tls_frames_lost", f"{got}, sent {list(s['expect'])}")
        return
    if s["skew"] == 0 and s["merge"]:
        whole = workdir / "whole.pcap"
        whole.write_bytes(s["whole"])
        cols = ("frames", ["conn_id", "direction", "stream_offset", "command", "frame_size"])
        mine = one[cols[0]].select(cols[1])
        theirs = read_tables(str(whole), options)[cols[0]].select(cols[1])
        require(
            _sorted(mine, "frames").equals(_sorted(theirs, "frames")),
            "tap_differs_from_capture",
            f"{mine.num_rows} frames from the pair, {theirs.num_rows} from the capture",
        )
