"""`live --metrics` scraped by a real Prometheus while real peers work: the board shows it.

A pulsar-lite broker on loopback; `pulsar-dissect live -i lo --metrics 0 --flow-wait 1
--findings`; Debian's Prometheus scraping it every second. Clients of the official Python client:
- A, connected before the capture started (its CONNECT is never seen: the capture starts in
  the middle of its stream, an anomaly), then, captured: a Shared subscription and a producer
  on one topic, six messages, one negatively acknowledged and received again, a redelivery
  of the unacknowledged one asked and received again, all acked (two redelivery requests);
  an Exclusive subscription held on a second topic with a receiver queue of 0 (no FLOW: a
  finding once --flow-wait passed). A stays connected while Prometheus is asked.
- B: `run_scenario`, twelve messages sent, received and acked on a third topic, then closed
  (a connection from CONNECT to FIN).
- C: subscribes to the subscription A holds: pulsar-lite drops its connections without an
  answer, until the client's operation timeout (requests never answered: a finding each).
PromQL over Prometheus' HTTP API answers what the clients' records say (messages and bytes
sent, messages received and received again per topic (at least those: the broker may
deliver more than the application took), negative acks, producers and subscriptions made),
and every query of the shipped board, its variables substituted as Grafana would (the
`instance`, `topic` and `subscription` variables from their label_values queries), returns
data, but those of the panels live does not feed yet while it runs (`LIVE_GAPS`, pinned:
data, every panel's included (`LIVE_GAPS`, none now, pinned). A's finding, established
while its connection is open, is counted and open while live runs; the end-to-end
latencies are there while live runs: one per message each client acknowledged, per
topic and subscription. Conditions are polled over the HTTP API until they hold (a
deadline bounds a hang).
"""

from __future__ import annotations

import logging
import re
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dissector.metrics import dashboard
from tests.support.live import Live
from tests.support.peers import (
    ClientRecorder,
    PulsarLite,
    _id_key,
    _make_payload,
    _msg_id,
    _new_topic,
    run_scenario,
)
from tests.support.prometheus import PrometheusServer, substitute, variable_values

TIMEOUT = 10  # the clients' operation timeout (seconds)
REFUSED_TIMEOUT = 2  # client C's: how long it retries the refused subscription
#: live's options besides the interface and the broker's port: the endpoint on a free port,
#: a consumer without FLOW for a second is a finding, and findings are printed at once.
LIVE_OPTIONS = ("--metrics", "0", "--flow-wait", "1", "--findings")
#: A's finding: its exclusive consumer sends no FLOW (its connection stays open)
NO_FLOW = "flow.no_flow_after_subscribe"


@dataclass
class BoardRun:
    prom: PrometheusServer
    target: str  # HOST:PORT of live's endpoint (the `instance` label)
    held: dict[str, Any]  # client A's record
    ended: dict[str, Any]  # client B's record
    refused: str  # client C's error
    topic: str  # A's shared topic
    held_topic: str  # the topic of A's exclusive subscription
    live: Live


def hold_open(rec: ClientRecorder, client: Any, topic: str, held_topic: str) -> None:
    """Client A's part (module docstring): everything acked, two redelivery requests."""
    import pulsar

    consumer = rec.subscribe(
        client,
        topic,
        "sub-board",
        consumer_type=pulsar.ConsumerType.Shared,  # pulsar-lite redelivers on Shared only
        negative_ack_redelivery_delay_ms=300,
    )
    # a receiver queue of 0: the client grants no permit until the application receives,
    # and it never does here (a finding once --flow-wait passed: on a connection still open)
    rec.subscribe(
        client,
        held_topic,
        "sub-held",
        consumer_type=pulsar.ConsumerType.Exclusive,
        receiver_queue_size=0,
    )
    producer = rec.create_producer(client, topic, batching_enabled=False)
    entries = [
        rec.send(producer, _make_payload(i, None), properties={"i": str(i)}) for i in range(6)
    ]
    msgs = rec.receive_sent(consumer, entries, TIMEOUT, phase="first")
    msgs.sort(key=lambda m: _id_key(_msg_id(m.message_id())))  # one producer: sent order
    for msg in msgs[2:]:
        rec.ack(consumer, msg)
    rec.nack(consumer, msgs[0])
    rec.receive_sent(consumer, entries[:1], TIMEOUT, phase="nacked", expect_repeats=True, ack=True)
    rec.redeliver_unacknowledged(consumer)
    rec.receive_sent(consumer, entries[1:2], TIMEOUT, phase="asked", expect_repeats=True, ack=True)


def refuse(url: str, held_topic: str) -> str:
    """Client C: a subscription another consumer holds exclusively (the client's error)."""
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=REFUSED_TIMEOUT, logger=logging.getLogger("pulsar")
    )
    try:
        client.subscribe(held_topic, "sub-held", consumer_type=pulsar.ConsumerType.Exclusive)
    except pulsar.PulsarException as exc:
        return str(exc)
    finally:
        client.close()
    raise AssertionError("the held subscription was given to a second exclusive consumer")


