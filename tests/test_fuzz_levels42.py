"""The campaign's levels of issue 42 (values, journeys, diagnose) and the work counter.

Input: the generators of fuzz/level_values.py, level_journeys.py, level_diagnose.py and
fuzz/work.py on a few of the campaign's own seeds, and tables crafted to break each invariant.
Output: pass or fail: the makers make what they say (frames read back here by their size
prefix and protobuf, not by the dissector; Avro bytes hand-computed from the spec), and each
invariant fires on a crafted violation and holds on a correct table.
Rule: no wall-clock time; nothing here depends on the dissector's known bugs of issue 42
(the campaign finds those).
"""

from __future__ import annotations

import struct
from random import Random
from typing import Any

import pyarrow as pa
import pytest

from dissector.pulsar.wire import COMMAND_TYPES, BaseCommand
from dissector.tables.schema import TABLES
from fuzz import level_diagnose, level_journeys, level_values, work
from fuzz.campaign import input_rng
from fuzz.checks import InvariantError

NO_CORPUS: Any = None  # the levels of issue 42 build their inputs without the samples
NAMES = {number: name for name, number in COMMAND_TYPES.items()}


def _commands(data: bytes) -> list[str]:
    """The command names of a pcap's frames: TCP payloads per direction, split by the
    frames' own size prefix (the dissector is not used)."""
    streams: dict[tuple[int, int], bytearray] = {}
    at = 24
    while at < len(data):
        caplen = struct.unpack_from("<I", data, at + 8)[0]
        packet = data[at + 16 : at + 16 + caplen]  # Ethernet, IPv4 and TCP without options
        at += 16 + caplen
        sport, dport = struct.unpack_from(">HH", packet, 34)
        streams.setdefault((sport, dport), bytearray()).extend(packet[54:])
    out = []
    for stream in streams.values():
        pos = 0
        while pos < len(stream):
            total, size = struct.unpack_from(">II", stream, pos)
            cmd = BaseCommand()
            cmd.ParseFromString(bytes(stream[pos + 8 : pos + 8 + size]))
            out.append(NAMES[cmd.type])
            pos += 4 + total
    return out


def test_cumulative_scan_holds_n_deliveries_and_n_cumulative_acks() -> None:
    counted = _commands(level_journeys.cumulative_scan(50))
    assert counted.count("MESSAGE") == 50
    assert counted.count("ACK") == 50


def test_consumers_then_pings_holds_n_consumers() -> None:
    counted = _commands(level_diagnose.consumers_then_pings(40))
    assert counted.count("SUBSCRIBE") == 40
    assert counted.count("PING") == 4


def test_null_array_is_four_bytes_for_999999_items() -> None:
    # 999,999 zigzagged is 1,999,998 = 0x1E847E: varint groups 7E, 08, 7A; then the end (0)
    assert level_values.null_array(999_999) == b"\xfe\x88\x7a\x00"
    assert level_values.zigzag(-1) == b"\x01"
    assert level_values.null_array(999_999) in level_values.nulls_capture(999_999)


@pytest.mark.parametrize("level", [level_values, level_journeys, level_diagnose])
def test_makers_are_reproducible(level: Any) -> None:
    for i in range(5):
        a = level.make(input_rng(0, level.__name__, i), NO_CORPUS)
        b = level.make(input_rng(0, level.__name__, i), NO_CORPUS)
        assert (a.data, a.ops, a.size) == (b.data, b.ops, b.size)
        assert a.size == len(a.data)


def _table(name: str, **columns: list[Any]) -> pa.Table:
    schema = TABLES[name].schema
    n = len(next(iter(columns.values())))
    return pa.table(
        {f.name: pa.array(columns.get(f.name, [None] * n), f.type) for f in schema}, schema=schema
    )


def _fires(name: str, fn: Any, *args: Any) -> None:
    with pytest.raises(InvariantError) as failed:
        fn(*args)
    assert failed.value.name == name


def test_journey_invariants() -> None:
    settings = {"ids": {(1, 2)}, "frames": 1, "values": True}
    good = _table("journeys", ledger_id=[1], entry_id=[2], value_error=["no schema"])
    level_journeys.check_journeys(good, settings, 100)
    unseen = _table("journeys", ledger_id=[1], entry_id=[3], value_error=["x"])
    _fires("journey_unseen_id", level_journeys.check_journeys, unseen, settings, 100)
    mute = _table("journeys", ledger_id=[1], entry_id=[2])
    _fires("journey_value_unexplained", level_journeys.check_journeys, mute, settings, 100)
    many = _table("journeys", ledger_id=[1] * 90, entry_id=[2] * 90, value=["1"] * 90)
    _fires("journey_rows", level_journeys.check_journeys, many, settings, 100)


