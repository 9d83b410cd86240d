"""--values on Spark: the data source's `values` and `redact_fields` options and the fleet
job's, on the crafted capture of tests/support/value_capture.py (one series: its schemas
are all in it), against what it was encoded from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from dissector.errors import UsageError
from dissector.frontends import spark as ds
from dissector.frontends.fleet import job as fleet
from dissector.read import ReaderOptions
from tests.support.value_capture import CUSTOMER, ORDERS, ORDERS_TOPIC, write_value_capture


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_value_capture(tmp_path_factory.mktemp("spark-values") / "values.pcap")


def _orders(rows: list[dict[str, Any]]) -> list[Any]:
    """The produced orders' values, in batch order."""
    mine = [r for r in rows if r["topic"] == ORDERS_TOPIC and r["kind"] == "produced"]
    mine.sort(key=lambda r: r["batch_index"])
    return [json.loads(r["value"]) for r in mine]


def test_data_source_options(spark: SparkSession, capture: Path) -> None:
    read = spark.read.format("pulsar").option("table", "messages")
    plain = [r.asDict() for r in read.load(str(capture)).collect()]
    assert plain and all(r["value"] is None and r["value_schema"] is None for r in plain)
    valued = read.option("values", "true").load(str(capture))
    assert _orders([r.asDict() for r in valued.collect()]) == ORDERS
    redacted = read.option("values", "TRUE").option("redact_fields", "customer").load(str(capture))
    got = _orders([r.asDict() for r in redacted.collect()])
    assert [o["customer"] for o in got] == [
        f"<redacted>({len(json.dumps(o['customer']))} bytes)" for o in ORDERS
    ]
    assert [o["amount"] for o in got] == [o["amount"] for o in ORDERS]


def test_option_words() -> None:
    assert ds.options_from({"values": "1"}).values
    assert not ds.options_from({}).values
    with pytest.raises(UsageError, match="not true or false"):
        ds.options_from({"values": "yes please"})
    with pytest.raises(UsageError, match="redact_fields"):
        ds.options_from({"redact_fields": "a"})
    with pytest.raises(UsageError, match="payload_preview"):  # issue 42 item 8
        ds.options_from({"values": "true", "redact_fields": "a", "payload_preview": "8"})


def test_fleet_job_writes_values(spark: SparkSession, capture: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    fleet.run(spark, [str(capture)], str(out), ReaderOptions(values=True))
    rows = [r for f in (out / "messages").rglob("*.parquet") for r in pq.read_table(f).to_pylist()]
    assert _orders(rows) == ORDERS
    plain = tmp_path / "plain"
    fleet.run(spark, [str(capture)], str(plain), ReaderOptions())
    blobs = b"".join(f.read_bytes() for f in plain.rglob("*") if f.is_file())
    assert CUSTOMER.encode() not in blobs
