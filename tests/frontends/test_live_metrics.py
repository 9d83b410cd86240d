"""`pulsar-dissect live --metrics`: real peers on loopback, the endpoint scraped while live runs.

A pulsar-lite broker and the official Python client (with a token, so CONNECT carries auth
data) produce and consume while `live -i lo --metrics 0` runs; a scraper that connects and
never sends a request stays connected the whole time. The client's own record (messages and
bytes sent, messages received, per topic) is the expected value: the endpoint is polled
until its counts reach it (each poll an HTTP answer; a generous deadline bounds a hang), and
parsed with prometheus_client's parsers. Also: the content types of both formats, the health
path, 404, loopback only by default, no payload, key, property or token text on the
endpoint; bad addresses and ports in use (one line, exit 2, nothing created); `-j 2`: the
parent's one endpoint merges the workers' counts. Needs capture permission (root or
CAP_NET_RAW) for the runs that capture. Without capturing: a sample capture replayed
through live's session gives the offline read's metrics, and counts the file's packets;
replayed one packet at a time, its end-to-end latencies are counted as their ACKs come
(the journeys of the offline read acked so far), long before the run ends; a crafted one
shows a finding counted and open from when it is established.
"""

from __future__ import annotations

import io
import json
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families as text_families

from dissector.capture import open_capture
from dissector.frontends.live.options import LiveOptions
from dissector.frontends.live.session import Session
from dissector.metrics.families import BY_NAME, GAUGE, HISTOGRAM
from dissector.metrics.store import Snapshot
from dissector.read.metrics import metrics_of
from dissector.read.tables import read_tables
from tests.support.live import FakeSource, Live, live_argv
from tests.support.peers import PulsarLite, run_scenario
from tests.support.scenes import no_flow as no_flow_scene
from tests.support.scenes import us
from tests.support.scrape import Samples, fetch, media, samples

