"""The documented import paths stay where users' scripts find them (issue 26): `dissector`
and `dissector.spark`; the package says it is typed (PEP 561)."""

from __future__ import annotations

import importlib
import importlib.resources

import pytest


@pytest.mark.spark  # imports pyspark (the spark extra)
def test_dissector_spark_is_the_data_source() -> None:
    public = importlib.import_module("dissector.spark")
    inner = importlib.import_module("dissector.frontends.spark")
    for name in public.__all__:
        assert getattr(public, name) is getattr(inner, name)
    assert public.PulsarDataSource.name() == "pulsar"


def test_the_package_is_typed() -> None:
    assert importlib.resources.files("dissector").joinpath("py.typed").is_file()


def test_the_top_level_api() -> None:
    import dissector

    for name in ("read_capture", "read_tables", "iter_events", "ReaderOptions", "UsageError"):
        assert name in dissector.__all__ and hasattr(dissector, name)
