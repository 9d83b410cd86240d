"""Fixtures of the frontend tests: one local Spark session for every Spark test module (its
start-up costs more than most of those tests), started again when a module that needed a
session of its own (test_spark_s3: object-storage settings at start) stopped it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from dissector.frontends import spark as ds


@pytest.fixture(scope="session")
def _sessions() -> Iterator[list[SparkSession]]:
    made: list[SparkSession] = []
    yield made
    if made:
        made[-1].stop()


@pytest.fixture(scope="module")
def spark(_sessions: list[SparkSession]) -> SparkSession:
    if not _sessions or _sessions[-1].sparkContext._jsc is None:  # none yet, or stopped
        _sessions.append(ds.session("local[2]", "pulsar-dissector-tests"))
    return _sessions[-1]
