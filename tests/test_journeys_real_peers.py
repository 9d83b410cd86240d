"""Journeys of real messages: the official client producing to a broker (pulsar-lite, or
Apache's own: the `peer` fixture) and consuming in two subscriptions (Exclusive and
Shared), captured by tcpdump on lo.

The client's own record is the truth: the message id `send` returned for each sequence id
the test chose, the message ids each named consumer received. Every journey row must say
the same, and its times and latencies must be those of the packets it names, read from the
capture independently (scapy): the packet's timestamp, its direction (to or from the
broker's port) and, for the SEND and the MESSAGE, the message's own bytes in the packet.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from dissector.read import read_capture
from tests.support.cli import cli
from tests.support.html_tables import report_tables
from tests.support.recorded import PEERS, Peer, client, peer_of, recorded, topic_name
from tests.support.scenes import journeys

pytestmark = [pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    """pulsar-lite (started per recording) or the session's Apache broker."""
    return peer_of(request)


#: subscription -> (its type as the client names it, as SUBSCRIBE's subType says it, the
#: consumer's name)
SUBS = {"ex": ("Exclusive", "Exclusive", "alice"), "sh": ("Shared", "Shared", "bob")}
SEQUENCES = range(100, 106)


def _ids(mid: Any) -> tuple[int, int, int, int]:
    return (mid.ledger_id(), mid.entry_id(), mid.partition(), mid.batch_index())


