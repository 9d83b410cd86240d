"""The compiled dealer (dissector/_core/deal.c) deals as the Python Sharder does.

The reference is `dissector.flow.shard.Sharder` without a compiled dealer, applied packet by
packet to what the Python reader reads, as the pipeline applies it (`of_raw` on the bytes,
else `of` on the parsed segment or header fault). The compiled side is the walk given a
`Dealer` (its packets of this shard come dealt, other shards' are skipped) with a Sharder
sharing that dealer for the packets it leaves to Python. Both must put the same packets in
this shard, on every sample, crafted captures of several connections (IPv4, IPv6, VLAN,
tunnels, fragments, damaged headers), TCP scenarios, mutated captures, and more connections
than a small bound on remembered ones; the clock the pipeline reads before each packet of
this shard, and the time of the last packet read, must be those of the reference.
"""

from __future__ import annotations

import struct
from pathlib import Path
from random import Random

import pytest

from dissector import _core
from dissector._core import Dealer
from dissector.capture import open_capture
from dissector.events import Dealt, DealtRaw, NetIssue, RawPacket, Segment, Skipped
from dissector.flow.shard import Sharder
from dissector.net.headers import parse_layers
from fuzz.mutators import Rec, mutate_capture
from tests.support.core_captures import link_captures, tcp_scenarios
from tests.support.crafted import write_frames

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "pcaps").glob("*.pcap*"))
#: Mutated captures dealt both ways.
MUTANTS = 150

pytestmark = pytest.mark.skipif(not _core.COMPILED, reason="pure-Python build: nothing to compare")


def native_dealer(n: int, mine: int, capacity: int, clock: bool = True) -> Dealer:
    assert _core.native is not None
    made: Dealer = _core.native.Dealer(n, mine, capacity, clock)
    return made


def shard_of(sharder: Sharder, pkt: RawPacket | Segment) -> int | None:
    """The pipeline's deal of one packet (None: not dealt, e.g. not TCP)."""
    if isinstance(pkt, Segment):
        return sharder.of(pkt)
    shard = sharder.of_raw(pkt.linktype, pkt.data)
    if shard >= 0:
        return shard
    parsed = parse_layers(pkt)
    if type(parsed) is Segment or (type(parsed) is NetIssue and parsed.src_port is not None):
        assert isinstance(parsed, (Segment, NetIssue))
        return sharder.of(parsed)
    return None


Dealing = tuple[list[int], list[int], int, list[int]]


def reference(path: Path, n: int, mine: int, capacity: int) -> Dealing:
    """(this shard's packets, the clock before each of them, the last packet's time, the
    packets where the clock steps on: where idle connections may end)."""
    sharder = Sharder(n, capacity)
    numbers, clocks, steps = [], [], []
    clock = last = 0
    with open_capture(path) as reader:
        for pkt in reader:
            if shard_of(sharder, pkt) == mine:
                numbers.append(pkt.number)
                clocks.append(clock)
            if pkt.ts > clock:
                steps.append(pkt.number)
            clock, last = max(clock, pkt.ts), pkt.ts
    return numbers, clocks, last, steps


def compiled(path: Path, n: int, mine: int, capacity: int) -> Dealing:
    """The same, the walk dealing."""
    dealer = native_dealer(n, mine, capacity)
    sharder = Sharder(n, capacity, dealer)
    numbers, clocks, steps = [], [], []
    clock = last = 0
    with open_capture(path) as reader:
        for item in reader.parsed(dealer):
            if type(item) is Skipped:
                if item.top > clock:
                    steps.append(item.at)
                clock, last = max(clock, item.top), item.ts
                continue
            assert isinstance(item, (RawPacket, Segment))
            dealt = type(item) is Dealt or type(item) is DealtRaw
            if dealt or shard_of(sharder, item) == mine:
                numbers.append(item.number)
                clocks.append(clock)
            if item.ts > clock:
                steps.append(item.number)
            clock, last = max(clock, item.ts), item.ts
    return numbers, clocks, last, steps


def same_dealing(path: Path, shards: int = 2, capacity: int = 100_000) -> int:
    """Compare for every shard; the packets dealt (all shards)."""
    dealt = 0
    for mine in range(shards):
        want = reference(path, shards, mine, capacity)
        assert compiled(path, shards, mine, capacity) == want, (path.name, mine, capacity)
        dealt += len(want[0])
    return dealt


# --------------------------------------------------------------------------- the dealer


def test_the_dealer_deals_endpoint_sequences_as_the_sharder() -> None:
    """Random connections (both directions, equal addresses or ports, IPv4 and IPv6) over
    shard counts and bounds, 0 and 1 included: every deal the same."""
    rng = Random(39)
    v4 = [bytes([10, 0, 0, k]) for k in range(4)]
    v6 = [bytes(15) + bytes([k]) for k in range(3)]
    for trial in range(60):
        n, capacity = rng.randint(1, 4), rng.choice((0, 1, 2, 3, 5, 50))
        python, native = Sharder(n, capacity), native_dealer(n, 0, capacity)
        for _ in range(300):
            pool = rng.choice((v4, v6))
            a, b = rng.choice(pool), rng.choice(pool)
            ap, bp = rng.choice((1, 2, 6650)), rng.choice((1, 2, 6650))
            want = python._deal((a, ap), (b, bp))
            assert native.deal(a, ap, b, bp) == want, (trial, n, capacity)


