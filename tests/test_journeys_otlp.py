"""Journeys as OpenTelemetry spans (`read --table journeys --format otlp`): the file is read
back with the opentelemetry-proto package's classes, every span checked against its row.

Expected times and ids come from the crafted scenes (`us`, `Scene.packet`) and from the
rows' trace columns as the propagators define them (W3C 32 hex digits; B3 and Jaeger ids
zero-padded on the left to 32 / 16 digits), never from the exporter.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dissector.read import read_capture
from dissector.tables.journeys import JOURNEYS
from dissector.tables.otlp import journey_spans
from dissector.tables.output import write_table
from tests.support.cli import cli
from tests.support.crafted import B2C, Conn, msg
from tests.support.otlp import attributes, check, parse, spans
from tests.support.scenes import (
    SUB,
    TOPIC,
    Scene,
    ack,
    flow,
    producer,
    receipt,
    subscribe,
    us,
)
from tests.test_journeys_crafted import PRODUCER, _message, _send, _sub


def _table(path: Path) -> pa.Table:
    return read_capture(path, tables=["journeys"]).arrow["journeys"]


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with times as µs since the epoch."""
    schema = pa.schema(
        [f.with_type(pa.int64()) if pa.types.is_timestamp(f.type) else f for f in table.schema]
    )
    rows: list[dict[str, Any]] = table.cast(schema).to_pylist()
    return rows


