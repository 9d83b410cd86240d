"""The fuzz campaign's built levels (tls, multi, cli, outputs) and the growth check's inputs.

Input: the generators of fuzz/ (fuzz.level_*, fuzz.tls_inputs, fuzz.tls13, fuzz.growth) on a
few seeds of the campaign's own Randoms.
Output: pass or fail: the generators make what they say (checked by means other than the
dissector: the independent TLS 1.3 record layer of fuzz.tls13, the packets' own fields), the
invariants hold on inputs the dissector reads correctly, and each invariant fires on an input
known to break it (a wrong expectation, or a stand-in for the dissector that misbehaves).
Rule: no wall-clock time anywhere (the growth check's ratios are judged on given numbers);
the campaign itself (`python -m fuzz.campaign --levels tls,multi,cli,outputs`) and the growth
check (`make fuzz-growth`) are what search for failures.
"""

from __future__ import annotations

import struct
import sys
from itertools import pairwise
from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa
import pytest

from dissector.pulsar.framing import FrameDecoder
from dissector.tls.keylog import LABELS, KeyLog
from fuzz import evil, growth, level_cli, level_multi
from fuzz import tls_inputs as ti
from fuzz.campaign import input_rng, save_case
from fuzz.checks import Case, InvariantError
from fuzz.packets import B2C, C2B, fragments
from fuzz.seeds import Corpus, load
from fuzz.targets import BUILT_LEVELS, Harness
from fuzz.tls13 import Protection, Tls13Rewriter, secrets_of, split_records
from fuzz.tls_pool import pool


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load()