def _packets(path: Path) -> list[tuple[int, int, int, bytes]]:
    """(time in µs, source port, destination port, TCP payload) of every packet, as scapy
    reads the capture (packet n at index n - 1)."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    out = []
    for pkt in rdpcap(str(path)):
        tcp = pkt[TCP]
        out.append((int(Decimal(pkt.time) * 1_000_000), tcp.sport, tcp.dport, bytes(tcp.payload)))
    return out


def test_every_journey_is_the_clients_record(tmp_path: Path, peer: Peer) -> None:
    import pulsar

    cap = tmp_path / "journeys.pcap"
    topic = topic_name("journeys")
    sent: dict[int, tuple[int, int, int, int]] = {}  # sequence id -> id send() returned
    received: dict[tuple[str, bytes], tuple[int, int, int, int]] = {}  # (sub, data) -> id
    with recorded(cap, peer) as broker, client(broker.url) as c:
        consumers = {
            sub: c.subscribe(
                topic, sub, consumer_type=getattr(pulsar.ConsumerType, kind), consumer_name=name
            )
            for sub, (kind, _, name) in SUBS.items()
        }
        producer = c.create_producer(
            topic, producer_name="journeys-producer", batching_enabled=False
        )
        for seq in SEQUENCES:
            sent[seq] = _ids(producer.send(f"journey-{seq}".encode(), sequence_id=seq))
        for sub, consumer in consumers.items():
            for _ in SEQUENCES:
                got = consumer.receive(timeout_millis=10_000)
                received[(sub, got.data())] = _ids(got.message_id())
                consumer.acknowledge(got)
            consumer.close()  # its grouped acks are sent
        producer.close()
        port = broker.port

    # the client's record: each subscription received each message once, under its id
    assert received == {(sub, f"journey-{s}".encode()): sent[s] for sub in SUBS for s in SEQUENCES}
    rows = journeys(cap)
    assert len(rows) == len(SUBS) * len(SEQUENCES), rows
    # nothing went wrong in this run: no finding, no anomaly, on either broker
    healthy = read_capture(cap, tables=["findings", "anomalies"])
    assert len(healthy.findings) == len(healthy.anomalies) == 0
    packets = _packets(cap)
    by_key = {(r["sequence_id"], r["subscription"]): r for r in rows}
    for seq in SEQUENCES:
        ledger, entry, partition, batch_index = sent[seq]
        for sub, (_, sub_type, name) in SUBS.items():
            row = by_key[(seq, sub)]
            assert (row["ledger_id"], row["entry_id"], row["partition"]) == (
                ledger,
                entry,
                partition,
            )
            assert batch_index == -1 and row["batch_index"] is None  # not batched
            assert (row["topic"], row["producer_name"]) == (topic, "journeys-producer")
            assert (row["sub_type"], row["consumer_name"]) == (sub_type, name)
            assert (row["deliveries"], row["redeliveries"], row["error"]) == (1, 0, None)
            data = f"journey-{seq}".encode()
            hops = {}
            for hop, to_broker, carries in (
                ("send", True, data),
                ("receipt", False, b""),
                ("delivered", False, data),
                ("acked", True, b""),
            ):
                ts, sport, dport, payload = packets[row[f"{hop}_packet"] - 1]
                assert row[f"{hop}_ts"] == ts, (hop, row)
                assert (dport if to_broker else sport) == port, (hop, row)
                assert carries in payload, (hop, row)
                hops[hop] = ts
            assert row["persist_us"] == hops["receipt"] - hops["send"]
            assert row["dispatch_us"] == hops["delivered"] - hops["receipt"]
            assert row["consume_us"] == hops["acked"] - hops["delivered"]
            assert row["end_to_end_us"] == hops["acked"] - hops["send"]


def test_a_batch_is_one_journey_per_entry(tmp_path: Path, peer: Peer) -> None:
    """Six messages sent in one batch: one stored entry, six journeys (batch indexes 0-5),
    each with the id and sequence id the client gave it, delivered and acknowledged in the
    subscription with the batch's one MESSAGE."""
    cap = tmp_path / "batch.pcap"
    topic = topic_name("journeys-batch")
    sent: dict[int, tuple[int, int, int, int]] = {}
    with recorded(cap, peer) as broker, client(broker.url) as c:
        consumer = c.subscribe(topic, "batched", consumer_name="carol")
        producer = c.create_producer(
            topic,
            producer_name="batch-producer",
            batching_enabled=True,
            batching_max_messages=len(SEQUENCES),
            batching_max_publish_delay_ms=60_000,  # the batch is sent when full
        )
        done: dict[int, Any] = {}
        for seq in SEQUENCES:
            producer.send_async(
                f"entry-{seq}".encode(),
                lambda res, mid, seq=seq: done.setdefault(seq, mid),
                sequence_id=seq,
            )
        producer.flush()
        sent = {seq: _ids(mid) for seq, mid in done.items()}
        got = [consumer.receive(timeout_millis=10_000) for _ in SEQUENCES]
        for message in got:
            consumer.acknowledge(message)
        consumer.close()
        producer.close()
    # the client's record: one entry, its batch indexes, each message received under its id
    assert len({(ledger, entry) for ledger, entry, _, _ in sent.values()}) == 1
    assert sorted(index for _, _, _, index in sent.values()) == list(range(len(SEQUENCES)))
    assert {m.data(): _ids(m.message_id()) for m in got} == {
        f"entry-{seq}".encode(): sent[seq] for seq in SEQUENCES
    }
    rows = journeys(cap)
    assert len(rows) == len(SEQUENCES), rows
    send_packets = {r["send_packet"] for r in rows}
    delivered_packets = {r["delivered_packet"] for r in rows}
    assert len(send_packets) == len(delivered_packets) == 1  # one SEND, one MESSAGE
    for row in rows:
        ledger, entry, _, index = sent[row["sequence_id"]]
        assert (row["ledger_id"], row["entry_id"], row["batch_index"]) == (ledger, entry, index)
        assert (row["batch_size"], row["subscription"], row["consumer_name"]) == (
            len(SEQUENCES),
            "batched",
            "carol",
        )
        assert row["deliveries"] == 1 and row["acked_ts"] is not None


