"""Journeys of real messages as OpenTelemetry spans: the official client producing (with a
W3C `traceparent` property) to pulsar-lite or Apache's broker and consuming in two
subscriptions, captured on lo; `read --format otlp` of the capture, read back with
opentelemetry-proto.

Every span is checked against its journey row (tests.support.otlp.check), and against the
client's record and the capture as scapy reads it: the message id the client got, the
packets' own times, the trace id the producer put in the message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli
from tests.support.otlp import attributes, check, parse, spans
from tests.support.recorded import PEERS, Peer, client, peer_of, recorded, topic_name
from tests.test_journeys_real_peers import SEQUENCES, SUBS, _ids, _packets

pytestmark = [pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    """pulsar-lite (started per recording) or the session's Apache broker."""
    return peer_of(request)


def _traceparent(seq: int) -> tuple[str, str, str]:
    trace, span = f"{seq:032x}", f"{seq + 0xABC:016x}"
    return trace, span, f"00-{trace}-{span}-01"


def test_spans_of_real_journeys(tmp_path: Path, peer: Peer) -> None:
    import pulsar

    from tests.support.scenes import journeys

    cap = tmp_path / "journeys.pcap"
    topic = topic_name("otlp")
    sent: dict[int, tuple[int, int, int, int]] = {}
    with recorded(cap, peer) as broker, client(broker.url) as c:
        consumers = {
            sub: c.subscribe(
                topic, sub, consumer_type=getattr(pulsar.ConsumerType, kind), consumer_name=name
            )
            for sub, (kind, _, name) in SUBS.items()
        }
        producer = c.create_producer(topic, producer_name="otlp-producer", batching_enabled=False)
        for seq in SEQUENCES:
            props = {"traceparent": _traceparent(seq)[2]}
            sent[seq] = _ids(producer.send(b"otlp-%d" % seq, properties=props, sequence_id=seq))
        for consumer in consumers.values():
            for _ in SEQUENCES:
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            consumer.close()
        producer.close()

    out = tmp_path / "spans.otlp.jsonl"
    done = cli("read", str(cap), "--table", "journeys", "-o", str(out))
    assert done.returncode == 0, done.stderr
    rows = journeys(cap)
    assert len(rows) == len(SUBS) * len(SEQUENCES)
    by_row = check(rows, spans(parse(out.read_bytes())))
    packets = _packets(cap)

    def at(row: dict[str, Any], hop: str) -> int:
        """The hop's packet time as scapy reads it, in ns."""
        ts: int = packets[row[f"{hop}_packet"] - 1][0]
        return ts * 1000

    for i, row in enumerate(rows):
        journey, persist, dispatch, consume = by_row[i]
        ledger, entry, partition, _ = sent[row["sequence_id"]]
        assert attributes(journey)["messaging.message.id"] == f"{ledger}:{entry}:{partition}"
        assert attributes(consume)["messaging.client.id"] == SUBS[row["subscription"]][2]
        assert (journey.start_time_unix_nano, journey.end_time_unix_nano) == (
            at(row, "send"),
            at(row, "acked"),
        )
        assert (persist.start_time_unix_nano, persist.end_time_unix_nano) == (
            at(row, "send"),
            at(row, "receipt"),
        )
        assert consume.start_time_unix_nano == at(row, "delivered")
        assert consume.end_time_unix_nano == at(row, "acked")
        assert dispatch.start_time_unix_nano == at(row, "receipt")
        trace, parent, _ = _traceparent(row["sequence_id"])
        assert (row["trace_id"], row["span_id"], row["trace_format"]) == (trace, parent, "w3c")
        assert (journey.trace_id.hex(), journey.parent_span_id.hex()) == (trace, parent)
    # one trace per message: its two subscriptions' journeys share it, no other does
    traces: dict[int, set[bytes]] = {r["sequence_id"]: set() for r in rows}
    for i, row in enumerate(rows):
        traces[row["sequence_id"]].add(by_row[i][0].trace_id)
    assert all(len(t) == 1 for t in traces.values())
    assert len(set.union(*traces.values())) == len(SEQUENCES)