@pytest.fixture(scope="module")
def harness(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return Harness(corpus, tmp_path_factory.mktemp("fuzz-levels"))


def _first(harness: Harness, level: str, ok: Any, limit: int = 400) -> Case:
    """The first campaign input (seed 0) of `level` for which ok(case) holds."""
    for i in range(limit):
        case = harness.make(level, input_rng(0, level, i))
        if ok(case):
            return case
    raise AssertionError(f"no {level} input of that kind in {limit}")


# ------------------------------------------------------------------ the TLS sessions


def test_pool_sessions_decrypt_to_the_frames_put_in() -> None:
    """Every TLS 1.3 session of the pool opens with its key log (RFC 8446, fuzz.tls13) into
    exactly the Pulsar bytes recorded, which the frame decoder cuts into the frames recorded."""
    sessions = [s for s in pool() if s.tls13]
    assert sessions and len(pool()) > len(sessions)  # TLS 1.2 ones too
    for seed in sessions:
        rewriter = Tls13Rewriter(list(seed.wire), seed.keylog, seed.suite)
        for side, direction in ((0, C2B), (1, B2C)):
            data = b"".join(it.plain for it in rewriter.items[side] if it.inner == 23)
            assert len(data) == seed.plain[direction]
            frames = FrameDecoder().feed(data)
            assert len(frames) == seed.frames[direction], seed.name


@pytest.mark.parametrize("chain", [1, 7, 40])
def test_key_update_chain_is_a_valid_session(chain: int) -> None:
    """The rebuilt client stream holds `chain` KeyUpdates more, and opens record after record
    with the key log's secret advanced once per KeyUpdate, to the same application data."""
    seed = next(s for s in pool() if s.tls13)
    before = Tls13Rewriter(list(seed.wire), seed.keylog, seed.suite)
    flights = ti.with_key_updates(seed, {0: {1: chain}})
    stream = b"".join(d for s, d in flights if s == 0)
    records = split_records(stream)
    assert len(records) == len(before.items[0]) + chain
    keys = Protection(seed.suite, secrets_of(seed.keylog)["CLIENT_TRAFFIC_SECRET_0"])
    app, updates = b"", 0
    for rec in records[[it.inner for it in before.items[0]].index(23) - 1 :]:
        opened = keys.open(rec)
        if opened is None:
            continue  # the handshake's records
        inner, plain = opened
        if inner == 22 and plain[0] == 24:  # KeyUpdate
            updates += 1
            keys = keys.updated()
        elif inner == 23:
            app += plain
    assert updates == chain
    assert len(app) == seed.plain[0]


@pytest.mark.parametrize("order", ti.ORDERS)
def test_orders_keep_each_direction_whole(order: str) -> None:
    seed = next(s for s in pool() if not s.tls13)
    segs = ti.segments(list(seed.wire), 100)
    out = ti.interleave(segs, order, Random(3))
    for side in (C2B, B2C):
        sent = b"".join(d for s, d in seed.wire if s == side)
        assert b"".join(d for s, d in out if s == side) == sent
    if order == "finished_first":  # the client's second flight before the broker's first
        first_b2c = next(i for i, (s, _) in enumerate(out) if s == B2C)
        flight1 = next(d for s, d in seed.wire[1:] if s == C2B)
        assert b"".join(d for s, d in out[:first_b2c] if s == C2B).endswith(flight1)


@pytest.mark.parametrize("variant", ti.COMPLETE_KEYS + ti.INCOMPLETE_KEYS)
def test_key_log_variants(variant: str) -> None:
    """Complete variants give every secret of the session, the others do not."""
    seed, other = pool()[0], pool()[2]
    texts = ti.keylog_text(seed, variant, Random(5), other)
    log = KeyLog()
    for text in texts:
        log.feed(text)
        log.flush()
    want = {k: v for k, v in secrets_of(seed.keylog).items() if k in LABELS}
    random = bytes.fromhex(seed.keylog.split("\n")[1].split()[1])
    got = {label: log.get(random, label) for label in want}
    complete = got == want
    assert complete == (variant in ti.COMPLETE_KEYS), (variant, texts)


# ------------------------------------------------------------------ the levels run


def test_tls_undamaged_session_decrypts_to_its_frames(harness: Harness) -> None:
    """A session as sent, with its keys: its conversation has the frames put in."""

    def clean(case: Case) -> bool:
        return (
            case.ops[0] == "sessions=1"
            and any(":sent:" in op for op in case.ops)
            and next(iter(case.settings["expect"].values())) not in (None, (0, 0, -1, -1))
        )

    case = _first(harness, "tls", clean)
    harness.run(case)
    port = next(iter(case.settings["expect"]))
    frames = case.settings["expect"][port]
    case.settings["expect"][port] = (frames[0] + 1, *frames[1:])  # a frame more than sent
    with pytest.raises(InvariantError) as failed:
        harness.run(case)
    assert failed.value.name == "tls_frames_lost"


def test_tls_without_keys_no_frame(harness: Harness) -> None:
    case = _first(harness, "tls", lambda c: "no_keylog" in c.ops)
    harness.run(case)
    assert all(want == (0, 0, -1, -1) for want in case.settings["expect"].values())


@pytest.mark.parametrize("index", range(3))
def test_built_levels_make_the_same_input_again(harness: Harness, index: int) -> None:
    for level in BUILT_LEVELS:
        a = harness.make(level, input_rng(0, level, index))
        b = harness.make(level, input_rng(0, level, index))
        assert (a.data, a.ops) == (b.data, b.ops), level


def test_multi_several_captures(harness: Harness) -> None:
    def plain(case: Case) -> bool:
        s = case.settings
        return s["kind"] == "several" and s["idle_timeout"] is None and s.get("disjoint", False)

    harness.run(_first(harness, "multi", plain))


def test_multi_flags_j2_rows_that_differ(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for the parallel reader that loses one row: the level says so."""
    from dissector.read.parallel import stream_tables_parallel as real

    def losing(paths: Any, options: Any, names: Any, sink: Any, jobs: int) -> Any:
        def drop_first(name: str, batch: pa.RecordBatch) -> None:
            sink(name, batch.slice(1) if name == "frames" else batch)

        return real(paths, options, names, drop_first, jobs)

    monkeypatch.setattr(level_multi, "stream_tables_parallel", losing)
    case = _first(
        harness, "multi", lambda c: c.settings["kind"] == "tap" and "expect" not in c.settings
    )
    with pytest.raises(InvariantError) as failed:
        harness.run(case)
    assert failed.value.name == "j2_differs_from_j1"


def test_outputs_of_a_sample(harness: Harness) -> None:
    harness.run(_first(harness, "outputs", _sample_window))


def _sample_window(case: Case) -> bool:
    """An outputs input that is a sample's window as recorded (no damage, no hostile
    strings, no key log, a UTF-8 name; its API check left out)."""
    s = case.settings
    plain = len(case.ops) == 2 and case.ops[1].startswith("pcap") and s["keylog"] is None
    return plain and s["name"] == "input.pcap" and not s["api"]


def test_outputs_flags_report_markup_and_warnings(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dissector.frontends import report

    case = _first(harness, "outputs", _sample_window)
    case.settings |= {"order": ["report"], "report": True}
    harness.run(case)
    monkeypatch.setattr(report.Report, "html", lambda self: f"<p><{evil.MARK}></p>")
    with pytest.raises(InvariantError) as failed:
        harness.run(case)
    assert failed.value.name == "report_markup"

    def warns(self: Any) -> str:
        import warnings

        warnings.warn("Glyph 27 missing", UserWarning, stacklevel=1)
        return "<p>ok</p>"

    monkeypatch.setattr(report.Report, "html", warns)
    with pytest.raises(InvariantError) as failed:
        harness.run(case)
    assert failed.value.name == "report_warning"


def test_hostile_strings_are_found_when_shown_raw() -> None:
    assert evil.raw_controls("a\tb\nc") == []
    assert evil.raw_controls("x\x1b[31m\x07\x9b") == ["'\\x07'", "'\\x1b'", "'\\x9b'"]
    assert evil.injected_markup(f"<td>&lt;{evil.MARK}&gt; &quot; on{evil.MARK}=1</td>") == []
    assert evil.injected_markup(f"<td><img src=x on{evil.MARK}=1></td>")
    assert evil.injected_markup(f"<script>var a = '</script><{evil.MARK}>'</script>")


# ------------------------------------------------------------------ the command line


def test_cli_known_good_run(harness: Harness) -> None:
    case = _first(harness, "cli", lambda c: c.data[0] == "fields")
    harness.run(case)


@pytest.mark.parametrize(
    ("script", "invariant"),
    [
        ("raise SystemExit(1)", "cli_exit_status"),
        (
            "import sys\nsys.stderr.write('Traceback (most recent call last):\\n')\nexit(2)",
            "cli_traceback",
        ),
        ("import warnings; warnings.warn('noise')", "cli_foreign_stderr"),
        ("import sys; sys.stdout.write('topic=\\x1b]0;t\\x07\\n')", "cli_text_controls"),
        ("open(INPUT, 'ab').write(b'x')", "cli_changed_input"),
        ("open('left.csv', 'w').write('x'); raise SystemExit(2)", "cli_left_output"),
    ],
)
def test_cli_invariants_fire(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, script: str, invariant: str
) -> None:
    """A stand-in for `pulsar-dissect` that misbehaves one way: the level says which."""
    settings = {"files": {"in.pcap": b"pcap"}, "text": True}
    case = Case("cli", 0, [], ["summary", "./in.pcap", "--format", "text"], settings)
    code = "INPUT = 'in.pcap'\n" + script
    monkeypatch.setattr(level_cli, "_command", lambda: [sys.executable, "-c", code])
    with pytest.raises(InvariantError) as failed:
        harness.run(case)
    assert failed.value.name == invariant


def test_cli_full_device_must_fail(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in that prints and exits 0 even when its output cannot be written."""
    settings = {"files": {"in.pcap": b"p"}, "text": True, "full": True}
    case = Case("cli", 0, [], ["summary", "./in.pcap"], settings)
    code = "import os\ntry:\n    os.write(1, b'x' * 10)\nexcept OSError:\n    pass"
    monkeypatch.setattr(level_cli, "_command", lambda: [sys.executable, "-c", code])
    with pytest.raises(InvariantError) as failed:
        harness.run(case)
    assert failed.value.name == "cli_full_device"


def test_save_case_writes_every_file(harness: Harness, tmp_path: Path) -> None:
    case = harness.make("cli", input_rng(0, "cli", 1))
    (folder,) = save_case(case, str(tmp_path / "cli"))
    assert sorted(p.name for p in Path(folder).iterdir()) == sorted(
        [*case.settings["files"], "ARGS.json"]
    )
    multi = harness.make("multi", input_rng(0, "multi", 1))
    assert len(save_case(multi, str(tmp_path / "m"))) >= len(multi.data)


# ------------------------------------------------------------------ the growth check's inputs


def _records(path: str) -> list[bytes]:
    from dissector.capture import open_capture

    with open_capture(path) as reader:
        return [p.data for p in reader]


def test_growth_keyupdate_holds_n_updates(tmp_path: Path) -> None:
    base = split_records(b"".join(d for s, d in growth._tls13().wire if s == 0))
    for n in (3, 6):
        made = growth.make_keyupdate(n, tmp_path)
        client = (40000).to_bytes(2, "big")
        stream = b"".join(r[54:] for r in _records(made.captures[0]) if r[34:36] == client)
        assert len(split_records(stream)) == len(base) + n


def test_growth_overlap_and_teardrop_shapes(tmp_path: Path) -> None:
    recs = _records(growth.make_overlap(50, tmp_path).captures[0])
    seqs = [struct.unpack(">I", r[14 + 20 + 4 : 14 + 20 + 8])[0] for r in recs]
    assert seqs == list(range(1000, 1050))
    assert {len(r) - 14 - 40 for r in recs} == {52}
    frags = _records(growth.make_teardrop(50, tmp_path).captures[0])
    assert len(frags) == 100
    offsets = [struct.unpack(">H", r[14 + 6 : 14 + 8])[0] & 0x1FFF for r in frags]
    assert offsets[:2] == [0, 4]  # the second starts 8 bytes inside the first (40 bytes)
    body = bytes(range(72))
    assert fragments(bytes(20) + body, 40, overlap=8)[1][20:] == body[32:]


def test_growth_waiting_sessions_are_open_together(tmp_path: Path) -> None:
    made = growth.make_waiting(3, tmp_path)
    recs = _records(made.captures[0])
    flags = [r[14 + 20 + 13] for r in recs]
    syns = [i for i, f in enumerate(flags) if f & 0x02]
    fins = [i for i, f in enumerate(flags) if f & 0x01]
    assert len(syns) == 6 and len(fins) == 6 and max(syns) < min(fins)
    assert sum(len(r) for r in recs) > 3 * growth.WAITING_BYTES


def test_growth_resync_grows_by_the_garbage(tmp_path: Path) -> None:
    small = Path(growth.make_resync(1000, tmp_path).captures[0]).stat().st_size
    large = Path(growth.make_resync(3000, tmp_path).captures[0]).stat().st_size
    assert large - small >= 2000


@pytest.mark.parametrize(
    ("times", "ok"),
    [
        ([1.0, 2.0, 4.1], True),
        ([1.0, 4.0, 16.0], False),
        ([0.01, 0.04, 0.09], True),
        ([1.0, 2.0, 5.0], False),
    ],
)
def test_growth_judges_ratios(times: list[float], ok: bool) -> None:
    assert growth._judge(times, growth.RATIO)[1] is ok


def _pulsar_frames(path: str) -> list[tuple[int, int, Any]]:
    """(packet time, client port, Frame) of each frame of a growth_acks capture: each TCP
    payload (Ethernet, IPv4 and TCP headers without options: 54 bytes) cut by a frame
    decoder per (connection, direction) of the ports in the TCP header."""
    from dissector.capture import open_capture

    decoders: dict[tuple[int, int], FrameDecoder] = {}
    out = []
    with open_capture(path) as reader:
        for p in reader:
            sport, dport = struct.unpack(">HH", p.data[34:38])
            side = (sport, dport)
            decoder = decoders.setdefault(side, FrameDecoder())
            client = dport if sport == 6650 else sport
            out += [(p.ts, client, f) for f in decoder.feed(bytes(p.data[54:]))]
    return out


def test_growth_acks_makers_hold_n(tmp_path: Path) -> None:
    """cumulative_ack: n MESSAGEs, then n cumulative ACKs below every id delivered;
    sweep_consumers: n consumers subscribed with permits, then n PINGs a second apart;
    sweep_conns: n connections with their CONNECT, then n PINGs a second apart."""
    from fuzz import growth_acks

    n = 7
    frames = _pulsar_frames(growth_acks.make_cumulative_ack(n, tmp_path).captures[0])
    msgs = [f.body.message_id for _, _, f in frames if f.command_name == "MESSAGE"]
    acks = [f.body for _, _, f in frames if f.command_name == "ACK"]
    assert len(msgs) == len(acks) == n and all(a.ack_type == 1 for a in acks)
    lowest = min((m.ledgerId, m.entryId) for m in msgs)
    assert all((a.message_id[0].ledgerId, a.message_id[0].entryId) < lowest for a in acks)

    frames = _pulsar_frames(growth_acks.make_sweep_consumers(n, tmp_path).captures[0])
    names = [f.command_name for _, _, f in frames]
    assert names.count("SUBSCRIBE") == names.count("SUCCESS") == names.count("FLOW") == n
    pings = [ts for ts, _, f in frames if f.command_name == "PING"]
    assert len(pings) == names.count("PONG") == n
    assert [b - a for a, b in pairwise(pings)] == [1_000_000] * (n - 1)

    frames = _pulsar_frames(growth_acks.make_sweep_conns(n, tmp_path).captures[0])
    assert len({c for _, c, f in frames if f.command_name == "CONNECT"}) == n
    assert len({c for _, c, f in frames if f.command_name == "PING"}) == 1
    assert sum(f.command_name == "PING" for _, _, f in frames) == n
