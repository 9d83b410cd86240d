"""The value cells of message rows: value, value_schema, value_error; redaction applied;
the topic serves when the producer or consumer was created before the capture."""

from __future__ import annotations

import json
import struct
from typing import Any

from dissector.pulsar.wire import COMMAND_TYPES
from dissector.values import KeyFields, ValueCells, Values, parse_redact_fields
from tests.support.schema_facts import feed
from tests.support.schema_wire import command, kv_halves, kv_properties, version

SEND = COMMAND_TYPES["SEND"]
MESSAGE = COMMAND_TYPES["MESSAGE"]
TOPIC = "persistent://public/default/t"
A, B = 1, 2  # two connections


def fed(*commands: tuple[int, object]) -> Values:
    values = Values(redact_fields=parse_redact_fields("card"))
    for conn, cmd in commands:
        feed(values, conn, cmd)
    return values


def json_producer() -> Values:
    return fed(
        (A, command("PRODUCER", ("JSON", b"{}", {}), topic=TOPIC, producer_id=1, request_id=1)),
        (
            A,
            command("PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=version(3)),
        ),
    )


def message(values: Values, conn: int, ctype: int, handle: int, payload: bytes) -> ValueCells:
    """The cells of a message of schema version 3 on TOPIC."""
    return values.cells(
        conn=conn,
        ctype=ctype,
        handle_id=handle,
        topic=TOPIC,
        schema_version=version(3),
        payload=payload,
        key=KeyFields(),
    )


def test_a_decoded_value_with_its_schema_and_redaction() -> None:
    cells = message(json_producer(), A, SEND, 1, b'{"id": 1, "card": "4111"}')
    assert cells == ValueCells('{"id":1,"card":"<redacted>(6 bytes)"}', "JSON v3", None)


def test_a_consumer_created_before_the_capture_decodes_by_its_topic() -> None:
    cells = message(json_producer(), B, MESSAGE, 9, b"[1]")
    assert cells == ValueCells("[1]", "JSON v3", None)


def test_no_schema_says_why_in_value_error() -> None:
    cells = message(Values(), B, MESSAGE, 9, b"[1]")
    assert cells == ValueCells(None, None, "no schema: version 3 not seen for the topic")


def test_an_undecoded_payload_and_a_bad_one_are_errors() -> None:
    values = json_producer()
    common: dict[str, Any] = dict(
        conn=A, ctype=SEND, handle_id=1, topic=TOPIC, schema_version=version(3)
    )
    cells = values.cells(**common, payload=None, key=KeyFields(), undecoded="payload.encrypted")
    assert cells == ValueCells(None, "JSON v3", "payload not decoded: payload.encrypted")
    bad = values.cells(**common, payload=b"{", key=KeyFields())
    assert bad.value is None and bad.value_schema == "JSON v3"
    assert (bad.value_error or "").startswith("JSON payload is not JSON")


def test_separated_key_value_with_a_null_value_keeps_its_key() -> None:
    props = kv_properties("STRING", "INT32", "SEPARATED")
    values = fed(
        (
            A,
            command(
                "PRODUCER",
                ("KEY_VALUE", kv_halves(b"", b""), props),
                topic=TOPIC,
                producer_id=1,
                request_id=1,
            ),
        ),
    )
    common: dict[str, Any] = dict(conn=A, ctype=SEND, handle_id=1, topic=TOPIC, schema_version=None)
    cells = values.cells(**common, payload=b"", key=KeyFields(partition_key="k"), null_value=True)
    assert cells == ValueCells('{"key":"k","value":null}', "KEY_VALUE (declared)", None)
    cells = values.cells(**common, payload=struct.pack(">i", 5), key=KeyFields(partition_key="k"))
    assert json.loads(cells.value or "") == {"key": "k", "value": 5}