def _quantiles(values: list[int]) -> dict[str, float]:
    """p50, p90, p99, p99.9, p99.99 and max in ms by the standard library
    (statistics.quantiles, "inclusive": linear between the closest ranks, as docs say of
    `summary`), cut in ten thousandths so every percentile is one of the cuts."""
    cuts = statistics.quantiles(values, n=10000, method="inclusive")
    names = {5000: "p50", 9000: "p90", 9900: "p99", 9990: "p99_9", 9999: "p99_99"}
    ms = {f"{name}_ms": round(cuts[k - 1] / 1000, 3) for k, name in names.items()}
    return {"count": len(values), **ms, "max_ms": round(max(values) / 1000, 3)}


def test_summary_per_subscription_is_the_clients_record(tmp_path: Path, peer: Peer) -> None:
    """Two subscriptions of one topic: `ex` receives and acknowledges the six messages;
    `sh` (Shared) rejects one once (negative ack: the broker delivers it again) and never
    acknowledges another. `summary`'s counts per subscription are those the client
    counted; its percentiles are the standard library's of the rows' hop time differences;
    the report shows the same numbers."""
    import pulsar

    cap = tmp_path / "subs.pcap"
    topic = topic_name("journeys-subs")
    rejected, unacked = b"journey-102", b"journey-105"
    received: dict[str, Counter[bytes]] = {sub: Counter() for sub in SUBS}
    acked: dict[str, set[bytes]] = {sub: set() for sub in SUBS}
    with recorded(cap, peer) as broker, client(broker.url) as c:
        consumers = {
            sub: c.subscribe(
                topic,
                sub,
                consumer_type=getattr(pulsar.ConsumerType, kind),
                consumer_name=name,
                negative_ack_redelivery_delay_ms=100,
            )
            for sub, (kind, _, name) in SUBS.items()
        }
        producer = c.create_producer(topic, producer_name="subs-producer", batching_enabled=False)
        for seq in SEQUENCES:
            producer.send(f"journey-{seq}".encode(), sequence_id=seq)
        for sub, consumer in consumers.items():
            shared = sub == "sh"
            while sum(received[sub].values()) < len(SEQUENCES) + shared:
                got = consumer.receive(timeout_millis=10_000)
                data = got.data()
                received[sub][data] += 1
                if shared and data == rejected and received[sub][data] == 1:
                    consumer.negative_acknowledge(got)
                elif not (shared and data == unacked):
                    consumer.acknowledge(got)
                    acked[sub].add(data)
            consumer.close()  # its grouped acks are sent
        producer.close()

    # the client's record: sh got `rejected` twice, acknowledged all but `unacked`
    assert received["sh"][rejected] == 2 and len(acked["sh"]) == len(SEQUENCES) - 1
    want = {
        sub: {
            "messages": len(received[sub]),
            "delivered": len(received[sub]),
            "delivered_twice": sum(n > 1 for n in received[sub].values()),
            "not_acked": len(set(received[sub]) - acked[sub]),
        }
        for sub in SUBS
    }
    assert want["sh"] == {"messages": 6, "delivered": 6, "delivered_twice": 1, "not_acked": 1}
    res = cli("summary", "--format", "json", str(cap))
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)["journeys"]
    assert shown["never_delivered"] == []
    subs = {s["subscription"]: s for s in shown["subscriptions"]}
    assert set(subs) == set(SUBS) and {s["topic"] for s in subs.values()} == {topic}
    rows = journeys(cap)
    for sub in SUBS:
        assert {k: subs[sub][k] for k in want[sub]} == want[sub], sub
        mine = [r for r in rows if r["subscription"] == sub]
        dispatch = [r["delivered_ts"] - r["receipt_ts"] for r in mine]
        end_to_end = [r["acked_ts"] - r["send_ts"] for r in mine if r["acked_ts"] is not None]
        assert subs[sub]["dispatch"] == _quantiles(dispatch), sub
        assert subs[sub]["end_to_end"] == _quantiles(end_to_end), sub
    tables = report_tables(cap, tmp_path / "r.html")
    assert tables["subscriptions-table"][1:] == [
        [topic, sub, *(str(subs[sub][k]) for k in want[sub])] for sub in sorted(SUBS)
    ]