@pytest.fixture(scope="module")
def board_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoardRun]:
    import pulsar

    topic, held_topic = _new_topic("board"), _new_topic("board-held")
    with PulsarLite() as broker:
        client = pulsar.Client(
            broker.url, operation_timeout_seconds=TIMEOUT, logger=logging.getLogger("pulsar")
        )
        try:
            client.get_topic_partitions(topic)  # A's connection, before the capture
            live = Live(*("-i", "lo", "--port", str(broker.port), *LIVE_OPTIONS))
            try:
                found = re.search(
                    r", metrics on http://(\S+)/metrics$", live.stderr.splitlines()[0]
                )
                assert found, live.stderr
                tmp = tmp_path_factory.mktemp("prometheus")
                with PrometheusServer([found[1]], tmp) as prom:
                    # scraping before the clients start (its first scrape waits for the
                    # target discovery, up to 5 s)
                    prom.wait_for(lambda: prom.scrapes() >= 1, "a first scrape")
                    rec = ClientRecorder("board", topic=topic)
                    hold_open(rec, client, topic, held_topic)
                    ended = run_scenario(broker.url, messages=12, batching=False)
                    refused = refuse(broker.url, held_topic)
                    run = BoardRun(
                        prom, found[1], rec.finish(), ended, refused, topic, held_topic, live
                    )
                    prom.wait_for(lambda: reached(run), "Prometheus holds the clients' records")
                    prom.wait_for_scrapes(1)  # every series twice: rates are defined
                    yield run
            finally:
                live.stop(signal.SIGINT)
        finally:
            client.close()


def by_topic(prom: PrometheusServer, family: str) -> dict[str, float]:
    return prom.values(f"sum by (topic) (pulsar_dissect_{family})", "topic")


def reached(run: BoardRun) -> str:
    """What Prometheus' latest samples do not hold yet ("" once they do): every message the
    clients sent and received, B's connection ended, C's refusals and their findings."""
    prom, missing = run.prom, []
    published = by_topic(prom, "messages_published_total")
    delivered = by_topic(prom, "messages_delivered_total")
    for m in (run.held, run.ended):
        topic = m["topic"]
        if published.get(topic, 0) < len(m["sent"]):
            missing.append(f"published {published.get(topic)} of {len(m['sent'])} on {topic}")
        if delivered.get(topic, 0) < len(m["received"]):
            missing.append(f"delivered {delivered.get(topic)} of {len(m['received'])} on {topic}")
    findings = prom.values("sum by (code) (pulsar_dissect_findings_total)", "code")
    if not findings.get("request.unanswered"):
        missing.append(f"findings {findings}")
    held = prom.values("sum by (code) (pulsar_dissect_findings_open)", "code")
    if not held.get(NO_FLOW):
        missing.append(f"findings open {held}")
    unanswered = prom.values('sum(pulsar_dissect_requests_total{outcome="unanswered"})')
    if not unanswered.get(""):
        missing.append("no request unanswered")
    ended = prom.values("sum by (reason) (pulsar_dissect_connections_ended_total)", "reason")
    if not ended.get("fin"):
        missing.append(f"connections ended {ended}")
    told = end_to_end(prom)
    if told != acked(run.held) + acked(run.ended):
        missing.append(f"end-to-end latencies {told}")
    return "; ".join(missing)


def acked(record: dict[str, Any]) -> Counter[tuple[str, str]]:
    """The messages a client's record says it acknowledged, per topic and subscription
    (each ack, individual or cumulative, names one message: a cumulative one comes last,
    after the others were acked one by one)."""
    subscription = {c["index"]: c["subscription"] for c in record["consumers"]}
    ids = {
        (a["topic_name"], subscription[a["consumer"]], _id_key(a["message_id"]))
        for a in record["acks"]
        if a["kind"] != "negative"
    }
    return Counter((topic, sub) for topic, sub, _ in ids)


def end_to_end(prom: PrometheusServer) -> Counter[tuple[str, str]]:
    """The end-to-end latencies observed, per topic and subscription."""
    query = "sum by (topic, subscription) (pulsar_dissect_end_to_end_latency_seconds_count)"
    return Counter(
        {
            (s["metric"]["topic"], s["metric"]["subscription"]): int(float(s["value"][1]))
            for s in prom.query(query)
        }
    )


