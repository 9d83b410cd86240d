"""The `values` level (issue 42): payloads decoded by schemas, well-formed and hostile.

Input: a `random.Random`. Output: `make` gives a `Case` (a producer's capture built with
fuzz.craft: PRODUCER with a schema, PRODUCER_SUCCESS teaching its version, SENDs); `run`
reads every table with values on (fuzz.checks.read_checked), and for the redaction inputs
again with `redact_fields` and the frames' bytes (a payload preview with it must be
refused), and the text view (-V -x).
Schemas and payloads: JSON records holding a secret field and integers past 64 bits; Avro
records (encoded here: zigzag varints, RFC-free but per the Avro 1.11 spec), arrays of nulls
whose block counts claim up to 999,999 items in 4 bytes, `bytes` decimals whose unscaled
bytes exceed the declared precision; STRING with `__charset` a text encoding or not (zlib,
base64, rot13, unicode_escape, idna ...); INT64 of a wrong size; schema versions of 8, 0, 3
or 1,000 bytes.
Invariants beyond the common ones: every message row has a value or a value_error, and no
value_error is an "internal error"; `value_schema` labels at most LABEL_MAX characters (item
14); a charset that is not a text encoding gives no value (item 11); a decimal shows at most
its precision's digits (item 4); an array's value holds at most ITEMS_PER_BYTE items per
payload byte; with `--redact-fields` the secret appears in no cell of any table, nor in the
text view or its hex (item 8), and every other field's JSON is what the unredacted read gave
(item 9). One input in GROWTH_EVERY is the item-count family (item 3): the same 5-byte array
claiming n, 2n, 4n nulls: the dissector's lines must not grow with the claim (fuzz.work).
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa

from dissector.errors import UsageError
from dissector.frontends.cli import main
from dissector.pulsar.field_values import SHORT_HEX_BYTES
from dissector.read import ReaderOptions
from fuzz import work
from fuzz.checks import Case, Seen, read_checked, require
from fuzz.craft import B2C, C2B, Talk, capture, frame, meta, schema, version
from fuzz.seeds import Corpus

TOPIC = "persistent://public/default/values"
SECRET = "ZQXJ-card-4929-7731-SECRET"
BIG = 123456789012345678901234567890
#: a label: the schema type's name (at most 24 characters), " v", then the version: a
#: number, or bytes as the text view shows them (short_hex: 0x, SHORT_HEX_BYTES as hex, ...)
LABEL_MAX = 24 + 2 + 2 + 2 * SHORT_HEX_BYTES + 3
ITEMS_PER_BYTE = 8
GROWTH_EVERY = 25
GROWTH_N = 20_000
#: Charsets Java's Charset has (text encodings), and codecs Python has that are not.
TEXT_CHARSETS = ("UTF-8", "utf-8", "UTF-16", "ISO-8859-1", "US-ASCII", "windows-1252")
NOT_TEXT = ("zlib", "base64", "hex", "rot13", "bz2", "unicode_escape", "idna", "punycode")


def zigzag(n: int) -> bytes:
    """An Avro long: zigzag, then a base-128 varint."""
    z = (n << 1) ^ (n >> 63) if -(1 << 63) <= n < (1 << 63) else n << 1
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def avro_string(text: str) -> bytes:
    raw = text.encode()
    return zigzag(len(raw)) + raw


def null_array(count: int) -> bytes:
    """An Avro array<null>: one block of `count` items (no bytes each), then the end."""
    return zigzag(count) + b"\x00"


def _avro(rng: Random) -> tuple[dict[str, Any], list[bytes], dict[str, Any]]:
    kind = rng.choice(("record", "nulls", "decimal"))
    if kind == "record":
        avsc = {
            "type": "record",
            "name": "R",
            "fields": [{"name": "name", "type": "string"}, {"name": "n", "type": "long"}],
        }
        payloads = [
            avro_string(f"n{i}") + zigzag(rng.randrange(-(1 << 40), 1 << 40)) for i in range(3)
        ]
        return avsc, payloads, {}
    if kind == "nulls":
        count = rng.choice((0, 1, 100, 999_999, 1 << 40))
        return {"type": "array", "items": "null"}, [null_array(count)], {"array": True}
    precision = rng.choice((1, 5, 38))
    decimal: dict[str, Any] = {"type": "bytes", "logicalType": "decimal", "scale": 2}
    decimal["precision"] = precision
    size = rng.choice((1, 4, 16, 200, 5000))
    unscaled = bytes([rng.randrange(1, 128)]) + bytes(rng.randrange(256) for _ in range(size - 1))
    return decimal, [zigzag(len(unscaled)) + unscaled], {"precision": precision}


def make(rng: Random, corpus: Corpus) -> Case:
    if rng.randrange(GROWTH_EVERY) == 0:
        data = nulls_capture(GROWTH_N)  # the input at n (the others are made as it runs)
        return Case("values", len(data), ["growth"], data, {"growth": GROWTH_N})
    kind = rng.choice(("json", "avro", "string", "int64", "redact", "redact"))
    check: dict[str, Any] = {}
    props: dict[str, str] = {}
    if kind in ("json", "redact"):
        fields = [{"name": k, "type": "string"} for k in ("card", "name", "id")]
        definition = json.dumps({"type": "record", "name": "J", "fields": fields}).encode()
        payloads = [
            json.dumps({"card": SECRET, "name": f"n{i}", "id": BIG + i}).encode() for i in range(3)
        ]
        wire = "JSON"
    elif kind == "avro":
        avsc, payloads, check = _avro(rng)
        definition, wire = json.dumps(avsc).encode(), "AVRO"
    elif kind == "string":
        charset = rng.choice(TEXT_CHARSETS + NOT_TEXT)
        props["__charset"] = charset
        check["charset"] = charset
        definition, wire = b"", "STRING"
        payloads = [b"plain text", "ünïcode".encode(), b"\\u0041 xn--nxasmq6b"]
    else:
        definition, wire = b"", "INT64"
        payloads = [struct.pack(">q", rng.randrange(-(1 << 63), 1 << 63)), b"\x01\x02\x03"]
    ver = rng.choice((version(rng.randrange(5)),) * 4 + (b"", b"\x01\x02\x03", bytes(1000)))
    talk = Talk()
    talk.send(
        C2B,
        frame(
            "PRODUCER",
            topic=TOPIC,
            producer_id=1,
            request_id=1,
            schema=schema(wire, definition, props),
        ),
    )
    talk.send(B2C, frame("PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=ver))
    for seq, payload in enumerate(payloads):
        talk.send(
            C2B,
            frame("SEND", producer_id=1, sequence_id=seq, payload=payload, metadata=meta(seq, ver)),
        )
    data = capture(talk)
    check["redact"] = kind == "redact"
    # which of the two redaction invariants is checked first (a failure stops the input)
    check["leak_first"] = rng.random() < 0.5
    return Case("values", len(data), [kind, wire], data, check)


def run(case: Case, workdir: Path) -> Seen:
    s = case.settings
    if "growth" in s:
        return _growth(s["growth"], workdir)
    path = workdir / "input.pcap"
    path.write_bytes(case.data)
    seen = Seen()
    plain = read_checked(str(path), ReaderOptions(values=True), seen)
    check_values(plain["messages"], s)
    check_values(plain["journeys"], {})
    if s["redact"]:
        # a payload preview shows the fields in clear: refused with redaction (item 8)
        try:
            ReaderOptions(values=True, redact_fields="card", payload_preview=4096)
        except UsageError:
            pass
        else:
            require(False, "redaction_with_preview", "payload_preview accepted")
        options = ReaderOptions(values=True, redact_fields="card", frame_bytes=True)
        masked = read_checked(str(path), options, Seen())
        check_redacted(plain, masked, s["leak_first"])
        _no_secret(_text_view(path), "text view")
    return seen


def check_values(table: pa.Table, s: dict[str, Any]) -> None:
    cols = table.select(["value", "value_schema", "value_error"]).to_pydict()
    for value, label, error in zip(
        cols["value"], cols["value_schema"], cols["value_error"], strict=True
    ):
        require(value is not None or error is not None, "value_unexplained", label)
        require(not (error or "").startswith("internal error"), "value_internal_error", error)
        require(
            len(label or "") <= LABEL_MAX, "value_schema_label", f"{len(label or '')} characters"
        )
        if value is None:
            continue
        require(
            s.get("charset") not in NOT_TEXT,
            "charset_not_text",
            f"{s.get('charset')}: {value[:80]}",
        )
        if "precision" in s:
            digits = sum(ch.isdigit() for ch in value)
            require(
                digits <= s["precision"],
                "decimal_precision",
                f"{digits} digits, precision {s['precision']}",
            )
        if s.get("array"):
            items = value.count(",") + 1
            require(items <= ITEMS_PER_BYTE * 5 + 64, "items_from_nothing", f"{items} items")


def _cells(tables: dict[str, pa.Table]) -> str:
    return "\n".join(repr(t.to_pylist()) for t in tables.values())


def _text_view(path: Path) -> str:
    """What `read CAPTURE --values --redact-fields card -V -x` prints (the command itself)."""
    out = io.StringIO()
    argv = ["read", str(path), "--values", "--redact-fields", "card", "-V", "-x", "-j", "1"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    require(code == 0, "text_view_failed", f"exit {code}")
    return out.getvalue()


def _no_secret(text: str, where: str) -> None:
    for i in range(len(SECRET) - 7):  # any 8 characters of it (a hex dump line holds 16)
        require(SECRET[i : i + 8] not in text, "redaction_leak", where, where)
    require(SECRET.encode().hex() not in text, "redaction_leak", f"{where} (hex)", where)


def check_redacted(
    plain: dict[str, pa.Table], masked: dict[str, pa.Table], leak_first: bool = False
) -> None:
    if leak_first:
        _no_secret(_cells(masked), "tables")
    for name in ("messages", "journeys"):
        before = plain[name].column("value").to_pylist()
        after = masked[name].column("value").to_pylist()
        require(len(before) == len(after), "redaction_rows", name)
        for a, b in zip(before, after, strict=True):
            if a is None or b is None:
                require(a is None and b is None, "redaction_changes_value", name)
                continue
            left, right = json.loads(a), json.loads(b)
            if isinstance(left, dict) and isinstance(right, dict):
                left.pop("card", None)
                right.pop("card", None)
            require(left == right, "redaction_changes_value", f"{name}: {a[:120]} -> {b[:120]}")
    _no_secret(_cells(masked), "tables")


def nulls_capture(n: int) -> bytes:
    """One SEND whose Avro array<null> claims n items (issue 42 item 3)."""
    talk = Talk()
    avsc = json.dumps({"type": "array", "items": "null"}).encode()
    talk.send(
        C2B,
        frame("PRODUCER", topic=TOPIC, producer_id=1, request_id=1, schema=schema("AVRO", avsc)),
    )
    talk.send(
        B2C, frame("PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=version(0))
    )
    talk.send(
        C2B,
        frame(
            "SEND",
            producer_id=1,
            sequence_id=0,
            payload=null_array(n),
            metadata=meta(0, version(0)),
        ),
    )
    return capture(talk)


def _growth(n: int, workdir: Path) -> Seen:
    return work.growth_case("avro nulls", nulls_capture, n, workdir, ReaderOptions(values=True))
