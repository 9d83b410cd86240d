"""--redact-fields: named fields masked as auth data is (`<redacted>(N bytes)`), arrays walked
through, the input untouched, nothing else changed."""

from __future__ import annotations

import json

import pytest

from dissector.errors import UsageError
from dissector.values import parse_redact_fields, redact, redact_json


def test_paths_parse() -> None:
    assert parse_redact_fields("a.b, c,,") == (("a", "b"), ("c",))
    with pytest.raises(UsageError):
        parse_redact_fields("a..b")


def test_fields_are_masked_with_their_json_length() -> None:
    value = {
        "card": {"number": "4111111111111111", "brand": "visa"},
        "items": [{"sku": "a", "price": 10}, {"sku": "b", "price": 250}, "not-a-record"],
        "note": None,
    }
    original = json.loads(json.dumps(value))
    out = redact(value, parse_redact_fields("card.number,items.price,absent.x,note"))
    assert out == {
        "card": {"number": "<redacted>(18 bytes)", "brand": "visa"},  # "4111..." with quotes
        "items": [
            {"sku": "a", "price": "<redacted>(2 bytes)"},
            {"sku": "b", "price": "<redacted>(3 bytes)"},
            "not-a-record",
        ],
        "note": "<redacted>(4 bytes)",  # null
    }
    assert value == original  # pure


def test_key_value_paths_start_at_key_or_value() -> None:
    text = '{"key":"k1","value":{"ssn":"123"}}'
    assert redact_json(text, parse_redact_fields("value.ssn")) == (
        '{"key":"k1","value":{"ssn":"<redacted>(5 bytes)"}}'
    )
    assert redact_json(text, parse_redact_fields("nothing")) is text
    assert redact_json(text, ()) is text


def test_a_whole_record_can_be_masked() -> None:
    assert redact({"a": {"b": [1, 2]}}, [("a",)]) == {"a": "<redacted>(11 bytes)"}