def test_findings_invariants() -> None:
    settings: dict[str, object] = {"packets": 10, "quiet": {1}, "stormy": {2}}
    storm = level_diagnose.STORM
    good = _table("findings", code=[storm], entity=["consumer 2 (sub s2)"], evidence=[[3, 10]])
    level_diagnose.check_findings(good, settings)
    alarm = _table(
        "findings",
        code=[storm, storm],
        entity=["consumer 2 (s)", "consumer 1 (s)"],
        evidence=[[], []],
    )
    _fires("storm_false_alarm", level_diagnose.check_findings, alarm, settings)
    _fires("storm_missed", level_diagnose.check_findings, _table("findings", code=[]), settings)
    beyond = _table("findings", code=[storm], entity=["consumer 2 (s)"], evidence=[[11]])
    _fires("evidence_not_in_capture", level_diagnose.check_findings, beyond, settings)
    odd = _table("findings", code=["made.up"], entity=["x"], evidence=[[]])
    _fires("unregistered_finding", level_diagnose.check_findings, odd, settings)


def test_value_invariants() -> None:
    check = level_values.check_values
    check(_table("messages", value=['"a"'], value_schema=["STRING v0"]), {"charset": "UTF-8"})
    _fires("value_unexplained", check, _table("messages", value_schema=["x"]), {})
    internal = _table("messages", value_error=["internal error: LookupError: x"])
    _fires("value_internal_error", check, internal, {})
    _fires(
        "value_schema_label",
        check,
        _table("messages", value_schema=["0x" + "00" * 100], value=["1"]),
        {},
    )
    _fires("charset_not_text", check, _table("messages", value=['"a"']), {"charset": "rot13"})
    _fires("decimal_precision", check, _table("messages", value=['"123.45"']), {"precision": 4})
    nulls = _table("messages", value=["[" + ",".join(["null"] * 200) + "]"])
    _fires("items_from_nothing", check, nulls, {"array": True})


def test_redaction_invariants() -> None:
    secret, big = level_values.SECRET, level_values.BIG

    def tables(value: str) -> dict[str, pa.Table]:
        return {n: _table(n, value=[value]) for n in ("messages", "journeys")}

    plain = tables(f'{{"card":"{secret}","id":{big}}}')
    level_values.check_redacted(plain, tables(f'{{"card":"***","id":{big}}}'))
    floated = tables('{"card":"***","id":1.2345678901234568e+29}')
    _fires("redaction_changes_value", level_values.check_redacted, plain, floated)
    leak = tables(f'{{"card":"***","id":{big}}}')
    leak["messages"] = _table(
        "messages", value=[f'{{"card":"***","id":{big}}}'], payload_preview=[secret[3:12].encode()]
    )
    _fires("redaction_leak", level_values.check_redacted, plain, leak)
    _fires("redaction_leak", level_values.check_redacted, plain, leak, True)
    _fires("redaction_leak", level_values._no_secret, secret.encode().hex(), "hex")


def test_count_lines_counts_every_turn_of_a_dissector_loop() -> None:
    space: dict[str, Any] = {}
    source = "def loop(n):\n    t = 0\n    for i in range(n):\n        t += i\n    return t\n"
    exec(compile(source, "/x/dissector/fake.py", "exec"), space)
    _, ten = work.count_lines(lambda: space["loop"](10))
    _, twenty = work.count_lines(lambda: space["loop"](20))
    assert twenty - ten == 20  # two lines per turn (the for and its body), ten turns more
    exec(compile(source, "/x/other/fake.py", "exec"), space)
    assert work.count_lines(lambda: space["loop"](10))[1] == 0


def test_check_growth_judges_increments() -> None:
    work.check_growth(
        "linear", [(1000 + 10 * 100, 100), (1000 + 10 * 200, 200), (1000 + 10 * 400, 400)]
    )
    work.check_growth("bounded by bytes", [(50_000, 10), (50_000, 11), (50_000, 12)])
    quadratic = [(n * n + 10 * n, 10 * n) for n in (100, 200, 400)]
    _fires("work_growth", work.check_growth, "quadratic", quadratic)
    claims = [(50_000 + 3 * n, 10) for n in (20_000, 40_000, 80_000)]
    _fires("work_growth", work.check_growth, "per claimed item", claims)


def test_journeys_maker_names_its_ids() -> None:
    case = level_journeys.make(Random(0), NO_CORPUS)
    assert case.settings["ids"] and case.settings["frames"] > 4
