"""pytest configuration: Hypothesis profiles (no per-example deadline: CI machines vary), the
test tiers (tests/support/tiers.py): every test gets the markers of what it needs before `-m`
selects, and a test that starts a tier's program without its marker fails; and the Apache
broker (`apache_broker`) and its secured variant (`apache_secure_broker`), each started once
per session by the first test that asks for it."""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator

import pytest
from hypothesis import settings

from tests.support import tiers
from tests.support.apache.broker import ApacheBroker
from tests.support.apache.secure import SecureBroker

settings.register_profile("default", deadline=None)
settings.load_profile("default")

#: Set to a file name, collection writes there every test's tier markers (tests/test_tiers.py).
TIERS_DUMP = "PULSAR_DISSECTOR_TIERS_DUMP"
#: Every test collected in this session (before -m deselects) -> its tier markers.
COLLECTED = pytest.StashKey[dict[str, list[str]]]()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for tier in sorted(tiers.needs(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(tier)
    marked = {
        i.nodeid: sorted({m.name for m in i.iter_markers()} & set(tiers.TIERS)) for i in items
    }
    config.stash[COLLECTED] = marked
    dump = os.environ.get(TIERS_DUMP)
    if dump:
        with open(dump, "w", encoding="utf-8") as out:
            json.dump(marked, out)


def pytest_configure(config: pytest.Config) -> None:
    tiers.guard()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    with tiers.running(m.name for m in item.iter_markers()):
        return (yield)


@pytest.fixture(scope="session")
def apache_broker() -> Iterator[ApacheBroker]:
    """One Apache Pulsar standalone broker on loopback for the whole session (the `apache`
    tier): started when first asked for, stopped by its PID when the session ends."""
    with ApacheBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def apache_secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """A second Apache broker for the whole session: token authentication and authorization,
    a TLS port, transactions and a 64 KiB maxMessageSize (tests/support/apache/secure.py)."""
    with SecureBroker(tmp_path_factory.mktemp("apache-secure-tls")) as broker:
        yield broker
