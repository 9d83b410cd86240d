"""Every table schema follows the house rules: documented columns, ts first, conn_id, no
unsigned types (Spark has none), UTC microsecond timestamps."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dissector.tables.schema import SCHEMAS, describe


@pytest.mark.parametrize("table", sorted(SCHEMAS))
def test_schema_rules(table: str) -> None:
    schema = SCHEMAS[table]
    assert schema.names[:2] == ["ts", "conn_id"]
    docs = describe(table)
    assert set(docs) == set(schema.names)
    assert all(len(doc) > 10 for doc in docs.values()), docs
    for field in schema:
        t = field.type
        assert not pa.types.is_unsigned_integer(t), field.name
        if pa.types.is_timestamp(t):
            assert (t.unit, t.tz) == ("us", "UTC"), field.name
    assert not schema.field("ts").nullable and not schema.field("conn_id").nullable
