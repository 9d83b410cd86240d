"""Parsing again after an eviction is bounded by the bytes read (issue 42 item 5): small
messages going round more wide schemas than stay parsed would parse a schema per message.

The bound is checked on the bytes this test writes (definitions and payloads), against the
decoder's count of parses: work, never time.
"""

from __future__ import annotations

import json
from typing import Any

from dissector.values import KeyFields, Values, make_schema
from dissector.values import decode as decode_module
from dissector.values.schemas import SEND
from tests.support.schema_facts import feed
from tests.support.schema_wire import command, version

P = 1  # the producers' connection
SCHEMAS = 5
FIELDS = 1000


def schema(k: int) -> bytes:
    """A record of one field, null or a record of FIELDS fields: a 1-byte payload is null."""
    inner = {
        "type": "record",
        "name": f"Inner{k}",
        "fields": [{"name": f"f{i}", "type": "string"} for i in range(FIELDS)],
    }
    record = {"type": "record", "name": f"T{k}", "fields": [{"name": "a", "type": ["null", inner]}]}
    return json.dumps(record).encode()


def test_going_round_wide_schemas_parses_within_the_budget(monkeypatch: Any) -> None:
    definitions = [schema(k) for k in range(SCHEMAS)]
    size = len(definitions[0])
    # two stay parsed (of five): each message's schema was evicted since its last use
    monkeypatch.setattr(
        decode_module,
        "MAX_PARSED_BYTES",
        2 * decode_module.parsed_cost(make_schema("AVRO", definitions[0])),
    )
    monkeypatch.setattr(decode_module, "PARSE_BYTES_FREE", 0, raising=False)
    values = Values()
    for k, definition in enumerate(definitions):
        topic = f"persistent://public/default/t{k}"
        for cmd in (
            command("PRODUCER", ("AVRO", definition, {}), topic=topic, producer_id=k, request_id=k),
            command(
                "PRODUCER_SUCCESS", request_id=k, producer_name=f"p{k}", schema_version=version(0)
            ),
        ):
            feed(values, P, cmd)
    n = 3000
    cells = [
        values.cells(
            conn=P,
            ctype=SEND,
            handle_id=seq % SCHEMAS,
            topic=None,
            schema_version=version(0),
            payload=b"\x00",
            key=KeyFields(),
        )
        for seq in range(n)
    ]
    read = sum(len(d) for d in definitions) + n  # every byte the stage was given
    parsed = values.decoder.parses * size
    assert parsed <= 4 * read + size, (parsed, read)  # docs/values.md: 4 x the bytes read
    decoded = [c for c in cells if c.value == '{"a":null}']
    refused = [c for c in cells if c.value is None]
    assert len(decoded) + len(refused) == n
    assert len(decoded) >= 2 * n // SCHEMAS  # the ones still parsed keep decoding
    assert refused and all(
        c.value_schema == "AVRO v0" and "PARSE_BYTES_PER_INPUT_BYTE (4)" in (c.value_error or "")
        for c in refused
    )