P = "pulsar_dissect_"
C2B, B2C = "client_to_broker", "broker_to_client"
TOKEN = "tok-metrics-SECRET-4b1d"  # the client's token: never on the endpoint
PROMETHEUS_ACCEPT = (  # what Prometheus sends
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
DEADLINE = 60.0  # bounds a hang (a slow shared machine), never the expected duration


# --------------------------------------------------------------------------- helpers


def value(got: Samples, name: str, **labels: str) -> float:
    return got.get((P + name, frozenset(labels.items())), 0.0)


def metrics_url(live: Live) -> str:
    found = re.search(r", metrics on (http://\S+/metrics)$", live.stderr.splitlines()[0])
    assert found, live.stderr
    return found[1]


def scrape_until(url: str, done: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until `done` holds of what the endpoint says (the session publishes twice a
    second); DEADLINE only bounds a hang."""
    deadline = time.monotonic() + DEADLINE
    while True:
        got = samples(fetch(url)[2])
        if done(got):
            return got
        assert time.monotonic() < deadline, f"never: {what}; last scrape: {got}"
        time.sleep(0.05)


def reached(got: Samples, manifests: list[dict[str, Any]]) -> bool:
    """Whether the endpoint shows every message each client sent and received (per topic)
    and every connection ended."""
    for m in manifests:
        topic = m["topic"]
        if value(got, "messages_published_total", topic=topic) < len(m["sent"]):
            return False
        if value(got, "messages_delivered_total", topic=topic) < len(m["received"]):
            return False
    ended = value(got, "connections_ended_total", reason="fin")
    return ended >= len(manifests) and value(got, "connections_open") == 0


def check_record(got: Samples, manifests: list[dict[str, Any]]) -> None:
    """The endpoint's counts are the clients' records (no batching: a SEND is one message)."""
    sent = sum(len(m["sent"]) for m in manifests)
    for m in manifests:
        topic, n = m["topic"], len(m["sent"])
        assert value(got, "messages_published_total", topic=topic) == n
        size = sum(s["size"] for s in m["sent"])
        assert value(got, "published_bytes_total", topic=topic) == size
        assert value(got, "publish_latency_seconds_count", topic=topic) == n
        assert value(got, "publish_latency_seconds_bucket", topic=topic, le="+Inf") == n
        # every reception the application saw was a delivery on the wire (pulsar-lite may
        # deliver an entry twice: the record keeps such duplicates)
        received = len(m["received"])
        assert value(got, "messages_delivered_total", topic=topic) >= received
        assert value(got, "delivered_bytes_total", topic=topic) >= sum(
            r["size"] for r in m["received"]
        )
        assert value(got, "producers_open", topic=topic) == 0  # the client closed them
        sub = m["subscription"]
        assert value(got, "consumers_open", topic=topic, subscription=sub) == 0
    assert value(got, "frames_total", command="SEND", direction=C2B) == sent
    assert value(got, "frames_total", command="SEND_RECEIPT", direction=B2C) == sent
    assert value(got, "requests_total", command="SEND", outcome="success") == sent
    assert value(got, "request_duration_seconds_count", command="SEND", outcome="success") == sent
    assert value(got, "frames_total", command="CONNECT", direction=C2B) == len(manifests)
    assert value(got, "connections_opened_total") == len(manifests)
    assert value(got, "connections_ended_total", reason="fin") == len(manifests)
    assert value(got, "packets_total") > 0 and value(got, "captured_bytes_total") > 0


# --------------------------------------------------------------------------- one run, -j 1


@dataclass
class MetricsRun:
    url: str
    manifest: dict[str, Any]
    scraped: Samples  # once the counts reached the client's record
    during: list[tuple[int, str, bytes]]  # the scrapes answered while the silent one hung
    answers: dict[str, tuple[int, str, bytes]]  # path or Accept -> the answer
    refused: dict[str, bool]  # another loopback address -> the connection was refused
    rc: int
    stderr: str


@pytest.fixture(scope="module")
def metrics_run() -> Iterator[MetricsRun]:
    import pulsar

    with PulsarLite() as broker:
        live = Live(*("-i", "lo", "--port", str(broker.port), "--metrics", "0"))
        try:
            url = metrics_url(live)
            port = int(url.rsplit(":", 1)[1].split("/")[0])
            # a scraper that connects and never sends its request, open the whole time
            silent = socket.create_connection(("127.0.0.1", port))
            try:
                auth = {"authentication": pulsar.AuthenticationToken(TOKEN)}
                manifest = run_scenario(
                    broker.url, messages=12, batching=False, client_options=auth
                )
                scraped = scrape_until(url, lambda got: reached(got, [manifest]), "the record")
                during = [fetch(url), fetch(url, PROMETHEUS_ACCEPT)]
            finally:
                silent.close()
            base = url.removesuffix("/metrics")
            answers = {
                "openmetrics": fetch(url, PROMETHEUS_ACCEPT),
                "text": fetch(url, "text/plain"),
                "none": fetch(url),
                **{path: fetch(base + path) for path in ("/health", "/-/healthy", "/", "/x")},
            }
            refused = {host: _refused(host, port) for host in ("127.0.0.2", "::1")}
        finally:
            rc = live.stop(signal.SIGINT)
    yield MetricsRun(url, manifest, scraped, during, answers, refused, rc, live.stderr)


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=DEADLINE).close()
    except ConnectionRefusedError:
        return True
    return False


def test_the_endpoint_counts_what_the_client_did(metrics_run: MetricsRun) -> None:
    check_record(metrics_run.scraped, [metrics_run.manifest])
    assert metrics_run.rc == 0, metrics_run.stderr


def test_the_listening_line_says_where_and_the_run_ends_cleanly(metrics_run: MetricsRun) -> None:
    lines = metrics_run.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in metrics_run.stderr, lines
    assert lines[0].startswith("pulsar-dissect: listening on lo, ")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", metrics_run.url)
    assert lines[1].startswith("pulsar-dissect: ") and "packets captured" in lines[1]


def test_a_silent_scraper_costs_the_dissector_nothing(metrics_run: MetricsRun) -> None:
    """While a scraper sat connected without a word, the counts reached the client's record
    and other scrapes were answered."""
    assert [status for status, _, _ in metrics_run.during] == [200, 200]
    for _, _, body in metrics_run.during:
        assert (
            value(samples(body, b"# EOF" in body), "frames_total", command="SEND", direction=C2B)
            == 12
        )


def test_openmetrics_for_prometheus_text_otherwise(metrics_run: MetricsRun) -> None:
    status, content_type, body = metrics_run.answers["openmetrics"]
    kind, params = media(content_type)
    assert status == 200 and kind == "application/openmetrics-text", content_type
    assert params["version"] == "1.0.0" and params["charset"] == "utf-8"
    assert body.endswith(b"# EOF\n")
    check_record(samples(body, openmetrics=True), [metrics_run.manifest])
    for accept in ("text", "none"):
        status, content_type, body = metrics_run.answers[accept]
        kind, params = media(content_type)
        assert status == 200 and kind == "text/plain", content_type
        assert params["version"] == "0.0.4" and params["charset"] == "utf-8"
        check_record(samples(body), [metrics_run.manifest])


def test_health_and_404(metrics_run: MetricsRun) -> None:
    assert metrics_run.answers["/health"][::2] == (200, b"ok\n")
    assert metrics_run.answers["/-/healthy"][::2] == (200, b"ok\n")
    assert metrics_run.answers["/"][0] == metrics_run.answers["/x"][0] == 404


def test_loopback_only_by_default(metrics_run: MetricsRun) -> None:
    """Bound on 127.0.0.1 only: another loopback address of this machine, and IPv6's, refuse."""
    assert metrics_run.refused == {"127.0.0.2": True, "::1": True}


def test_no_payload_key_property_or_token_on_the_endpoint(metrics_run: MetricsRun) -> None:
    body = metrics_run.answers["text"][2].decode() + metrics_run.answers["openmetrics"][2].decode()
    assert TOKEN not in body and "tok-" not in body
    for sent in metrics_run.manifest["sent"]:
        assert f"message-{sent['index']}:" not in body  # the payloads' text
        assert f'"{sent["key"]}"' not in body and sent["key"] not in body
        for prop in sent["properties"].values():
            assert f'"{prop}"' not in body
    labels = {
        name
        for family in text_families(metrics_run.answers["text"][2].decode())
        for s in family.samples
        for name in s.labels
    }
    assert labels <= {
        "command",
        "direction",
        "outcome",
        "topic",
        "subscription",
        "reason",
        "code",
        "severity",
        "label",
        "le",
    }


# --------------------------------------------------------------------------- -j 2


def test_two_processes_serve_one_endpoint_with_their_counts_merged() -> None:
    """Three clients, each its own connection: the kernel shares them between the two
    processes by flow; the one endpoint shows the three records summed."""
    with PulsarLite() as broker:
        live = Live(*("-i", "lo", "--port", str(broker.port), "-j", "2", "--metrics", "0"))
        try:
            url = metrics_url(live)
            assert "2 processes (by flow), metrics on http://127.0.0.1:" in live.stderr
            manifests = [run_scenario(broker.url, messages=6, batching=False) for _ in range(3)]
            got = scrape_until(url, lambda got: reached(got, manifests), "the three records")
        finally:
            rc = live.stop(signal.SIGINT)
    assert rc == 0, live.stderr
    check_record(got, manifests)


# --------------------------------------------------------------------------- replayed

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"


def _plain(snapshot: Snapshot, name: str) -> dict[tuple[str, ...], Any]:
    """A family's series, a histogram's as (count, buckets); a gauge's at 0 left out (a
    gauge shown while its consumers were open goes back to 0: absent says the same)."""
    series = snapshot.series.get(name, {})
    kind = BY_NAME[name].kind
    if kind == HISTOGRAM:
        return {k: (h.count, h.buckets.tolist()) for k, h in series.items()}
    return {k: v for k, v in series.items() if kind != GAUGE or v != 0}


@pytest.mark.parametrize("sample", ["produce_consume", "acks", "batching", "multi_producer"])
def test_a_replayed_capture_gives_the_metrics_of_an_offline_read(sample: str) -> None:
    """The packets of a sample fed to live's session in batches, a snapshot published after
    each: counters never go back, and the last is the offline read's (`metrics_of`), with
    the file's packets and bytes counted; the client's record of the sample agrees."""
    path = PCAPS / f"{sample}.pcap"
    with open_capture(path) as reader:
        pkts = [(p.ts, p.data) for p in reader]
    published: list[Snapshot] = []
    opts = LiveOptions(metrics=("127.0.0.1", 0))
    session = Session(
        opts, FakeSource(pkts, 1), io.StringIO(), io.StringIO(), publish=published.append
    )
    for start in range(0, len(pkts), 7):
        session.packets(pkts[start : start + 7])
        session.publish()
    session.close()
    counts = [s.value(P + "frames_total", ("SEND", C2B)) for s in published]
    assert counts == sorted(counts), counts  # publishing as it went, never going back
    last, offline = published[-1], metrics_of(path)
    assert last.value(P + "packets_total") == len(pkts)
    assert last.value(P + "captured_bytes_total") == sum(len(data) for _, data in pkts)
    for family, _ in last.families():
        if family.name not in (P + "packets_total", P + "captured_bytes_total"):
            assert _plain(last, family.name) == _plain(offline, family.name), family.name
    manifest = json.loads((PCAPS / f"{sample}.manifest.json").read_text())
    for topic in {s["topic"] for s in manifest["sent"]}:
        sent = sum(1 for s in manifest["sent"] if s["topic"] == topic)
        assert last.value(P + "messages_published_total", (topic,)) == sent, topic


#: Samples whose client acked each message it was sent once (the record's `acks`: each
#: names one message), and the one with batch-index, cumulative and redelivered acks.
ACKED_ALL = ("produce_consume", "batching", "multi_producer")
E2E = P + "end_to_end_latency_seconds"


@pytest.mark.parametrize("sample", [*ACKED_ALL, "acks"])
def test_a_replayed_capture_counts_end_to_end_latencies_as_acks_come(sample: str) -> None:
    """Live's session fed a sample one packet at a time, a snapshot published after each:
    the end-to-end latencies are counted as their ACKs come, not at the end of the run.
    After each packet, per topic and subscription: the journeys of the offline read whose
    ACK came in the packets fed so far, with their end_to_end_us (count and sum). Before
    `close`, every message the client's record says it acked is counted; `close` adds
    none."""
    path = PCAPS / f"{sample}.pcap"
    with open_capture(path) as reader:
        pkts = [(p.ts, p.data) for p in reader]
    journeys = read_tables(path, tables=["journeys"])["journeys"].to_pylist()
    acked = [j for j in journeys if j["end_to_end_us"] is not None]
    published: list[Snapshot] = []
    session = Session(
        LiveOptions(metrics=("127.0.0.1", 0)),
        FakeSource(pkts, 1),
        io.StringIO(),
        io.StringIO(),
        publish=published.append,
    )
    for n, pkt in enumerate(pkts, 1):
        session.packets([pkt])
        session.publish()
        expected: dict[tuple[str, str], list[int]] = {}
        for j in acked:
            if j["acked_packet"] <= n:
                expected.setdefault((j["topic"], j["subscription"]), []).append(j["end_to_end_us"])
        series = published[-1].series[E2E]
        assert {k: h.count for k, h in series.items()} == {
            k: len(v) for k, v in expected.items()
        }, n
        for key, values in expected.items():
            assert series[key].sum == pytest.approx(sum(values) / 1e6), (n, key)
    before_close = published[-1].series[E2E]
    session.close()
    assert {k: h.count for k, h in published[-1].series[E2E].items()} == {
        k: h.count for k, h in before_close.items()
    }
    assert sum(h.count for h in before_close.values()) == len(acked) > 0
    if sample in ACKED_ALL:  # the client's record: each message acked once
        manifest = json.loads((PCAPS / f"{sample}.manifest.json").read_text())
        subscription = {c["index"]: c["subscription"] for c in manifest["consumers"]}
        record: dict[tuple[str, str], int] = {}
        for a in manifest["acks"]:  # produce_consume's last is cumulative: itself alone
            key = (a["topic_name"], subscription[a["consumer"]])
            record[key] = record.get(key, 0) + 1
        assert {k: h.count for k, h in before_close.items()} == record
        assert sum(record.values()) == len(manifest["sent"])


@pytest.mark.parametrize("printed", [True, False], ids=["findings", "metrics-only"])
def test_a_finding_shows_while_its_connection_is_open(printed: bool, tmp_path: Path) -> None:
    """A crafted capture replayed through live's session, a snapshot published after each
    packet: a consumer that sends no FLOW for the flow wait (10 s) is counted and open from
    the packet where `--findings` prints it as established (the PING at 20 s), before its
    row; the connection's FIN (45 s) closes it and its row does not count it again. With or
    without --findings (one listener told, or both), the same snapshots; the last is the
    offline read's."""
    path = no_flow_scene(close=45.0).write(tmp_path / "no_flow.pcap")
    with open_capture(path) as reader:
        pkts = [(p.ts, p.data) for p in reader]
    published: list[Snapshot] = []
    out = io.StringIO()
    opts = LiveOptions(metrics=("127.0.0.1", 0), findings=printed)
    session = Session(opts, FakeSource(pkts, 1), out, io.StringIO(), publish=published.append)
    lines: list[str] = []  # what was printed when each snapshot was published
    for pkt in pkts:
        session.packets([pkt])
        session.publish()
        lines.append(out.getvalue())
    session.close()
    no_flow = ("flow.no_flow_after_subscribe", "warning")
    shown = [
        (s.series[P + "findings_total"].get(no_flow, 0), s.series[P + "findings_open"].get(no_flow))
        for s in published
    ]
    first = next(i for i, (total, _) in enumerate(shown) if total)
    assert pkts[first][0] == us(20.0)  # the PING after the wait
    assert shown[first] == (1, 1) and shown[-1] == (1, 0)
    assert all(total == 1 for total, _ in shown[first:])  # counted once
    fin = next(i for i in range(first, len(pkts)) if pkts[i][0] == us(45.0))
    assert all(opened == 1 for _, opened in shown[first:fin])  # open until the FIN
    if printed:
        assert "finding (now): WARNING flow.no_flow_after_subscribe" in lines[first]
        assert "finding (now)" not in lines[first - 1] and "finding:" not in lines[first]
        assert out.getvalue().count("finding: WARNING flow.no_flow_after_subscribe") == 1
    else:  # the frames' text view only
        assert "finding" not in out.getvalue()
    offline = metrics_of(path)
    for family in ("findings_total", "findings_open"):
        assert published[-1].series[P + family] == offline.series[P + family], family


# --------------------------------------------------------------------------- refusals


def _one_line_error(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("nonsense", "metrics address 'nonsense': the port must be a number 0-65535"),
        ("::1:9464", "put an IPv6 address in brackets: [::1]:9464"),
        ("127.0.0.1:65536", "the port must be a number 0-65535"),
    ],
)
def test_a_bad_address_is_one_line(address: str, message: str, tmp_path: Path) -> None:
    line = _one_line_error(live_argv("-i", "lo", "--metrics", address, "-o", str(tmp_path / "t")))
    assert line.startswith("pulsar-dissect: metrics address ") and message in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_port_in_use_is_one_line_and_nothing_started(jobs: str, tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = live_argv(
            *("-i", "lo", "-j", jobs, "--metrics", str(port), "-o", str(tmp_path / "t")),
            *(["-w", str(tmp_path / "x.pcap")] if jobs == "1" else []),
        )
        line = _one_line_error(argv)
    assert (
        line == f"pulsar-dissect: cannot serve metrics on 127.0.0.1:{port}: address already in use"
    )
    assert list(tmp_path.iterdir()) == []  # no pcap, no Parquet directory


def test_an_address_not_of_this_machine_is_one_line() -> None:
    line = _one_line_error(live_argv("-i", "lo", "--metrics", "198.51.100.7:9464"))
    where = "198.51.100.7:9464"  # TEST-NET-2: bound, never sent to
    assert (
        line == f"pulsar-dissect: cannot serve metrics on {where}: cannot assign requested address"
    )