def test_prometheus_answers_the_clients_records(board_run: BoardRun) -> None:
    prom, held, ended = board_run.prom, board_run.held, board_run.ended
    sent = Counter(s["topic"] for m in (held, ended) for s in m["sent"])
    received = Counter(r["topic_name"] for m in (held, ended) for r in m["received"])
    again = Counter(r["topic_name"] for r in held["received"] if r["redelivery_count"])
    assert again == {board_run.topic: 2}  # the nacked one and the one asked for
    assert (
        by_topic(prom, "messages_published_total")
        == sent
        == {
            board_run.topic: 6,
            ended["topic"]: 12,
        }
    )
    # every reception the application saw was a delivery on the wire; the broker may deliver
    # more than the application took (an ack still in the client's 100 ms grouping when the
    # redelivery was asked; a pulsar-lite duplicate after the last receive)
    delivered = by_topic(prom, "messages_delivered_total")
    assert delivered.keys() == received.keys()
    assert all(delivered[t] >= n for t, n in received.items()), (delivered, received)
    redelivered = by_topic(prom, "messages_redelivered_total")
    assert redelivered.keys() == again.keys() and redelivered[board_run.topic] >= 2
    negative = sum(a["kind"] == "negative" for a in held["acks"])
    asked = negative + len(held["redelivery_requests"])
    assert by_topic(prom, "nacks_total") == {board_run.topic: asked} == {board_run.topic: 2}
    bytes_sent = sum(s["size"] for s in held["sent"])
    assert by_topic(prom, "published_bytes_total")[board_run.topic] == bytes_sent
    ok = prom.values(
        'sum by (command) (pulsar_dissect_requests_total{outcome="success"})', "command"
    )
    made = held["producers_created"] + ended["producers_created"]
    subscribed = held["consumers_created"] + ended["consumers_created"]
    assert ok["PRODUCER"] == made == 2
    assert ok["SUBSCRIBE"] == subscribed == 3
    assert ok["SEND"] == len(held["sent"]) + len(ended["sent"])  # no batching: one SEND each
    assert ok["LOOKUP"] >= made + subscribed  # the client looks a topic up for each
    unanswered = prom.values(
        'sum by (command) (pulsar_dissect_requests_total{outcome="unanswered"})', "command"
    )
    assert unanswered.get("SUBSCRIBE", 0) >= 1 and "TimeOut" in board_run.refused
    # A still holds its producer and consumers; B closed its own
    assert prom.values("sum by (topic) (pulsar_dissect_producers_open)", "topic") == {
        board_run.topic: 1,
        ended["topic"]: 0,
    }
    consumers = prom.values("sum by (subscription) (pulsar_dissect_consumers_open)", "subscription")
    assert consumers == {"sub-board": 1, "sub-held": 1, ended["subscription"]: 0}
    findings = prom.values("sum by (code) (pulsar_dissect_findings_total)", "code")
    assert findings["request.unanswered"] >= 1  # C's subscriptions
    anomalies = prom.values("sum by (code) (pulsar_dissect_anomalies_total)", "code")
    assert anomalies["tcp.midstream_start"] >= 1  # A's stream began before the capture


#: Panels without data in a live run, with live as it is (reported; the assertions below
#: pin them, so that a change shows here): none. Findings count as they are established
#: and end-to-end latencies as each ACK comes (the journeys' join), so every panel has data.
LIVE_GAPS: set[str] = set()


def empty_panels(run: BoardRun, choice: dict[str, str]) -> set[str]:
    """The panels with a query that returns nothing, the variables chosen as `choice`."""
    chosen = {"instance": run.target, **choice}
    return {
        title
        for _, title, query in dashboard.queries()
        if not run.prom.query(substitute(query.expr, chosen))
    }


def test_every_board_query_returns_data_but_the_live_gaps(board_run: BoardRun) -> None:
    prom, run = board_run.prom, board_run
    ended_topic, ended_sub = run.ended["topic"], run.ended["subscription"]
    found = {}
    for name, _, definition in dashboard.VARIABLES:
        found[name] = variable_values(
            prom, definition, {"instance": run.target, "topic": run.topic}
        )
    assert found["instance"] == [run.target]
    assert set(found["topic"]) >= {run.topic, run.held_topic}
    assert found["subscription"] == ["sub-board"]  # the subscriptions of the topic chosen
    # "All", and two topics chosen (Grafana's multi-value regex): A's, and B's ended one
    everything = {"topic": ".*", "subscription": ".*"}
    both = {"topic": f"({run.topic}|{ended_topic})", "subscription": f"(sub-board|{ended_sub})"}
    assert empty_panels(run, everything) == LIVE_GAPS
    assert empty_panels(run, both) == LIVE_GAPS
    # A's finding, established while its connection is open: printed at once (--findings)
    # and, from the same listener, counted once and open (its row waits for the connection's
    # end)
    established = [line for _, line in run.live.lines if line.startswith("finding (now)")]
    assert sum(NO_FLOW in line for line in established) == 1, established
    held = prom.values("sum by (code) (pulsar_dissect_findings_open)", "code")
    assert {code: n for code, n in held.items() if n} == {NO_FLOW: 1}
    assert prom.values("sum by (code) (pulsar_dissect_findings_total)", "code")[NO_FLOW] == 1
    assert not any(NO_FLOW in line for _, line in run.live.lines if line.startswith("finding:"))
    # end-to-end latencies while live runs (A still connected): one per message acked
    assert end_to_end(prom) == acked(run.held) + acked(run.ended)
    assert acked(run.held) == {(run.topic, "sub-board"): 6}
    assert acked(run.ended) == {(ended_topic, ended_sub): 12}
