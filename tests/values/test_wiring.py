"""--values end to end on a crafted capture (tests/support/value_capture.py): the value
columns of messages and journeys, -Y and sql on them, the text view's value lines,
--redact-fields in every format, and no payload anywhere without --values.

Expected values are the data the capture's payloads were encoded from, compared as data.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dissector.events import AppMessage, MessageKind
from dissector.frontends.cli import main
from dissector.frontends.text import MAX_VALUE_TEXT, FrameLines
from dissector.read import read_capture
from dissector.tables.filters import Filter
from dissector.tables.schema import TABLES
from tests.support.value_capture import (
    CARD,
    CUSTOMER,
    KV,
    KV_TOPIC,
    ORDERS,
    ORDERS_TOPIC,
    PRICE,
    PRICES_TOPIC,
    write_value_capture,
)

VALUE_COLUMNS = ["value", "value_schema", "value_error"]
#: what each topic's messages hold, in batch order
EXPECTED: dict[str, list[Any]] = {ORDERS_TOPIC: ORDERS, KV_TOPIC: [KV], PRICES_TOPIC: [PRICE]}
SCHEMAS = {ORDERS_TOPIC: "JSON v3", KV_TOPIC: "KEY_VALUE v0", PRICES_TOPIC: "INT64 v1"}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_value_capture(tmp_path_factory.mktemp("values") / "values.pcap")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    got = capsys.readouterr()
    assert got.err == "", got.err
    return got.out


def _rows(cap: Any, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = cap.arrow[table].to_pylist()
    return rows


def test_messages_and_journeys_hold_the_values_sent(capture: Path) -> None:
    cap = read_capture(capture, values=True)
    messages = _rows(cap, "messages")
    got: dict[tuple[str, str], list[Any]] = {}
    for m in messages:
        assert m["value_error"] is None, m
        assert m["value_schema"] == SCHEMAS[m["topic"]]
        got.setdefault((m["kind"], m["topic"]), []).append(json.loads(m["value"]))
    produced = {t: v for (k, t), v in got.items() if k == "produced"}
    delivered = {t: v for (k, t), v in got.items() if k == "delivered"}
    assert produced == EXPECTED
    # the consumer's connection declared no schema: the producer's taught the versions
    assert delivered == {ORDERS_TOPIC: ORDERS, KV_TOPIC: [KV]}
    journeys = _rows(cap, "journeys")
    assert sorted(json.dumps(json.loads(j["value"]), sort_keys=True) for j in journeys) == sorted(
        json.dumps(v, sort_keys=True) for vs in EXPECTED.values() for v in vs
    )
    assert {j["value_schema"] for j in journeys} == set(SCHEMAS.values())
    assert list(cap.arrow["journeys"].schema.names[-3:]) == VALUE_COLUMNS


def test_undecodable_messages_say_why(tmp_path: Path) -> None:
    """An encrypted message, a payload that is not its schema's, a producer never seen
    created: rows with value_error, never a crash."""
    from dissector.anomalies import AnomalyCode
    from dissector.pulsar.wire import MessageMetadata
    from tests.support.crafted import C2B, Session, msg, write_pcap
    from tests.support.schema_wire import WIRE_NUMBERS

    def meta(seq: int, **extra: Any) -> MessageMetadata:
        return MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, **extra)

    s = Session()
    s.handshake()
    json_schema = {"name": "j", "type": WIRE_NUMBERS["JSON"], "schema_data": b"{}"}
    encrypted = meta(0, encryption_keys=[{"key": "k1", "value": b"x"}], encryption_algo="a")
    s.exchange(
        [
            msg(
                C2B, "PRODUCER", topic=ORDERS_TOPIC, producer_id=1, request_id=1, schema=json_schema
            ),
            msg(
                C2B, "SEND", producer_id=1, sequence_id=0, payload=b"\x01secret", metadata=encrypted
            ),
            msg(C2B, "SEND", producer_id=1, sequence_id=1, payload=b"{not json", metadata=meta(1)),
            msg(C2B, "SEND", producer_id=9, sequence_id=0, payload=b"{}", metadata=meta(0)),
        ]
    )
    cap = read_capture(write_pcap(tmp_path / "bad.pcap", s.segs).path, values=True)
    got = [(r["value"], r["value_schema"], r["value_error"]) for r in _rows(cap, "messages")]
    assert got[0] == (
        None,
        "JSON (declared)",
        f"payload not decoded: {AnomalyCode.PAYLOAD_ENCRYPTED}",
    )
    assert got[1][:2] == (None, "JSON (declared)") and got[1][2]
    assert got[2][:2] == (None, None) and "producer was not seen" in got[2][2]


def test_without_values_the_columns_are_null(capture: Path) -> None:
    cap = read_capture(capture)
    for table in ("messages", "journeys"):
        rows = _rows(cap, table)
        assert rows and all(r[c] is None for r in rows for c in VALUE_COLUMNS), table


def test_without_values_nothing_is_decoded(capture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dissector.values.cells as cells

    def fail(*_: Any, **__: Any) -> None:
        raise AssertionError("values made without --values")

    monkeypatch.setattr(cells.Values, "__init__", fail)
    read_capture(capture)  # no Values is ever made
    with pytest.raises(AssertionError):
        read_capture(capture, values=True)


def test_filter_on_values(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def shown(expr: str, table: str = "messages") -> list[Any]:
        out = run(capsys, "read", str(capture), "--values", "--table", table, "-Y", expr,
                  "--format", "jsonl")  # fmt: skip
        return [json.loads(json.loads(line)["value"]) for line in out.splitlines()]

    assert shown("value.amount > 100") == [ORDERS[0], ORDERS[0]]  # produced, delivered
    assert shown("100 > value.amount") == [ORDERS[1], ORDERS[1]]
    assert shown("value.customer == 'small-buyer-QW'") == [ORDERS[1], ORDERS[1]]
    assert shown("value.card.number contains '4929'") == [ORDERS[0], ORDERS[0]]
    assert shown("value.value >= 77 && value.key == 'kv-key-PLMN'") == [KV, KV]
    assert shown("value.amount > 100", "journeys") == [ORDERS[0]]
    # a plain number value has no fields: no row, no error
    assert shown("value.x > 0") == []


def test_values_in_several_processes_are_those_of_one(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The consumer's connection learns its versions from the producer's: a -j read with
    values reads every connection in one process."""
    args = ["read", str(capture), "--values", "--table", "messages", "--format", "jsonl"]
    one = run(capsys, *args, "-j", "1")
    assert run(capsys, *args, "-j", "2") == one
    assert '"value_error":null' in one and "not seen" not in one