def test_the_dealer_refuses_what_it_cannot_take() -> None:
    assert _core.native is not None
    for args in ((0, 0, 1), (2, 2, 1), (2, 0, -1), (2, 0, _core.native.MAX_DEALER_CAPACITY + 1)):
        with pytest.raises(ValueError):
            _core.native.Dealer(*args)
    dealer = native_dealer(2, 0, 10)
    with pytest.raises(ValueError):
        dealer.deal(bytes(4), 1, bytes(16), 2)
    with pytest.raises(ValueError):
        dealer.deal(bytes(4), 70000, bytes(4), 2)


# --------------------------------------------------------------------------- crafted packets


def ipv4_tcp(src: int, dst: int, sport: int, dport: int, *, version: int = 4) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x18, 512, 0, 0) + b"x" * 8
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        version << 4 | 5, 0, 20 + len(tcp), 0, 0, 64, 6, 0,
        struct.pack("!I", src), struct.pack("!I", dst),
    )  # fmt: skip
    return ip + tcp


def ether(l3: bytes, etype: int = 0x0800, vlan: bool = False) -> bytes:
    head = b"\x02" * 6 + b"\x04" * 6
    if vlan:
        head += struct.pack("!HH", 0x8100, 10)
    return head + struct.pack("!H", etype) + l3


def udp(src: int, dst: int) -> bytes:
    body = struct.pack("!HHHH", 5000, 5001, 12, 0) + b"abcd"
    return struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 0, 0, 64, 17, 0,
        struct.pack("!I", src), struct.pack("!I", dst),
    ) + body  # fmt: skip


def many_connections(
    path: Path, rng: Random, flows: int, packets: int, plain: bool = False
) -> Path:
    """Plain, VLAN-tagged, damaged (IP version 5: keyed from the bytes, parsed in Python),
    UDP and cut packets of `flows` connections, revisited at random (both directions); plain
    TCP packets only with `plain`."""
    frames = []
    for _ in range(packets):
        k = rng.randrange(flows)
        client, broker, port = 0x0A000000 + k % 7, 0x0A000100, 40000 + k
        src, dst, sport, dport = client, broker, port, 6650
        if rng.random() < 0.5:
            src, dst, sport, dport = dst, src, dport, sport
        what = 0.0 if plain else rng.random()
        if what < 0.7:
            frames.append(ether(ipv4_tcp(src, dst, sport, dport)))
        elif what < 0.8:
            frames.append(ether(ipv4_tcp(src, dst, sport, dport), vlan=True))
        elif what < 0.87:
            frames.append(ether(ipv4_tcp(src, dst, sport, dport, version=5)))
        elif what < 0.94:
            frames.append(ether(udp(src, dst)))
        else:
            frames.append(ether(ipv4_tcp(src, dst, sport, dport))[: rng.randint(14, 60)])
    return write_frames(path, frames)


def test_more_connections_than_the_bound(tmp_path: Path) -> None:
    """Connections forgotten and dealt again as new (bounds 1 to 8 for 3 to 40 flows), among
    packets the walk keys from the bytes only, leaves to Python or skips."""
    rng = Random(7)
    for n in range(12):
        path = many_connections(tmp_path / f"many{n}.pcap", rng, rng.randint(3, 40), 400)
        for capacity in (1, 2, 8):
            assert same_dealing(path, rng.randint(2, 4), capacity) > 0


def test_samples_crafted_captures_and_tcp_scenarios(tmp_path: Path) -> None:
    """Every link type, tunnels and fragments (left to Python: the walk stops dealing and
    the Sharder on its dealer goes on) and scenarios of several connections."""
    dealt = 0
    (tmp_path / "links").mkdir()
    paths = SAMPLES + link_captures(tmp_path / "links") + tcp_scenarios(tmp_path, 30)
    for path in paths:
        dealt += same_dealing(path, 2) + same_dealing(path, 3, capacity=1)
    assert dealt > 2 * sum(len(reference(p, 1, 0, 1)[0]) for p in SAMPLES)


def test_mutated_captures(tmp_path: Path) -> None:
    samples = []
    for sample in SAMPLES:
        with open_capture(sample) as reader:
            samples.append([Rec(p.ts, p.linktype, p.data, p.orig_len) for p in reader])
    rng = Random(3939)
    path = tmp_path / "mutant"
    for n in range(MUTANTS):
        records, donor = rng.choice(samples), rng.choice(samples)
        data, _, ops = mutate_capture(rng, records, donor)
        path.write_bytes(data)
        try:
            same_dealing(path, 2, capacity=rng.choice((1, 100)))
        except AssertionError as exc:
            raise AssertionError(f"mutant {n}: {ops}") from exc
        except Exception as exc:  # an unusable file: refused whichever way it is read
            if type(exc).__name__ != "InputError":
                raise


def test_the_walk_skips_other_shards_packets_without_making_them(tmp_path: Path) -> None:
    """The proof of the skip: the packets of shard 1's connections are not made in shard 0
    (the walk's count of packets skipped), yet shard 0's are all there."""
    assert _core.native is not None
    path = many_connections(tmp_path / "plain.pcap", Random(1), 8, 500, plain=True)
    before = _core.native.stats()
    numbers = compiled(path, 2, 0, 100_000)[0]
    after = _core.native.stats()
    others = 500 - len(numbers)
    made = after["segments"] + after["raw_packets"] - before["segments"] - before["raw_packets"]
    skipped = after["packets_skipped"] - before["packets_skipped"]
    # a record the walk stops short of (the end of a read chunk) is read in Python
    assert skipped > 0.95 * others > 200
    assert made <= len(numbers)  # every packet the walk made is of this shard