def _scene(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """One message to two subscriptions, a second one delivered before its receipt reached
    the capture (dispatch < 0), a third refused (SEND_ERROR), a fourth never answered."""
    s = Scene()
    p, a, b = (s.open(Conn(client_port=port)) for port in (40001, 40002, 40003))
    subscriptions = {a: ("orders-a", 2, 0, "alice"), b: ("orders-b", 5, 1, "bob")}
    frames = [(m, p) for m in producer(name=PRODUCER)]
    for conn, (name, cid, kind, consumer) in subscriptions.items():
        frames += [(m, conn) for m in _sub(name, cid, cid + 1, kind, consumer)]
    for m, conn in frames:
        s.at(0, m, conn)
    s.at(0.1, flow(10), a).at(0.1, flow(10, cid=5), b)
    sent, stored = _send(7), receipt(7, entry=3)
    to_a, to_b, ack_a = _message(3, 7), _message(3, 7, cid=5), ack(3)
    s.at(1.0, sent, p).at(1.002, stored, p).at(1.005, to_a, a).at(1.25, ack_a, a)
    s.at(1.007, to_b, b)  # never acked
    s.at(2.0, _send(8), p).at(2.001, _message(4, 8), a).at(2.003, receipt(8, entry=4), p)
    refused = msg(B2C, "SEND_ERROR", producer_id=1, sequence_id=9, error=2, message="disk")
    s.at(3.0, _send(9), p).at(3.1, refused, p).at(4.0, _send(10), p)
    for conn in (p, a, b):
        s.close(5, conn)
    path = s.write(tmp_path / "c.pcap")
    return path, {"sent": s.packet(sent), "stored": s.packet(stored), "acked": s.packet(ack_a)}


def test_spans_of_crafted_journeys(tmp_path: Path) -> None:
    cap, packets = _scene(tmp_path)
    out = tmp_path / "spans.otlp.jsonl"
    done = cli("read", str(cap), "--table", "journeys", "--format", "otlp", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = _rows(_table(cap))
    assert len(rows) == 5
    by_row = check(rows, spans(parse(out.read_bytes())))
    by_key = {(r["sequence_id"], r["subscription"]): by_row[i] for i, r in enumerate(rows)}
    # the scene's own truth, for the one message with every hop
    journey, persist, dispatch, consume = by_key[(7, "orders-a")]
    assert (journey.start_time_unix_nano, journey.end_time_unix_nano) == (
        us(1.0) * 1000,
        us(1.25) * 1000,
    )
    assert (persist.start_time_unix_nano, persist.end_time_unix_nano) == (
        us(1.0) * 1000,
        us(1.002) * 1000,
    )
    assert (dispatch.end_time_unix_nano, consume.end_time_unix_nano) == (
        us(1.005) * 1000,
        us(1.25) * 1000,
    )
    a = attributes(persist)
    assert (a["pulsar.send_packet"], a["pulsar.receipt_packet"]) == (
        packets["sent"],
        packets["stored"],
    )
    assert attributes(consume)["pulsar.acked_packet"] == packets["acked"]
    c = attributes(consume)
    assert (c["messaging.message.id"], c["messaging.destination.name"]) == ("9:3:-1", TOPIC)
    assert (c["messaging.consumer.group.name"], c["messaging.client.id"]) == ("orders-a", "alice")
    # the same message's journey to another subscription: the same trace, another span
    other = by_key[(7, "orders-b")]
    assert [s.name.split()[0] for s in other] == ["journey", "persist", "dispatch"]
    assert other[0].trace_id == journey.trace_id and other[0].span_id != journey.span_id
    # delivered 2 ms before its receipt: the dispatch span is empty, its latency negative
    late = by_key[(8, "orders-a")]
    assert attributes(late[2])["pulsar.dispatch_us"] == -2_000
    assert late[2].start_time_unix_nano == late[2].end_time_unix_nano == us(2.003) * 1000
    assert late[0].trace_id != journey.trace_id
    # refused: one span, an error; never answered: one span of no length
    (refused,) = by_key[(9, None)]
    assert refused.status.message == "PersistenceError"
    (lost,) = by_key[(10, None)]
    assert lost.start_time_unix_nano == lost.end_time_unix_nano == us(4.0) * 1000


def _with_trace(rows: list[dict[str, Any]], *contexts: tuple[Any, Any, Any]) -> pa.Table:
    """The rows (times µs) with these trace columns, as the journeys table."""
    out = []
    for row, (trace, span, fmt) in zip(rows, contexts, strict=True):
        out.append({**row, "trace_id": trace, "span_id": span, "trace_format": fmt})
    schema = pa.schema(
        [f.with_type(pa.int64()) if pa.types.is_timestamp(f.type) else f for f in JOURNEYS.schema]
    )
    return pa.Table.from_pylist(out, schema=schema).cast(JOURNEYS.schema)


W3C = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "w3c")
B3_64 = ("A3CE929D0E0E4736", "00f067aa0ba902b7", "b3")  # 64-bit, upper case
JAEGER_SHORT = ("abc", "1f", "jaeger")  # leading zeros dropped, as uber-trace-id allows
SW8 = ("a2a5f5c1d3e94b3c8f3b.119.16358023495200001", "1", "sw8")  # no hex: not OTLP
NO_PARENT = ("4bf92f3577b34da6a3ce929d0e0e4736", None, "w3c")


def test_the_messages_own_trace_context(tmp_path: Path) -> None:
    """A row with a trace context puts its spans in that trace, under the message's span;
    64-bit and shortened ids are padded; a trace id that is not hex (SkyWalking's) leaves
    the derived trace, the original kept as attributes."""
    cap, _ = _scene(tmp_path)
    rows = _rows(_table(cap))
    table = _with_trace(rows, W3C, B3_64, JAEGER_SHORT, SW8, NO_PARENT)
    requests = list(journey_spans(table))
    out = tmp_path / "spans.otlp.jsonl"
    write_table(table, "otlp", str(out))
    found = spans(parse(out.read_bytes()))
    by_row = check(_rows(table), found)
    heads = [by_row[i][0] for i in range(5)]
    assert heads[0].trace_id.hex() == W3C[0]
    assert heads[0].parent_span_id.hex() == W3C[1]
    assert heads[1].trace_id.hex() == "0000000000000000a3ce929d0e0e4736"
    assert heads[2].trace_id.hex() == "abc".rjust(32, "0")
    assert heads[2].parent_span_id.hex() == "000000000000001f"
    assert heads[3].parent_span_id == b""
    assert attributes(heads[3])["pulsar.trace_id"] == SW8[0]
    assert attributes(heads[3])["pulsar.trace_format"] == "sw8"
    assert heads[4].trace_id.hex() == NO_PARENT[0] and heads[4].parent_span_id == b""
    # the stage spans stay in the message's trace, children of the journey span
    for i in range(5):
        for span in by_row[i][1:]:
            assert span.trace_id == heads[i].trace_id
    assert sum(len(r["resourceSpans"][0]["scopeSpans"][0]["spans"]) for r in requests) == len(found)


def test_same_capture_same_bytes(tmp_path: Path) -> None:
    """Derived trace and span ids depend on the rows only: two runs, the same file."""
    cap, _ = _scene(tmp_path)
    files = []
    for name in ("one.otlp.jsonl", "two.otlp.jsonl"):  # the name's ending gives the format
        done = cli("read", str(cap), "--table", "journeys", "-o", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        files.append((tmp_path / name).read_bytes())
    assert files[0] == files[1] and files[0].count(b"\n") >= 1


@pytest.mark.parametrize(
    "args",
    [
        ["--table", "frames", "--format", "otlp", "-o", "OUT"],
        ["--table", "frames", "-o", "OUT.otlp.jsonl"],
        ["--table", "journeys", "--table", "frames", "--format", "otlp", "-o", "DIR/"],
        ["--format", "otlp", "-o", "DIR/"],
        ["--table", "journeys", "--format", "otlp", "--columns", "topic", "-o", "OUT"],
    ],
)
def test_otlp_of_another_table_is_refused(tmp_path: Path, args: list[str]) -> None:
    cap, _ = _scene(tmp_path)
    args = [a.replace("OUT", str(tmp_path / "x")).replace("DIR", str(tmp_path / "d")) for a in args]
    done = cli("read", str(cap), *args)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "otlp" in lines[0], lines
    assert "journeys" in lines[0] or "--columns" in lines[0]
    assert sorted(os.listdir(tmp_path)) == ["c.pcap"]  # nothing written, no folder made


def test_nothing_half_written_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while spans are made leaves no file (the tables' hidden-name writer)."""
    from dissector.frontends.cli import main
    from dissector.tables import otlp

    cap, _ = _scene(tmp_path)

    def broken(*_: object) -> list[dict[str, Any]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(otlp, "row_spans", broken)
    out = tmp_path / "spans.otlp.jsonl"
    with pytest.raises(RuntimeError):
        main(["read", str(cap), "--table", "journeys", "-j", "1", "-o", str(out)])
    assert not out.exists() and not glob.glob(str(tmp_path / ".spans*"))


def test_an_empty_journeys_table_is_an_empty_file(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(1, flow(5))
    cap = s.write(tmp_path / "c.pcap")
    out = tmp_path / "spans.otlp.jsonl"
    done = cli("read", str(cap), "--table", "journeys", "--format", "otlp", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == b""


def test_stage_spans_need_both_ends(tmp_path: Path) -> None:
    """A capture of the consumer's side only: no persist or dispatch span, a consume one."""
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(1, _message(2, 0)).at(1.5, ack(2))
    cap = s.write(tmp_path / "c.pcap")
    rows = _rows(_table(cap))
    found = spans(parse(b"".join(_lines(_table(cap)))))
    by_row = check(rows, found)
    assert [s.name.split()[0] for s in by_row[0]] == ["journey", "consume"]
    assert attributes(by_row[0][1])["messaging.destination.subscription.name"] == SUB


def _lines(table: pa.Table) -> list[bytes]:
    import orjson

    return [orjson.dumps(r) + b"\n" for r in journey_spans(table)]


@pytest.mark.parametrize(
    ("text", "width", "expected"),
    [
        ("4bf92f3577b34da6a3ce929d0e0e4736", 32, "4bf92f3577b34da6a3ce929d0e0e4736"),  # W3C
        ("A3CE929D0E0E4736", 32, "0000000000000000a3ce929d0e0e4736"),  # B3 64-bit, any case
        ("abc", 32, "00000000000000000000000000000abc"),  # Jaeger: leading zeros dropped
        (" 1f ", 16, "000000000000001f"),
        ("0" * 32, 32, None),  # all zeros: W3C's invalid id
        ("0", 16, None),
        ("1" * 33, 32, None),  # too long
        ("a2a5f5c1d3e94b3c8f3b.119.16358023495200001", 32, None),  # SkyWalking's: not hex
        ("", 16, None),
        (None, 16, None),
    ],
)
def test_ids_as_otlp_writes_them(text: str | None, width: int, expected: str | None) -> None:
    from dissector.tables.otlp import hex_id

    assert hex_id(text, width) == expected


def test_the_python_entry_gives_the_files_lines(tmp_path: Path) -> None:
    """dissector.journey_spans (dicts) and the written file (bytes) are the same requests."""
    import importlib.metadata

    import orjson

    import dissector

    cap, _ = _scene(tmp_path)
    table = _table(cap)
    table = pa.concat_tables([table, table])  # two batches: two lines
    out = tmp_path / "spans.otlp.jsonl"
    write_table(table, "otlp", str(out))
    version = importlib.metadata.version("pulsar-dissector")
    requests = list(dissector.journey_spans(table, version))
    assert len(requests) == len(table.to_batches()) == 2
    assert out.read_bytes() == b"".join(orjson.dumps(r) + b"\n" for r in requests)


@pytest.mark.parametrize("to", ["-o", "stdout"])
def test_a_full_device_is_one_line(to: str) -> None:
    """Spans written to /dev/full (every write fails: a full disk): exit 2, one line, the
    device still a device, as for the other formats."""
    import stat
    import subprocess
    import sys

    from tests.support.samples import PCAPS

    args = ["read", str(PCAPS / "produce_consume.pcap"), "--table", "journeys"]
    args += ["--format", "otlp"] + (["-o", "/dev/full"] if to == "-o" else [])
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "dissector.frontends.cli", *args],
            stdout=full, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "no space left on device" in lines[0], done.stderr


def test_spans_of_the_bundled_samples(tmp_path: Path) -> None:
    """The sample captures' journeys (recorded from real clients): every span its row's."""
    from tests.support.samples import PCAPS

    total, partitions, batched = 0, set(), False
    for cap in sorted(PCAPS.glob("*.pcap*")):
        table = _table(cap)
        out = tmp_path / f"{cap.name}.otlp.jsonl"
        write_table(table, "otlp", str(out))
        found = spans(parse(out.read_bytes()))
        rows = _rows(table)
        check(rows, found)
        total += len(found)
        partitions |= {r["partition"] for r in rows}
        batched |= any(r["batch_index"] is not None for r in rows)
    assert total > 0 and batched and max(partitions) >= 0  # batches and partitions seen