def test_sql_on_values(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run(
        capsys,
        "sql",
        "--values",
        str(capture),
        "SELECT kind, json_extract_string(value, '$.amount') AS amount FROM messages "
        f"WHERE json_extract(value, '$.customer') = '\"{CUSTOMER}\"' ORDER BY kind",
    )
    assert [line.split() for line in out.splitlines()[2:4]] == [
        ["delivered", "4242.5"],
        ["produced", "4242.5"],
    ]


def test_text_view_shows_each_value_under_its_frame(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(capsys, "read", str(capture), "--values").splitlines()
    sends = [i for i, line in enumerate(out) if " SEND " in line]
    first = out[sends[0] + 1 : sends[0] + 3]
    assert [line.split(None, 2)[1:] for line in first] == [
        ["value[0]", f"JSON v3: {json.dumps(ORDERS[0], separators=(',', ':'))}"],
        ["value[1]", f"JSON v3: {json.dumps(ORDERS[1], separators=(',', ':'))}"],
    ]
    assert out[sends[2] + 1].split(None, 1)[1] == f"value INT64 v1: {PRICE}"
    assert all(line.lstrip().startswith("=") for line in first)
    # -Y keeps a frame's value lines with it
    only = run(capsys, "read", str(capture), "--values", "-Y", "command == 'MESSAGE'")
    assert all(line.split()[0] == "=" or " MESSAGE " in line for line in only.splitlines())
    assert [line.split()[1] for line in only.splitlines()[1:3]] == ["value[0]", "value[1]"]
    assert sum(line.split()[0] == "=" for line in only.splitlines()) == 3  # 2 orders, 1 kv
    plain = run(capsys, "read", str(capture)).splitlines()
    assert len(plain) == len(out) - 7 and not any(line.split()[0] == "=" for line in plain)


def test_text_view_filter_on_values(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-Y naming the value: a frame shows (with its value lines) when one of its messages
    matches."""
    out = run(capsys, "read", str(capture), "--values", "-Y", "value.amount > 100")
    frames = [line for line in out.splitlines() if line.split()[0] != "="]
    assert [line.split()[6] for line in frames] == ["SEND", "MESSAGE"]  # the orders' batch
    assert sum(line.split()[0] == "=" for line in out.splitlines()) == 4
    out = run(capsys, "read", str(capture), "--values", "-Y", "value.value == 77")
    assert [line.split()[6] for line in out.splitlines() if line.split()[0] != "="] == [
        "SEND",
        "MESSAGE",
    ]


def _message(**fields: Any) -> AppMessage:
    blank = dict.fromkeys(AppMessage._fields)
    blank.update(kind=MessageKind.PRODUCED, batch_index=None)
    return AppMessage(**{**blank, **fields})


def test_text_value_line_is_capped() -> None:
    long = json.dumps({"note": "x" * 1000})
    line = FrameLines(Filter())._value(_message(value=long, value_schema="JSON v1"))
    assert line is not None and line.endswith(f"...({len(long)} chars)\n")
    assert len(line) < MAX_VALUE_TEXT + 60
    err = FrameLines(Filter())._value(_message(value_error="no schema: x"))
    assert err is not None and err.split(None, 1)[1] == "value: none (no schema: x)\n"
    assert FrameLines(Filter())._value(_message()) is None  # without --values


# --------------------------------------------------------------------------- every format

#: a payload's distinctive contents, and their other spellings
LEAKS = [CUSTOMER, CARD, KV["key"], str(PRICE)]


def _forms(text: str) -> list[str]:
    raw = text.encode()
    return [text, raw.hex(), base64.b64encode(raw).decode()]


def outputs(capture: Path, tmp: Path, capsys: pytest.CaptureFixture[str], *opts: str) -> str:
    """Every output of every command and format, read as text (Parquet through pyarrow)."""
    texts: list[str] = []
    path = str(capture)
    texts.append(run(capsys, "read", path, *opts))
    texts.append(run(capsys, "read", path, "-V", *opts))
    texts.append(run(capsys, "summary", path, *opts))
    texts.append(run(capsys, "diagnose", path, *opts))
    for name in TABLES:
        for fmt in ("jsonl", "csv", "parquet"):
            out = tmp / f"{name}-{len(opts)}.{fmt}"
            run(capsys, "read", path, "--table", name, "--format", fmt, "-o", str(out), *opts)
            if fmt == "parquet":
                texts.append(repr(pq.read_table(out).to_pylist()))
            else:
                texts.append(out.read_text())
        texts.append(run(capsys, "sql", *opts, path, f"SELECT * FROM {name}"))
    report = tmp / f"report-{len(opts)}.html"
    run(capsys, "report", path, "-o", str(report), *opts)
    texts.append(report.read_text())
    return "\n".join(texts)


def test_no_payload_in_any_output_without_values(
    capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = outputs(capture, tmp_path, capsys)
    for leak in LEAKS:
        assert not any(form in dump for form in _forms(leak)), leak
    # the scan sees them once they are asked for
    valued = outputs(capture, tmp_path, capsys, "--values")
    assert all(leak in valued for leak in LEAKS)


def test_redacted_fields_are_masked_in_every_output(
    capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = outputs(capture, tmp_path, capsys, "--values", "--redact-fields", "customer,card.number")
    for leak in (CUSTOMER, CARD):
        assert not any(form in dump for form in _forms(leak)), leak
    assert f"<redacted>({len(json.dumps(CUSTOMER))} bytes)" in dump
    assert "4242.5" in dump and '"cvv":"912"' in dump.replace('\\"', '"').replace('""', '"')


def test_redact_fields_needs_values(capture: Path) -> None:
    from dissector.errors import UsageError

    with pytest.raises(UsageError, match="redact_fields"):
        read_capture(capture, redact_fields="a")
    with pytest.raises(UsageError, match="empty field name"):
        read_capture(capture, values=True, redact_fields="a..b")
    cap = read_capture(capture, values=True, redact_fields="value", tables=["messages"])
    kv = [r for r in _rows(cap, "messages") if r["topic"] == KV_TOPIC]
    assert {json.loads(r["value"])["value"] for r in kv} == {"<redacted>(2 bytes)"}


def _hex_bytes(text: str) -> list[bytes]:
    """The bytes of each frame a -x dump shows, masked bytes (`**`) left out."""
    frames: list[bytes] = []
    for line in text.splitlines():
        head = line[:4]
        if len(line) > 6 and line[4:6] == "  " and all(c in "0123456789abcdef" for c in head):
            if head == "0000":
                frames.append(b"")
            cells = line[6:56].split()
            frames[-1] += bytes(int(c, 16) for c in cells if c != "**")
    return frames


def test_hex_view_masks_every_payload_when_redacting(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 42 item 8: -x showed the redacted fields in the payload's bytes."""
    clear = _hex_bytes(run(capsys, "read", str(capture), "-x"))
    assert any(CUSTOMER.encode() in f for f in clear)  # the scan sees them unmasked
    out = run(capsys, "read", str(capture), "-x", "--values", "--redact-fields", "customer")
    masked = _hex_bytes(out)
    assert len(masked) == len(clear) and "SEND" in out
    for leak in (CUSTOMER, CARD, KV["key"]):  # every payload byte, not the field alone
        assert not any(leak.encode() in f for f in masked), leak
    # only payloads: the frames' heads (sizes, command) are as before
    assert all(c.startswith(m) for c, m in zip(clear, masked, strict=True))
    assert sum(len(c) - len(m) for c, m in zip(clear, masked, strict=True)) > 0


@pytest.mark.parametrize("command", ["read", "sql", "summary", "diagnose", "report"])
def test_payload_preview_is_refused_when_redacting(
    command: str, capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 42 item 8: the preview is the payload's bytes, the redacted fields in clear."""
    from dissector.errors import UsageError

    argv = [command, str(capture), "--values", "--redact-fields", "customer"]
    argv += ["--payload-preview", "64"]
    if command == "sql":
        argv.append("SELECT payload_preview FROM messages")
    if command == "report":
        argv += ["-o", str(tmp_path / "r.html")]
    assert main(argv) == 2
    got = capsys.readouterr()
    assert got.out == "" and CUSTOMER not in got.err
    assert got.err.count("\n") == 1 and "payload_preview" in got.err
    with pytest.raises(UsageError, match="payload_preview"):
        read_capture(capture, values=True, redact_fields="customer", payload_preview=8)


def test_hex_view_masks_from_the_payload_or_after_the_command() -> None:
    from dissector.events import Direction, Frame
    from dissector.frontends.text import frame_hex

    send = Frame(1, Direction.CLIENT_TO_BROKER, 0, 36, 4, 6, "SEND", None, None, None)
    raw = bytes(range(40))  # 4 + 4 + a 4-byte command, then 28 bytes
    known = send._replace(raw=raw, payload=memoryview(raw[30:]))
    lost = send._replace(raw=raw)  # metadata that did not decode: no payload known

    def masked(frame: Frame) -> int:
        lines = frame_hex(frame, hide_payload=True).splitlines()
        return sum(line[6:56].split().count("**") for line in lines)

    assert masked(known) == 10  # the payload's 10 bytes
    assert masked(lost) == 28  # all after the command
    assert masked(known._replace(command_size=32)) == 0  # all command: nothing after it
    assert "missing" in frame_hex(send, hide_payload=True)


def test_no_payload_hash_when_redacting(capture: Path) -> None:
    """A payload's sha256 confirms a guess of a redacted short secret when the rest of the
    payload is known (the value shows it): with redaction the column is null."""
    plain = _rows(read_capture(capture, values=True), "messages")
    hashed = [m["payload_sha256"] for m in plain if m["payload_size"] is not None]
    assert hashed and all(h is not None and len(h) == 64 for h in hashed)
    redacted = _rows(read_capture(capture, values=True, redact_fields="customer"), "messages")
    assert len(redacted) == len(plain)
    assert [m["payload_sha256"] for m in redacted] == [None] * len(plain)
    dump = json.dumps(redacted, default=str)
    assert not any(h in dump for h in hashed)
