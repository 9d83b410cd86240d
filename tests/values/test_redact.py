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


def test_a_name_holding_a_dot_is_backquoted() -> None:
    """Issue 42 item 8: `card.number` the field, apart from `card`'s `number`."""
    assert parse_redact_fields("`card.number`") == (("card.number",),)
    assert parse_redact_fields(" a.`b.c` , `x,y`.z,d ") == (("a", "b.c"), ("x,y", "z"), ("d",))
    assert parse_redact_fields("`a``b`.c") == (("a`b", "c"),)  # a doubled backquote: one
    value = {"card.number": "S5", "card": {"number": "S6"}}
    assert redact(value, parse_redact_fields("`card.number`")) == {
        "card.number": "<redacted>(4 bytes)",
        "card": {"number": "S6"},
    }
    assert redact(value, parse_redact_fields("card.number"))["card.number"] == "S5"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("`card.number", "unclosed backquote"),
        ("a`b`", "backquote inside a name"),
        ("``", "empty field name"),
        ("`a`b", "after a quoted name"),
        ("a.``.b", "empty field name"),
        ("a.", "empty field name"),
    ],
)
def test_malformed_quoting_is_one_usage_error(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as err:
        parse_redact_fields(text)
    assert "\n" not in str(err.value)


#: a JSON payload with an integer past 64 bits, floats, escapes and keys out of order, and
#: the value the decoder writes of it (compact, UTF-8 unescaped, numbers whole); redacting
#: `card` may change nothing else (issue 42 item 9)
PAYLOAD = (
    '{"z":1, "card":"4111","id":123456789012345678901234567890,"f":1e16,"g":0.1,'
    '"t":"\\u00e9t\\u00e9 \\"q\\"","n":-98765432109876543210}'
)
WRITTEN = (
    '{"z":1,"card":"4111","id":123456789012345678901234567890,"f":1e+16,"g":0.1,'
    '"t":"\u00e9t\u00e9 \\"q\\"","n":-98765432109876543210}'
)
MASKED = WRITTEN.replace('"4111"', '"<redacted>(6 bytes)"')


def test_redaction_changes_nothing_else_of_the_json() -> None:
    from dissector.values.decode import ValueDecoder
    from dissector.values.model import SchemaInfo

    schema = SchemaInfo(type="JSON", definition=b"{}")
    decoder = ValueDecoder()
    assert decoder.decode(PAYLOAD.encode(), schema).value == WRITTEN
    # in the decoder, before the value is written
    assert decoder.decode(PAYLOAD.encode(), schema, redact_fields=[("card",)]).value == MASKED
    # over the value column's text
    assert redact_json(WRITTEN, parse_redact_fields("card")) == MASKED
    assert json.loads(MASKED) == {**json.loads(PAYLOAD), "card": "<redacted>(6 bytes)"}
