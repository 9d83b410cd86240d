"""The Apache broker as a peer of the recorded scenarios (tests/support/recorded.py): a topic
the official client creates by using it is a plain, non-partitioned one, as pulsar-lite's are
(`default_partitions = 0`): a receiver queue of 0 and the journeys' message ids need it.

Input:  the session's Apache broker and the official Python client.
Output: the broker's own answers (its admin API: its runtime configuration, the topic's
        partitioned metadata) and the client's record (the message id `send` returned).
Rule:   nothing here reads our dissector's output.
"""

from __future__ import annotations

import pytest

from tests.support.apache.admin import admin, topic_path
from tests.support.apache.broker import ApacheBroker
from tests.support.recorded import client, topic_name

pytestmark = [pytest.mark.apache, pytest.mark.peers]


def test_a_topic_the_client_creates_is_not_partitioned(apache_broker: ApacheBroker) -> None:
    runtime = admin(apache_broker, "GET", "/admin/v2/brokers/configuration/runtime")
    assert runtime["allowAutoTopicCreation"] == "true"
    assert runtime["allowAutoTopicCreationType"] == "non-partitioned"
    topic = topic_name("kind")
    with client(apache_broker.url) as made:
        producer = made.create_producer(topic, batching_enabled=False)
        mid = producer.send(b"made by use")
        producer.close()
    assert mid.partition() == -1  # the client's record: no partition
    metadata = admin(apache_broker, "GET", f"{topic_path(topic)}/partitions")
    assert metadata["partitions"] == 0, metadata
