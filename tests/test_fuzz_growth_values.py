"""The growth check's value families (fuzz.growth_values) make what they say: n messages of
n x 1,000 nulls, a decimal of n bytes, n wide schemas, n messages going round wide schemas
(issue 42 items 3, 4, 5).

Input: the makers at small n. Output: pass or fail, checked on the capture's messages table
read without values (payload sizes and digests against hand-made Avro bytes).
Rule: no wall-clock time; the growth check itself (`make fuzz-growth`) judges the times.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from dissector.read import read_tables
from fuzz import growth, growth_values


def rows(path: str) -> list[dict[str, object]]:
    got: list[dict[str, object]] = read_tables([path], tables=["messages"])["messages"].to_pylist()
    return got


def test_null_array_family_holds_n_messages_of_1000n_nulls(tmp_path: Path) -> None:
    made = growth_values.make_null_array(3, tmp_path)
    assert made.options == {"values": True} and made.tables == ["messages"]
    # 3,000 nulls: zigzag(3000) = 6000 = 0xF0 0x2E as a varint, then the block's end
    payload = b"\xf0\x2e\x00"
    got = rows(made.captures[0])
    assert len(got) == 3
    assert {r["payload_sha256"] for r in got} == {hashlib.sha256(payload).hexdigest()}


def test_decimal_family_holds_one_decimal_of_n_bytes(tmp_path: Path) -> None:
    made = growth_values.make_decimal(300, tmp_path)
    (row,) = rows(made.captures[0])
    assert row["payload_size"] == 2 + 300  # zigzag(300) = 600: two varint bytes


def test_wide_schemas_family_holds_n_schemas(tmp_path: Path) -> None:
    made = growth_values.make_wide_schemas(2, tmp_path)
    assert made.argv is not None and made.argv[:2] == ["read", "--values"]
    got = rows(made.captures[0])
    assert sorted(str(r["topic"]) for r in got) == [
        "persistent://public/default/wide-0",
        "persistent://public/default/wide-1",
    ]
    assert all(r["payload_size"] == growth_values.WIDE_FIELDS for r in got)
    assert {"avro_null_array", "avro_decimal", "wide_schemas", "schema_thrash"} <= {
        f.name for f in growth.FAMILIES
    }


def test_schema_thrash_family_holds_n_one_byte_messages_round_the_schemas(tmp_path: Path) -> None:
    made = growth_values.make_schema_thrash(7, tmp_path)
    got = rows(made.captures[0])
    k = growth_values.THRASH_SCHEMAS
    assert [str(r["topic"]) for r in got] == [
        f"persistent://public/default/thrash-{i % k}" for i in range(7)
    ]
    # union branch 0 (null): zigzag(0), one byte
    assert {r["payload_sha256"] for r in got} == {hashlib.sha256(b"\x00").hexdigest()}
