"""Fixtures of the frontend tests: one local Spark session for every Spark test module (its
start-up costs more than most of those tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from dissector.frontends import spark as ds


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = ds.session("local[2]", "pulsar-dissector-tests")
    yield session
    session.stop()
