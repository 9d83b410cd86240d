"""Primitive schemas: bytes written as the Java client writes them (pulsar-client
*Schema.java: big-endian ByteBuffer puts), computed here with struct; expected values by hand."""

from __future__ import annotations

import base64
import calendar
import json
import struct

import pytest

from dissector.values import SchemaInfo, ValueDecoder


def decode(type_name: str, data: bytes, **props: str) -> tuple[object, str | None]:
    schema = SchemaInfo(type=type_name, properties=tuple(props.items()))
    out = ValueDecoder().decode(data, schema)
    return (json.loads(out.value) if out.value is not None else None), out.error


EPOCH_2021 = calendar.timegm((2021, 3, 4, 5, 6, 7))  # 2021-03-04T05:06:07Z


@pytest.mark.parametrize(
    ("type_name", "data", "expected"),
    [
        ("BOOLEAN", b"\x01", True),
        ("BOOLEAN", b"\x00", False),
        ("INT8", b"\xff", -1),
        ("INT16", struct.pack(">h", -300), -300),
        ("INT32", struct.pack(">i", 2**31 - 1), 2**31 - 1),
        ("INT64", struct.pack(">q", -(2**63)), -(2**63)),
        ("FLOAT", struct.pack(">f", 1.5), 1.5),
        ("DOUBLE", struct.pack(">d", -2.25), -2.25),
        ("DOUBLE", struct.pack(">d", float("nan")), "NaN"),
        ("FLOAT", struct.pack(">f", float("-inf")), "-Infinity"),
        ("BYTES", b"\x00\xffab", base64.b64encode(b"\x00\xffab").decode()),
        ("STRING", "héllo €".encode(), "héllo €"),
        ("DATE", struct.pack(">q", EPOCH_2021 * 1000 + 123), "2021-03-04T05:06:07.123Z"),
        ("TIMESTAMP", struct.pack(">q", EPOCH_2021 * 1000), "2021-03-04T05:06:07Z"),
        ("TIMESTAMP", struct.pack(">q", -1), "1969-12-31T23:59:59.999Z"),
        ("TIME", struct.pack(">q", (5 * 3600 + 6 * 60 + 7) * 1000 + 8), "05:06:07.008"),
        ("INSTANT", struct.pack(">qi", EPOCH_2021, 123456789), "2021-03-04T05:06:07.123456789Z"),
        ("LOCAL_DATE", struct.pack(">q", 18690), "2021-03-04"),  # 51 years + 13 leap days + 62
        ("LOCAL_DATE", struct.pack(">q", -1), "1969-12-31"),
        ("LOCAL_TIME", struct.pack(">q", (3600 + 2) * 10**9 + 5), "01:00:02.000000005"),
        (
            "LOCAL_DATE_TIME",
            struct.pack(">qq", 18690, (5 * 3600 + 6 * 60 + 7) * 10**9 + 10**8),
            "2021-03-04T05:06:07.1",
        ),
    ],
)
def test_each_primitive_decodes_as_pulsar_encodes_it(
    type_name: str, data: bytes, expected: object
) -> None:
    assert decode(type_name, data) == (expected, None)


def test_local_date_epoch_day_is_hand_checked() -> None:
    # 1970-01-01 .. 2021-01-01: 51 years, 13 of them leap (1972..2020): 51*365+13 = 18628
    # days; + Jan (31) + Feb (28) + 3 = 18690.
    assert 51 * 365 + 13 + 31 + 28 + 3 == 18690


def test_string_charset_property() -> None:
    assert decode("STRING", "é".encode("latin-1"), __charset="ISO-8859-1") == ("é", None)


@pytest.mark.parametrize(
    ("type_name", "data", "reason"),
    [
        ("INT32", b"\x00\x01", "INT32 takes 4 bytes, the payload has 2"),
        ("BOOLEAN", b"", "BOOLEAN takes 1 bytes, the payload has 0"),
        ("INSTANT", struct.pack(">qi", 0, 10**9), "INSTANT nanoseconds out of range"),
        ("LOCAL_TIME", struct.pack(">q", 86_400 * 10**9), "LOCAL_TIME nano of day out of range"),
        ("LOCAL_DATE", struct.pack(">q", 10**12), "LOCAL_DATE out of range"),
        ("TIMESTAMP", struct.pack(">q", 2**62), "TIMESTAMP out of range"),
        ("STRING", b"\xff\xfe", "STRING is not valid utf-8"),
    ],
)
def test_bytes_not_of_the_type_give_an_error_not_an_exception(
    type_name: str, data: bytes, reason: str
) -> None:
    value, error = decode(type_name, data)
    assert value is None
    assert error is not None and error.startswith(reason)


def test_a_null_value_is_json_null() -> None:
    out = ValueDecoder().decode(None, SchemaInfo(type="INT32"))
    assert (out.value, out.error) == ("null", None)


@pytest.mark.parametrize(
    ("written", "shown"), [(0.1, 0.1), (3.4028235e38, 3.4028235e38), (1e-45, 1.4e-45)]
)
def test_float_shows_the_shortest_text_of_its_32_bits(written: float, shown: float) -> None:
    # as Java's Float.toString: 0.1f is "0.1", Float.MIN_VALUE "1.4E-45", MAX_VALUE "3.4028235E38"
    assert decode("FLOAT", struct.pack(">f", written)) == (shown, None)


@pytest.mark.parametrize(
    "charset",
    ["zlib", "base64", "hex", "rot13", "bz2", "unicode_escape", "idna", "punycode", "undefined"],
)
def test_string_charset_that_is_no_java_text_charset_is_a_plain_error(charset: str) -> None:
    # issue 42 item 11: codecs.lookup knew these; Java's Charset.forName knows none of them
    value, error = decode("STRING", b"aGVsbG8=", __charset=charset)
    assert value is None
    assert error == f"STRING: unsupported charset {charset!r}"


@pytest.mark.parametrize(
    ("charset", "data", "text"),
    [
        # Java's names and aliases, any case (Charset.forName is case-insensitive)
        ("UTF-8", b"\xc3\xa9", "é"),
        ("utf8", b"\xc3\xa9", "é"),
        ("US-ASCII", b"abc", "abc"),
        ("latin1", b"\xe9", "é"),
        ("windows-1252", b"\x80", "€"),  # cp1252's euro sign, hand-checked
        ("Shift_JIS", b"\x82\xa0", "あ"),
        ("GBK", b"\xc4\xe3", "你"),
        ("KOI8-R", b"\xc1", "\u0430"),  # CYRILLIC SMALL LETTER A
        # UTF-16: a BOM says the order and goes; without one, big-endian (Charset's javadoc)
        ("UTF-16", b"\x00A\x00B", "AB"),
        ("UTF-16", b"\xff\xfeA\x00", "A"),
        ("UTF-16", b"\xfe\xff\x00A", "A"),
        ("UTF-16LE", b"A\x00", "A"),
        ("UTF-16BE", b"\xfe\xff\x00A", "\ufeffA"),  # kept: a ZERO WIDTH NO-BREAK SPACE
        ("UTF-32", b"\x00\x00\x00A", "A"),
    ],
)
def test_string_java_charsets_decode_as_java_does(charset: str, data: bytes, text: str) -> None:
    assert decode("STRING", data, __charset=charset) == (text, None)
