"""A topic without a schema is BYTES: its payloads are values, as a declared BYTES schema's.

Expected values are computed here from the payload bytes (base64 by the standard library),
never read from our output. The Apache broker and Java client show the same on the wire
(tests/test_apache_values.py).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from dissector.events import AppMessage, MessageKind
from dissector.frontends.text import FrameLines
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.tables.filters import Filter
from dissector.values import KeyFields, Values, parse_redact_fields
from dissector.values.cells import ValueCells, bytes_text
from tests.support.schema_facts import feed
from tests.support.schema_wire import command

SEND = COMMAND_TYPES["SEND"]
MESSAGE = COMMAND_TYPES["MESSAGE"]
TOPIC = "persistent://public/default/plain"
TEXT = "plain text é".encode()
NOT_UTF8 = b"\x00\xff\xfe text"
P, C = 1, 2  # the producer's and the consumer's connections


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _values(*, declared: bool = False, redact: str = "") -> Values:
    values = Values(redact_fields=parse_redact_fields(redact) if redact else ())
    schema: tuple[str, bytes, dict[str, str]] | None = ("BYTES", b"", {}) if declared else None
    producer = command("PRODUCER", schema, topic=TOPIC, producer_id=1, request_id=1)
    feed(values, P, producer)
    subscribe = command("SUBSCRIBE", topic=TOPIC, subscription="s", consumer_id=2, request_id=2)
    feed(values, C, subscribe)
    return values


def _cells(values: Values, conn: int, ctype: int, handle: int, payload: bytes) -> ValueCells:
    return values.cells(
        conn=conn,
        ctype=ctype,
        handle_id=handle,
        topic=TOPIC,
        schema_version=None,
        payload=payload,
        key=KeyFields(),
    )


def test_a_producer_and_consumer_without_schema_give_bytes_values() -> None:
    values = _values()
    for payload in (TEXT, NOT_UTF8, b""):
        want = ValueCells(json.dumps(_b64(payload)), "BYTES (not declared)", None)
        assert _cells(values, P, SEND, 1, payload) == want
        assert _cells(values, C, MESSAGE, 2, payload) == want


def test_the_value_is_a_declared_bytes_schemas() -> None:
    declared = _cells(_values(declared=True), P, SEND, 1, NOT_UTF8)
    undeclared = _cells(_values(), P, SEND, 1, NOT_UTF8)
    assert declared.value == undeclared.value == json.dumps(_b64(NOT_UTF8))
    assert (declared.value_schema, undeclared.value_schema) == (
        "BYTES (declared)",
        "BYTES (not declared)",
    )


def test_a_created_before_the_capture_producer_without_version_is_bytes() -> None:
    values = Values()  # no PRODUCER seen, but the row knows its topic (another source)
    cells = values.cells(
        conn=P,
        ctype=SEND,
        handle_id=5,
        topic=TOPIC,
        schema_version=None,
        payload=TEXT,
        key=KeyFields(),
    )
    assert cells == ValueCells(json.dumps(_b64(TEXT)), "BYTES (not declared)", None)


def test_redaction_masks_bytes_whole() -> None:
    """Raw bytes hold no field to mask (they may be JSON text holding the very fields named):
    with --redact-fields the whole BYTES value is masked, declared or not."""
    for declared in (False, True):
        cells = _cells(_values(declared=declared, redact="card"), P, SEND, 1, TEXT)
        shown = json.dumps(_b64(TEXT))
        assert cells.value == json.dumps(f"<redacted>({len(shown)} bytes)"), cells
        assert _b64(TEXT) not in str(cells)


def _line(value: str | None, value_schema: str | None, error: str | None = None) -> str:
    fields: dict[str, Any] = dict.fromkeys(AppMessage._fields)
    fields.update(kind=MessageKind.PRODUCED, batch_index=None, value=value)
    message = AppMessage(**fields)._replace(value_schema=value_schema, value_error=error)
    line = FrameLines(Filter())._value(message)
    assert line is not None
    return line.split(None, 1)[1].rstrip("\n")


def test_the_text_view_shows_utf8_bytes_as_text() -> None:
    value = json.dumps(_b64(TEXT))
    assert _line(value, "BYTES (not declared)") == (
        f'value BYTES (not declared): {value} text "plain text é"'
    )
    assert _line(value, "BYTES v0") == f'value BYTES v0: {value} text "plain text é"'
    other = json.dumps(_b64(NOT_UTF8))
    assert _line(other, "BYTES (not declared)") == f"value BYTES (not declared): {other}"
    # a STRING value that happens to be base64 text is not BYTES
    assert _line(json.dumps("aGk="), "STRING v0") == 'value STRING v0: "aGk="'


def test_bytes_text_is_none_but_for_bytes_that_are_text() -> None:
    assert bytes_text(json.dumps(_b64(b"hi\n")), "BYTES (declared)") == "hi\n"
    assert bytes_text(json.dumps(_b64(NOT_UTF8)), "BYTES (declared)") is None
    assert bytes_text(json.dumps("<redacted>(9 bytes)"), "BYTES (not declared)") is None
    assert bytes_text(json.dumps(_b64(b"")), "BYTES (not declared)") is None
    assert bytes_text(None, "BYTES (declared)") is None
    assert bytes_text(json.dumps(_b64(b"hi")), "BYTESX v1") is None
