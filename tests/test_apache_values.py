"""Values through the official Java client's schemas, on Apache Pulsar's own broker.

The Java client's own record (tests/support/apache/ValuesClient.java) is the truth: per
schema (one topic each) every value it sent, with the message id the broker gave back, and
every value each subscription received, with the schema version Message.getSchemaVersion()
gave. Our values table (read_capture(..., values=True)) must hold each of those values, by
the schema of the message's own version. The record's neutral forms (times as numbers,
floats as Java's text, bytes as hex) are turned into ours here by rules of docs/values.md,
and ours back into numbers where text forms differ (a time's trailing zeros); nothing
expected is read from our output.

What the Java client and broker show that pulsar-lite did not: versions (PRODUCER_SUCCESS
gives 0, 1, ...; pulsar-lite gave none), GET_SCHEMA answered on the consumers' connection,
Schema.BYTES sent as no schema at all (`BYTES (not declared)`), and Pulsar's JSON writer
leaving null fields out (a JSON value has no `"name": null`; its reader gives null).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import struct
import uuid
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import pytest

import dissector
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.values import run_values
from tests.support.capture import Tcpdump, wait_closed
from tests.support.cli import cli

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

Run = tuple[Path, dict[str, Any], dissector.Capture]

#: values.proto's numbers: Schema.PROTOBUF's definition has none, so nested fields and
#: enums are shown by number (docs/values.md)
LINE_FIELDS = {"sku": 1, "qty": 2}
KIND_NUMBERS = {"KIND_UNSPECIFIED": 0, "RETAIL": 1, "WHOLESALE": 2}
PROTO3_DEFAULTS: tuple[Any, ...] = ("0", 0, 0.0, False, "", [], "KIND_UNSPECIFIED")
NANOS_PER_DAY = 86_400 * 10**9
MOMENT = re.compile(r"^(?:(-?\d{4,}-\d\d-\d\d))?T?(?:(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?Z?$")
TIMES = {"DATE", "TIME", "TIMESTAMP", "INSTANT", "LOCAL_DATE", "LOCAL_TIME", "LOCAL_DATE_TIME"}


@pytest.fixture(scope="module")
def run(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """(capture, the Java client's record, our tables of the capture with values)."""
    cap = tmp_path_factory.mktemp("apache-values") / "values.pcap"
    port = apache_broker.port
    with Tcpdump(cap, f"tcp port {port}"):  # returns once tcpdump is listening
        record = run_values(
            apache_broker.url, f"persistent://public/default/v-{uuid.uuid4().hex[:8]}"
        )
        assert wait_closed(cap, (port,), timeout=120.0), "a connection did not end"
    return cap, record, dissector.read_capture(cap, ports=[port], values=True)


def _rows(frame: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return rows


def _mid(entry: dict[str, Any]) -> tuple[int, int]:
    return entry["message_id"]["ledger_id"], entry["message_id"]["entry_id"]


def _moment(text: str) -> tuple[int | None, int | None]:
    """Our ISO 8601 text of a time -> (epoch day, nano of day), either None when absent."""
    found = MOMENT.match(text)
    assert found, text
    day_text, h, m, s, frac = found.groups()
    day = (date.fromisoformat(day_text) - date(1970, 1, 1)).days if day_text else None
    if h is None:
        return day, None
    nanos = ((int(h) * 60 + int(m)) * 60 + int(s)) * 10**9 + int((frac or "").ljust(9, "0"))
    return day, nanos


def _java_moment(case: str, v: Any) -> tuple[int | None, int | None]:
    """The record's number(s) of a Java time -> (epoch day, nano of day)."""
    if case in ("DATE", "TIMESTAMP"):
        day, ms = divmod(v, 86_400_000)
        return day, ms * 10**6
    if case == "TIME":  # java.sql.Time is a moment: its UTC time of day
        return None, v % 86_400_000 * 10**6
    if case == "INSTANT":
        day, seconds = divmod(v[0], 86_400)
        return day, seconds * 10**9 + v[1]
    if case == "LOCAL_DATE":
        return v, None
    if case == "LOCAL_TIME":
        return None, v
    return v[0], v[1]  # LOCAL_DATE_TIME


def _float_bits(case: str, v: Any) -> bytes:
    """A FLOAT's or DOUBLE's bits, from Java's text or our JSON number or "NaN" string."""
    return struct.pack(">f" if case == "FLOAT" else ">d", float(v))


def _protobuf_wire(v: dict[str, Any]) -> dict[str, Any]:
    """Protobuf's JSON mapping -> Schema.PROTOBUF's value: the fields on the wire only
    (proto3 leaves defaults out), 64-bit integers as numbers, enums and the nested Line
    by number (values.proto)."""
    out: dict[str, Any] = {}
    for name, x in v.items():
        if any(x == d and type(x) is type(d) for d in PROTO3_DEFAULTS):
            continue
        if name == "id":
            x = int(x)
        elif name == "kind":
            x = KIND_NUMBERS[x]
        elif name == "line":
            x = {f"#{LINE_FIELDS[k]}": y for k, y in x.items()}
        out[name] = x
    return out


def _no_nulls(v: Any) -> Any:
    return {k: x for k, x in v.items() if x is not None} if isinstance(v, dict) else v


def _same(case: str, ours: Any, java: Any) -> bool:
    """Whether our decoded value is the Java client's (its record's neutral form)."""
    if case in ("NONE", "BYTES"):
        return bool(ours == base64.b64encode(bytes.fromhex(java)).decode("ascii"))
    if case in ("FLOAT", "DOUBLE"):
        return _float_bits(case, ours) == _float_bits(case, java)
    if case in TIMES:
        return _moment(ours) == _java_moment(case, java)
    if case == "PROTOBUF":
        return bool(ours == _protobuf_wire(java))
    if case == "JSON":  # Pulsar's JSON writer leaves null fields out
        return bool(_no_nulls(ours) == _no_nulls(java))
    return bool(ours == java)


def _topic_rows(capture: dissector.Capture, topic: str, kind: str) -> list[dict[str, Any]]:
    m = capture.messages
    return _rows(m[(m.topic == topic) & (m.kind == kind)])


def _cases(run: Run) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = run[1]["cases"]
    return cases


def test_the_record_is_whole(run: Run) -> None:
    cases = {c["case"]: c for c in _cases(run)}
    assert set(cases) >= TIMES | {"NONE", "BYTES", "STRING", "INT8", "INT64", "FLOAT"}
    assert {"KV_INLINE", "KV_SEPARATED", "AVRO", "JSON", "PROTOBUF", "PROTOBUF_NATIVE"} <= set(
        cases
    )
    for case in cases.values():
        subs = Counter(e["subscription"] for e in case["received"])
        assert set(subs.values()) == {len(case["sent"])}, case["case"]


def test_every_value_sent_is_the_clients(run: Run) -> None:
    _, _, capture = run
    for case in _cases(run):
        rows = _topic_rows(capture, case["topic"], "produced")
        sent = {(e["producer"], e["sequence_id"]): e["value"] for e in case["sent"]}
        assert Counter((r["producer_name"], r["sequence_id"]) for r in rows) == Counter(list(sent))
        for row in rows:
            assert row["value_error"] is None, (case["case"], row)
            ours = json.loads(row["value"])
            java = sent[(row["producer_name"], row["sequence_id"])]
            assert _same(case["case"], ours, java), (case["case"], ours, java)


def test_every_value_received_is_the_clients(run: Run) -> None:
    """Each delivered message decodes by its own version to what was sent with its id, and
    to what each subscription reading the writer's schema received; the version 2 reader's
    extra field is the one the older messages lack."""
    _, _, capture = run
    for case in _cases(run):
        name = case["case"]
        rows = _topic_rows(capture, case["topic"], "delivered")
        by_id = {_mid(e): e["value"] for e in case["sent"]}
        assert Counter((r["ledger_id"], r["entry_id"]) for r in rows) == Counter(
            _mid(e) for e in case["received"]
        )
        ours: dict[tuple[int, int], Any] = {}
        for row in rows:
            assert row["value_error"] is None, (name, row)
            mid = (row["ledger_id"], row["entry_id"])
            ours[mid] = json.loads(row["value"])
            assert _same(name, ours[mid], by_id[mid]), (name, ours[mid], by_id[mid])
        for entry in case["received"]:
            got = ours[_mid(entry)]
            if entry["subscription"] != "reader-v2":
                assert _same(name, got, entry["value"]), (name, got, entry)
            else:  # the reader's own fields: the writer's, and qty at its default where absent
                extra = {k: v for k, v in entry["value"].items() if k not in got}
                if name == "AVRO":
                    assert extra in ({}, {"qty": 7}), (name, got, entry)
                else:  # Pulsar's JSON reader gives no default: an absent field is null
                    assert set(extra.values()) <= {None}, (name, got, entry)


def test_values_decode_by_their_own_version(run: Run) -> None:
    """The schema version of each delivered message is the one the client saw; its value is
    labelled by it; without a schema (plain bytes, and Schema.BYTES, which the Java client
    leaves out of its PRODUCER) there is no version and the value is BYTES (not declared)."""
    _, _, capture = run
    for case in _cases(run):
        name = case["case"]
        rows = {
            (r["ledger_id"], r["entry_id"]): r
            for r in _topic_rows(capture, case["topic"], "delivered")
        }
        for entry in case["received"]:
            row = rows[_mid(entry)]
            seen = entry["schema_version_hex"]
            ours = row["schema_version"]
            if seen is None:
                assert not ours and row["value_schema"] == "BYTES (not declared)", (name, row)
                continue
            assert bytes(ours) == bytes.fromhex(seen), (name, row)
            schema = "KEY_VALUE" if name.startswith("KV_") else name
            assert row["value_schema"] == f"{schema} v{int(seen, 16)}", (name, row)
        versions = {e["schema_version_hex"] for e in case["received"]}
        assert len(versions) == (2 if name in ("AVRO", "JSON") else 1), (name, versions)


def test_the_consumers_connection_asks_the_broker_for_schemas(run: Run) -> None:
    """The consumers' connection (its own client) learns the versions by GET_SCHEMA, each
    answered with a schema (pulsar-lite never answered it)."""
    _, _, capture = run
    frames = capture.frames
    consumers = set(frames[frames.command == "SUBSCRIBE"].conn_id)
    producers = set(frames[frames.command == "PRODUCER"].conn_id)
    assert len(consumers) == 1 and consumers.isdisjoint(producers)
    asked = frames[frames.conn_id.isin(consumers)].command.value_counts()
    assert asked.get("GET_SCHEMA", 0) >= 2, asked
    assert asked.get("GET_SCHEMA_RESPONSE", 0) == asked["GET_SCHEMA"], asked
    timeline = capture.timeline
    answers = timeline[timeline.request_command == "GET_SCHEMA"]
    assert len(answers) == asked["GET_SCHEMA"]
    assert set(answers.response_command) == {"GET_SCHEMA_RESPONSE"}


def test_the_text_view_shows_bytes_without_schema_and_their_text(run: Run) -> None:
    cap, record, capture = run
    port = str(capture.conversations.broker_port.iloc[0])
    done = cli("read", str(cap), "--port", port, "--values")
    assert done.returncode == 0, done.stderr
    # plain bytes, and Schema.BYTES (which the Java client sends as no schema): the same values
    sent = Counter(
        e["value"] for c in record["cases"] if c["case"] in ("NONE", "BYTES") for e in c["sent"]
    )
    shown = Counter(x.split(None, 1)[1] for x in done.stdout.splitlines() if x.split()[:1] == ["="])
    for value_hex, times in sent.items():
        raw = bytes.fromhex(value_hex)
        line = f"value BYTES (not declared): {json.dumps(base64.b64encode(raw).decode('ascii'))}"
        with contextlib.suppress(UnicodeDecodeError):
            line += f" text {json.dumps(raw.decode('utf-8'), ensure_ascii=False)}" if raw else ""
        assert shown[line] == 2 * times, (line, shown)  # under its SENDs and its MESSAGEs
