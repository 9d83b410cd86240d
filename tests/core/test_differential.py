"""The compiled stage (dissector._core) against the Python stages it stands in for.

The reference is the pure reader (`CaptureReader.__iter__`, which never calls the compiled
walk) followed by `dissector.net.headers.parse_layers`; the compiled path is
`CaptureReader.parsed()`, whose `Segment`s were made in C and whose `RawPacket`s are parsed
by the same Python code. Both must give the same parse result per packet, the same raw
packets where the C path hands one back, and the same capture issues: on every bundled
sample, on crafted captures of every link type, byte order and timestamp resolution, and on
mutated captures (fuzz/mutators.py). Where a C compiler was present at install, the compiled
module must be the one loaded (a build that fell back to Python silently would otherwise
pass every test here while testing nothing).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from random import Random

import pytest

from dissector import _core
from dissector.capture import open_capture
from dissector.events import RawPacket, Segment
from dissector.net.headers import parse_layers
from fuzz.mutators import Rec, mutate_capture
from tests.support.core_captures import link_captures, odd_pcapng
from tests.support.crafted import Conn, baseline_session, write_pcap

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "pcaps").glob("*.pcap*"))
#: Mutated captures compared per run of the suite (the campaign runs many more).
MUTANTS = 3000

needs_core = pytest.mark.skipif(not _core.COMPILED, reason="pure-Python build: no compiled stage")


def test_the_compiled_stage_is_loaded_where_a_compiler_is() -> None:
    compiler = shutil.which(os.environ.get("CC", "cc")) is not None
    expected = compiler and os.environ.get("PULSAR_DISSECTOR_PURE") != "1"
    assert expected == _core.COMPILED, "make install (or PULSAR_DISSECTOR_PURE=1 for both)"
    if expected:
        assert _core.native is not None
        where = _core.native.__file__ or ""
        assert where.endswith(".so"), where
        source = ROOT / "dissector" / "_core" / "walk.c"
        assert os.path.getmtime(where) >= source.stat().st_mtime, "stale build: make install"


def both(path: Path) -> tuple[list[object], list[object]]:
    """(reference, compiled): per packet its parse result (and the raw packets the compiled
    path handed back), then the issues."""
    with open_capture(path) as reader:
        packets = list(reader)
        ref: list[object] = [parse_layers(p) for p in packets]
        ref_issues = list(reader.issues)
    with open_capture(path) as reader:
        got: list[object] = []
        raws = []
        for item in reader.parsed():
            if type(item) is Segment:
                got.append(item)
            else:
                assert type(item) is RawPacket
                raws.append(item)
                got.append(parse_layers(item))
        issues = list(reader.issues)
    assert got == ref
    assert issues == ref_issues
    by_number = {p.number: p for p in packets}
    assert all(by_number[r.number] == r for r in raws)
    return ref, got


@needs_core
@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample(path: Path) -> None:
    ref, _ = both(path)
    assert ref


@needs_core
def test_the_compiled_stage_parses_the_common_packets_itself(tmp_path: Path) -> None:
    """Plain Ethernet/VLAN IPv4 and IPv6 TCP come back as Segments, parsed in C."""
    for link in ("ether", "vlan", "qinq"):
        for conn in (Conn(), Conn(client_ip="fd00::1", broker_ip="fd00::2")):
            path = tmp_path / f"{link}-{conn.ipv6}.pcap"
            write_pcap(path, baseline_session(conn).segs, link=link)
            with open_capture(path) as reader:
                items = list(reader.parsed())
            assert items and all(type(i) is Segment for i in items), (link, conn)


@needs_core
def test_crafted_captures_of_every_link_type(tmp_path: Path) -> None:
    for path in link_captures(tmp_path):
        both(path)


@needs_core
def test_pcapng_blocks_and_rules_the_walk_leaves_to_python(tmp_path: Path) -> None:
    ref, _ = both(odd_pcapng(tmp_path))
    assert len(ref) > 10


def _records(path: Path) -> list[Rec]:
    with open_capture(path) as reader:
        return [Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader]


@needs_core
def test_mutated_captures(tmp_path: Path) -> None:
    samples = [_records(p) for p in SAMPLES]
    rng = Random(27)
    path = tmp_path / "mutant"
    for n in range(MUTANTS):
        records, donor = rng.choice(samples), rng.choice(samples)
        data, _, ops = mutate_capture(rng, records, donor)
        path.write_bytes(data)
        try:
            both(path)
        except AssertionError as exc:
            raise AssertionError(f"mutant {n}: {ops}") from exc
        except Exception as exc:  # an unusable file must be refused alike by both paths
            if type(exc).__name__ != "InputError":
                raise


@needs_core
def test_the_columns_hold_what_the_segments_hold() -> None:
    """The column form of a batch (for the later Arrow stages) agrees with its items."""
    assert _core.native is not None
    path = ROOT / "pcaps" / "produce_consume.pcap"
    buf = path.read_bytes()
    _, _, items = _core.native.scan_pcap(buf, 24, True, 1, 1, 0)
    _, _, cols = _core.native.scan_pcap(buf, 24, True, 1, 1, 0, columns=True)
    column = {name: b"".join(chunks) for name, chunks in cols.items()}
    ts = memoryview(column["ts"]).cast("q").tolist()
    sport = memoryview(column["sport"]).cast("I").tolist()
    seq = memoryview(column["seq"]).cast("I").tolist()
    off = memoryview(column["pay_off"]).cast("q").tolist()
    size = memoryview(column["pay_len"]).cast("q").tolist()
    assert len(ts) == len(items) > 0
    for i, seg in enumerate(items):
        assert type(seg) is Segment
        assert (seg.ts, seg.src_port, seg.seq) == (ts[i], sport[i], seq[i])
        assert seg.payload == buf[off[i] : off[i] + size[i]]
