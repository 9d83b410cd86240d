"""Two captures of one run, taken by two tcpdump processes, read together: the same journeys
as one capture of both.

The producer's client and the consumers' client reach pulsar-lite through two proxies on
loopback (each client's connection goes to its own proxy port: the proxy points the client's
lookups at itself, so the client keeps that one connection), as if they ran on two hosts. Three
tcpdump processes record at the same time: one sees the producer's port only (the producer's
host), one the consumers' port only (the consumers' host), one both (a capture of the whole run).

Truth: the client's own record (which id `send` returned for each sequence id; which consumer
received which id) and the packets themselves, read by scapy: every hop's packet in the merged
read is the packet of the same time, direction and bytes in the capture of its host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.capture import Tcpdump, wait_closed
from tests.support.peers import PulsarLite, RecordingProxy
from tests.support.recorded import client, topic_name
from tests.support.scenes import journeys

pytestmark = [pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]

SUBS = {"ex": "Exclusive", "sh": "Shared"}
SEQUENCES = range(200, 208)
#: columns naming a connection or a packet of the file read: they differ between a read of one
#: file and a merged read of two (connection ids are dealt per read, packets numbered in the
#: merged order); everything else is the message's and the hops' own.
PER_READ = ("conn_id", "producer_conn_id", "consumer_conn_id")
PACKETS = ("send_packet", "receipt_packet", "delivered_packet", "acked_packet")
#: columns of capture times and their differences: each tcpdump process stamps its own copy
#: of a packet as it reads it (a few µs apart), so these are checked against each host's own
#: packets instead.
TIMES = (
    "ts",
    "send_ts",
    "receipt_ts",
    "delivered_ts",
    "acked_ts",
    "persist_us",
    "dispatch_us",
    "consume_us",
    "end_to_end_us",
)
#: hop -> (the host whose capture holds its packet, sent to the broker's side, its bytes)
HOPS = {
    "send": ("prod", True, "apart-{seq}"),
    "receipt": ("prod", False, ""),
    "delivered": ("cons", False, "apart-{seq}"),
    "acked": ("cons", True, ""),
}


def _ids(mid: Any) -> tuple[int, int, int, int]:
    return (mid.ledger_id(), mid.entry_id(), mid.partition(), mid.batch_index())


def _packets(path: Path) -> dict[int, tuple[int, int, bytes]]:
    """time in µs -> (source port, destination port, TCP payload) of every packet of `path`
    as scapy reads it (the first packet of a time, if two share one)."""
    from decimal import Decimal

    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    out: dict[int, tuple[int, int, bytes]] = {}
    for pkt in rdpcap(str(path)):
        tcp = pkt[TCP]
        out.setdefault(
            int(Decimal(pkt.time) * 1_000_000), (tcp.sport, tcp.dport, bytes(tcp.payload))
        )
    return out


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["sequence_id"], row["subscription"])


def test_two_hosts_captures_read_together_equal_one_capture(tmp_path: Path) -> None:
    import pulsar

    whole, prod_host, cons_host = (tmp_path / f"{n}.pcap" for n in ("whole", "prod", "cons"))
    topic = topic_name("two-captures")
    sent: dict[int, tuple[int, int, int, int]] = {}
    received: dict[tuple[str, bytes], tuple[int, int, int, int]] = {}
    with (
        PulsarLite(extra_config={"default_partitions": 0}) as lite,
        RecordingProxy(lite.port) as to_prod,
        RecordingProxy(lite.port) as to_cons,
        Tcpdump(whole, f"tcp port {to_prod.port} or tcp port {to_cons.port}"),
        Tcpdump(prod_host, f"tcp port {to_prod.port}"),
        Tcpdump(cons_host, f"tcp port {to_cons.port}"),
    ):
        with client(to_prod.url) as pc, client(to_cons.url) as cc:
            consumers = {
                sub: cc.subscribe(
                    topic,
                    sub,
                    consumer_type=getattr(pulsar.ConsumerType, kind),
                    consumer_name=f"{sub}-consumer",
                )
                for sub, kind in SUBS.items()
            }
            producer = pc.create_producer(topic, producer_name="apart", batching_enabled=False)
            for seq in SEQUENCES:
                sent[seq] = _ids(producer.send(f"apart-{seq}".encode(), sequence_id=seq))
            for sub, consumer in consumers.items():
                for _ in SEQUENCES:
                    got = consumer.receive(timeout_millis=10_000)
                    received[(sub, got.data())] = _ids(got.message_id())
                    consumer.acknowledge(got)
                consumer.close()
            producer.close()
        # every tcpdump was listening before it was entered; each file holds every end
        for path, ports in (
            (whole, (to_prod.port, to_cons.port)),
            (prod_host, (to_prod.port,)),
            (cons_host, (to_cons.port,)),
        ):
            wait_closed(path, ports)
        prod_port, cons_port = to_prod.port, to_cons.port

    assert received == {(s, f"apart-{q}".encode()): sent[q] for s in SUBS for q in SEQUENCES}
    one = journeys(whole)
    together = journeys([prod_host, cons_host])
    # the client's record, in the merged read: one row per (message, subscription), joined
    assert sorted(map(_key, together)) == sorted((q, s) for q in SEQUENCES for s in SUBS)
    for row in together:
        assert (row["ledger_id"], row["entry_id"]) == sent[row["sequence_id"]][:2]
        assert row["consumer_name"] == f"{row['subscription']}-consumer"
        assert None not in (row["send_ts"], row["receipt_ts"], row["delivered_ts"], row["acked_ts"])
        assert row["producer_conn_id"] != row["consumer_conn_id"]  # joined across connections
    # the same journeys as the capture of both, but for what each read numbers itself and
    # each process's time stamps
    strip = PER_READ + PACKETS + TIMES
    mine = sorted(({k: v for k, v in r.items() if k not in strip} for r in together), key=_key)
    theirs = sorted(({k: v for k, v in r.items() if k not in strip} for r in one), key=_key)
    assert mine == theirs
    # every hop of the merged read is a packet of its host's capture: that time, direction,
    # and for SEND and MESSAGE the message's own bytes; latencies are their differences
    hosts = {"prod": (_packets(prod_host), prod_port), "cons": (_packets(cons_host), cons_port)}
    for row in together:
        for hop, (host, to_broker, carries) in HOPS.items():
            packets, port = hosts[host]
            sport, dport, payload = packets[row[f"{hop}_ts"]]
            assert (dport if to_broker else sport) == port, (hop, row)
            assert carries.format(seq=row["sequence_id"]).encode() in payload, (hop, row)
        assert row["persist_us"] == row["receipt_ts"] - row["send_ts"]
        assert row["dispatch_us"] == row["delivered_ts"] - row["receipt_ts"]
        assert row["consume_us"] == row["acked_ts"] - row["delivered_ts"]
        assert row["end_to_end_us"] == row["acked_ts"] - row["send_ts"]
