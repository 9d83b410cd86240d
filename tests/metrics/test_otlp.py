"""OpenTelemetry metrics: the OTLP JSON export, the file of lines and the OTLP/HTTP push.

Every request is parsed by opentelemetry-proto's own ExportMetricsServiceRequest through
protobuf's JSON parser with unknown fields refused, as a collector's OTLP/HTTP receiver
parses it. Expected values come from the samples' client records (pcaps/*.manifest.json:
the messages each topic was sent and received), from hand-filled stores with latencies
bucketed here by the bounds' definition, and from the semantic conventions' own page
(open-telemetry/semantic-conventions docs/messaging/messaging-metrics.md, 1.28.0 to 1.44.0).
The collector is a test receiver (http.server on loopback) that answers as told: 200, 500,
or never.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from dissector.capture import open_capture
from dissector.errors import OutputError, UsageError
from dissector.frontends.live.loop import run as live_run
from dissector.frontends.live.options import LiveOptions
from dissector.frontends.live.session import Session
from dissector.frontends.otlp_metrics import OtlpMetricsOut
from dissector.metrics import otlp
from dissector.metrics.families import FAMILIES, LATENCY_BUCKETS, OTHER, PREFIX
from dissector.metrics.push import OtlpPush, endpoint_url
from dissector.metrics.store import MetricStore
from tests.support.live import FakeSource, Live, require_capture
from tests.support.peers import PulsarLite, run_scenario

ROOT = Path(__file__).resolve().parents[2]
PCAPS = ROOT / "pcaps"
#: Samples whose client record counts what the wire shows (seek: the client drops a
#: message the broker delivered before the seek took effect; it is not one it consumed).
SAMPLES = ("produce_consume", "multi_producer", "batching", "partitioned", "chunked")
SUM, GAUGE, HISTOGRAM = "sum", "gauge", "histogram"
CUMULATIVE = 2  # AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


# --------------------------------------------------------------------------- helpers


def parse(body: bytes | str) -> dict[str, Any]:
    """The request as a collector's receiver parses it (unknown fields refused), back to
    a dict of the proto's own JSON names."""
    message = json_format.Parse(body, ExportMetricsServiceRequest(), ignore_unknown_fields=False)
    return json_format.MessageToDict(message)


def metrics_of(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (resource,) = request["resourceMetrics"]
    (scope,) = resource["scopeMetrics"]
    return {m["name"]: m for m in scope.get("metrics", [])}  # (an empty list is left out)


def attrs(point: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for kv in point.get("attributes", []):
        (value,) = kv["value"].values()
        out[kv["key"]] = value
    return out


def points(metric: dict[str, Any]) -> list[dict[str, Any]]:
    kind = next(k for k in (SUM, GAUGE, HISTOGRAM) if k in metric)
    result: list[dict[str, Any]] = metric[kind]["dataPoints"]
    return result


def per_topic(metric: dict[str, Any]) -> dict[str, int]:
    return {attrs(p)["messaging.destination.name"]: int(p["asInt"]) for p in points(metric)}


def manifest(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((PCAPS / f"{name}.manifest.json").read_text())
    return result


def capture(name: str) -> Path:
    return next(PCAPS.glob(f"{name}.pcap*"))


def client_counts(record: dict[str, Any]) -> tuple[Counter[str], Counter[str]]:
    """Messages the client sent (acknowledged by the broker) and received, per topic."""
    sent = Counter(
        e.get("partition_topic") or e["topic"] for e in record["sent"] if e["result"] == "Ok"
    )
    received = Counter(e["topic_name"] for e in record["received"])
    return sent, received


def bucket_counts(seconds: list[float]) -> list[int]:
    """OTLP's bucket counts by its definition: bucket i holds bounds[i-1] < x <= bounds[i],
    the last one x > the last bound."""
    counts = [0] * (len(LATENCY_BUCKETS) + 1)
    for x in seconds:
        counts[next((i for i, b in enumerate(LATENCY_BUCKETS) if x <= b), -1)] += 1
    return counts


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,  # a safety net only: a run waits for nothing time-based
        cwd=ROOT,
    )


# --------------------------------------------------------------------------- the collector


@dataclass
class Collector:
    """A test OTLP/HTTP receiver: each request's (path, content type, body) is kept, and
    answered with the next of `answers` (an HTTP status, or "hang": never), then 200."""

    answers: list[int | str] = field(default_factory=list)
    received: queue.Queue[tuple[str, str, bytes]] = field(default_factory=queue.Queue)
    release: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    headers: list[dict[str, str]] = field(default_factory=list)  # of each request
    url: str = ""

    def bodies(self) -> list[tuple[str, str, bytes]]:
        out = []
        while not self.received.empty():
            out.append(self.received.get_nowait())
        return out


@contextlib.contextmanager
def collector(*answers: int | str) -> Iterator[Collector]:
    state = Collector(list(answers))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            state.received.put((self.path, self.headers["Content-Type"], body))
            with lock:
                answer = state.answers.pop(0) if state.answers else 200
            state.entered.set()
            if answer == "hang":
                state.release.wait()
                return
            assert isinstance(answer, int)
            self.send_response(answer)
            reply = b"{}" if answer == 200 else b"refused"
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- the mapping


def filled_store() -> tuple[MetricStore, dict[str, list[float]]]:
    """A store filled by hand, and the latencies (seconds) it was given per series."""
    store = MetricStore(start_us=1_700_000_000_000_000)
    lat = {
        "t1": [0.00004, 0.00005, 0.0003, 0.002, 0.002, 75.0],
        "send-error": [0.5],
        "ack": [0.0001, 0.0002],
        "lookup": [0.001],
    }

    def us(xs: list[float]) -> np.ndarray:
        return np.array([round(x * 1e6) for x in xs], dtype=np.int64)

    store.inc(PREFIX + "packets_total", (), 120)
    store.inc(PREFIX + "captured_bytes_total", (), 54321)
    store.inc(PREFIX + "messages_published_total", ("t1",), 6)
    store.inc(PREFIX + "messages_delivered_total", ("t1",), 5)
    store.set(PREFIX + "connections_open", (), 3)
    store.set(PREFIX + "consumer_permits", ("t1", "s1"), 997)
    store.observe(PREFIX + "publish_latency_seconds", ("t1",), us(lat["t1"]))
    store.observe(PREFIX + "request_duration_seconds", ("SEND", "success"), us(lat["t1"]))
    store.observe(PREFIX + "request_duration_seconds", ("SEND", "error"), us(lat["send-error"]))
    store.observe(PREFIX + "request_duration_seconds", ("ACK", "success"), us(lat["ack"]))
    store.observe(PREFIX + "request_duration_seconds", ("LOOKUP", "success"), us(lat["lookup"]))
    return store, lat


def test_a_snapshot_is_a_request_of_the_otlp_json_mapping() -> None:
    store, lat = filled_store()
    snapshot = store.snapshot(1_700_000_002_500_000)
    line = otlp.export_line(snapshot, otlp.resource_attributes(captures=["a.pcap"]), "9.9")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    raw = json.loads(line)
    request = parse(line)
    (resource,) = request["resourceMetrics"]
    assert attrs(resource["resource"]) == {
        "service.name": "pulsar-dissector",
        "pulsar_dissector.captures": {"values": [{"stringValue": "a.pcap"}]},
    }
    (scope,) = resource["scopeMetrics"]
    assert scope["scope"] == {"name": "pulsar-dissector", "version": "9.9"}
    assert scope["schemaUrl"] == "https://opentelemetry.io/schemas/1.28.0"
    metrics = metrics_of(request)
    # every family with series, under its own name, kind and unit
    filled = {name for name, series in snapshot.series.items() if series}
    assert {n for n in metrics if n.startswith(PREFIX)} == filled
    packets = metrics[PREFIX + "packets_total"]
    assert packets["sum"]["isMonotonic"] is True
    assert packets["sum"]["aggregationTemporality"] == "AGGREGATION_TEMPORALITY_CUMULATIVE"
    (point,) = points(packets)
    assert point == {
        "startTimeUnixNano": "1700000000000000000",
        "timeUnixNano": "1700000002500000000",
        "asInt": "120",
    }
    assert metrics[PREFIX + "captured_bytes_total"]["unit"] == "By"
    (gauge,) = points(metrics[PREFIX + "consumer_permits"])
    assert attrs(gauge) == {"topic": "t1", "subscription": "s1"} and gauge["asInt"] == "997"
    assert "startTimeUnixNano" not in gauge  # a gauge is of its moment
    hist = metrics[PREFIX + "publish_latency_seconds"]
    assert hist["unit"] == "s"
    assert hist["histogram"]["aggregationTemporality"] == "AGGREGATION_TEMPORALITY_CUMULATIVE"
    (point,) = points(hist)
    assert point["explicitBounds"] == list(LATENCY_BUCKETS)
    assert [int(n) for n in point["bucketCounts"]] == bucket_counts(lat["t1"])
    assert int(point["count"]) == len(lat["t1"])
    assert point["sum"] == pytest.approx(sum(lat["t1"]))
    # the wire form: 64-bit integers as strings, enums as numbers, camelCase names
    raw_metrics = {m["name"]: m for m in raw["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    raw_sum = raw_metrics[PREFIX + "packets_total"]["sum"]
    assert raw_sum["aggregationTemporality"] == CUMULATIVE
    assert raw_sum["dataPoints"][0]["asInt"] == "120"
    raw_hist = raw_metrics[PREFIX + "publish_latency_seconds"]["histogram"]["dataPoints"][0]
    assert all(isinstance(n, str) for n in raw_hist["bucketCounts"])
    assert isinstance(raw_hist["count"], str) and isinstance(raw_hist["startTimeUnixNano"], str)


def test_the_messaging_semantic_conventions_metrics() -> None:
    store, lat = filled_store()
    store.inc(PREFIX + "messages_published_total", ("t2",), 2)
    store.observe(PREFIX + "publish_latency_seconds", (OTHER,), np.array([40], dtype=np.int64))
    metrics = metrics_of(parse(otlp.export_line(store.snapshot(), {})))
    # names, instruments and units as the conventions' page has them
    duration = metrics["messaging.client.operation.duration"]
    assert duration["unit"] == "s" and "histogram" in duration
    for name in ("messaging.client.sent.messages", "messaging.client.consumed.messages"):
        assert metrics[name]["unit"] == "{message}"
        assert metrics[name]["sum"]["isMonotonic"] is True
        assert metrics[name]["sum"]["aggregationTemporality"] == (
            "AGGREGATION_TEMPORALITY_CUMULATIVE"
        )
    pulsar = {"messaging.system": "pulsar"}
    got = {
        tuple(sorted(attrs(p).items())): ([int(n) for n in p["bucketCounts"]], int(p["count"]))
        for p in points(duration)
    }
    send = {**pulsar, "messaging.operation.name": "send", "messaging.operation.type": "send"}
    ack = {**pulsar, "messaging.operation.name": "ack", "messaging.operation.type": "settle"}
    expected = {
        # answered SENDs: per topic (publish latency); a folded topic names none
        tuple(sorted({**send, "messaging.destination.name": "t1"}.items())): (
            bucket_counts(lat["t1"]),
            6,
        ),
        tuple(sorted(send.items())): (bucket_counts([0.00004]), 1),
        # refused SENDs: failed, with the conventions' fallback error type
        tuple(sorted({**send, "error.type": "_OTHER"}.items())): (
            bucket_counts(lat["send-error"]),
            1,
        ),
        tuple(sorted(ack.items())): (bucket_counts(lat["ack"]), 2),
    }  # LOOKUP is no messaging operation: absent
    assert got == expected
    sent = metrics["messaging.client.sent.messages"]
    assert [attrs(p) for p in points(sent)] == [
        {**pulsar, "messaging.operation.name": "send", "messaging.destination.name": t}
        for t in ("t1", "t2")
    ]
    assert per_topic(sent) == {"t1": 6, "t2": 2}
    consumed = metrics["messaging.client.consumed.messages"]
    assert [attrs(p) for p in points(consumed)] == [
        {**pulsar, "messaging.operation.name": "receive", "messaging.destination.name": "t1"}
    ]
    assert per_topic(consumed) == {"t1": 5}


def test_every_family_kind_has_its_otlp_kind() -> None:
    store = MetricStore(1)
    for family in FAMILIES:  # one series each
        labels = tuple(f"v{i}" for i in range(len(family.labels)))
        if family.kind == "counter":
            store.inc(family.name, labels, 2)
        elif family.kind == "gauge":
            store.set(family.name, labels, 1.5)
        else:
            store.observe(family.name, labels, np.array([10], dtype=np.int64))
    metrics = metrics_of(parse(otlp.export_line(store.snapshot(2), {})))
    kinds = {"counter": SUM, "gauge": GAUGE, "histogram": HISTOGRAM}
    for family in FAMILIES:
        metric = metrics[family.name]
        assert kinds[family.kind] in metric, family.name
        assert metric["description"] == family.help
        assert {"s": "seconds", "By": "bytes"}.get(metric.get("unit", ""), "") == family.unit
    (point,) = points(metrics[PREFIX + "connections_open"])
    assert point["asDouble"] == 1.5


# --------------------------------------------------------------------------- offline


@pytest.mark.parametrize("name", SAMPLES)
def test_summary_format_otlp_counts_what_the_client_sent_and_received(name: str) -> None:
    record = manifest(name)
    run = cli(
        "summary", "--format", "otlp", "--port", str(record["broker_port"]), str(capture(name))
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("\n") == 1  # one request for the read
    request = parse(run.stdout)
    metrics = metrics_of(request)
    sent, received = client_counts(record)
    assert per_topic(metrics["messaging.client.sent.messages"]) == dict(sent)
    assert per_topic(metrics["messaging.client.consumed.messages"]) == dict(received)
    durations = points(metrics["messaging.client.operation.duration"])
    sends = {
        attrs(p)["messaging.destination.name"]: int(p["count"])
        for p in durations
        if attrs(p)["messaging.operation.name"] == "send"
    }
    # every SEND the client saw acknowledged was answered on the wire: one duration each
    # (a batch is one SEND for its messages, a chunked message one SEND per chunk)
    assert set(sends) == set(sent) and all(sends[t] >= 1 for t in sent)
    options = [p["options"] for p in record["producers"]]
    if not any(o.get("batching_enabled") or o.get("chunking_enabled") for o in options):
        assert sends == dict(sent)
    (resource,) = request["resourceMetrics"]
    assert attrs(resource["resource"])["pulsar_dissector.captures"] == {
        "values": [{"stringValue": str(capture(name))}]
    }


def test_summary_pushes_one_request_to_the_collector() -> None:
    record = manifest("multi_producer")
    with collector() as sink:
        run = cli(
            "summary",
            "--otlp-endpoint",
            sink.url,
            "--port",
            str(record["broker_port"]),
            str(capture("multi_producer")),
        )
        got = sink.bodies()
    assert run.returncode == 0 and run.stderr == "", run.stderr
    # the summary is printed as ever (made of the same read as the metrics)
    plain = cli("summary", "--port", str(record["broker_port"]), str(capture("multi_producer")))
    assert run.stdout == plain.stdout and "SEND" in run.stdout
    ((path, content_type, body),) = got
    assert (path, content_type) == ("/v1/metrics", "application/json")
    metrics = metrics_of(parse(body))
    sent, received = client_counts(record)
    assert per_topic(metrics["messaging.client.sent.messages"]) == dict(sent)
    assert per_topic(metrics["messaging.client.consumed.messages"]) == dict(received)


def test_openmetrics_beside_a_push() -> None:
    with collector() as sink:
        run = cli(
            "summary", "--format", "openmetrics", "--otlp-endpoint", sink.url, str(capture("acks"))
        )
        ((_, _, body),) = sink.bodies()
    assert run.returncode == 0 and run.stdout.endswith("# EOF\n"), run.stderr
    sent, _ = client_counts(manifest("acks"))
    assert per_topic(metrics_of(parse(body))["messaging.client.sent.messages"]) == dict(sent)


def test_headers_and_gzip_for_a_collector_that_wants_them() -> None:
    token = "Bearer s3cr3t-t0ken"
    with collector(401) as sink:
        run = cli(
            *("summary", "--format", "otlp", "--otlp-endpoint", sink.url),
            *("--otlp-header", f"Authorization={token}", "--otlp-header", "X-Scope-OrgID=a=b"),
            *("--otlp-compression", "gzip", str(capture("acks"))),
        )
        ((_, _, body),) = sink.bodies()
    (headers,) = sink.headers
    assert headers["authorization"] == token and headers["x-scope-orgid"] == "a=b"
    assert headers["content-encoding"] == "gzip"
    assert parse(body) == parse(run.stdout)  # the line printed is the request pushed
    (line,) = run.stderr.splitlines()  # refused: one line, the token never in it
    assert "HTTP 401" in line and "s3cr3t" not in run.stderr
    bad = cli("summary", "--otlp-endpoint", sink.url, "--otlp-header", "Authorization", "x")
    assert bad.returncode == 2 and "--otlp-header" in bad.stderr


def test_a_collector_that_refuses_costs_one_warning_line() -> None:
    with collector(500) as sink:
        run = cli("summary", "--otlp-endpoint", sink.url + "/v1/metrics", str(capture("acks")))
        assert len(sink.bodies()) == 1
    assert run.returncode == 0
    (line,) = run.stderr.splitlines()
    assert line.startswith("pulsar-dissect: OTLP push to ") and "HTTP 500" in line, line
    assert "SEND" in run.stdout


def test_a_collector_that_never_answers_costs_at_most_the_timeout() -> None:
    with collector("hang") as sink:
        run = cli(
            "summary",
            "--format",
            "json",
            "--otlp-endpoint",
            sink.url,
            "--otlp-timeout",
            "0.5",
            str(capture("acks")),
            timeout=60,  # without the bound the run would never end: the receiver hangs
        )
        assert sink.entered.is_set()
    assert run.returncode == 0
    (line,) = run.stderr.splitlines()
    assert "OTLP push to" in line and ("timed out" in line or "within 0.5 s" in line), line
    assert json.loads(run.stdout)["frames"] > 0


@pytest.mark.parametrize(
    "url", ["localhost:4318", "ftp://127.0.0.1/x", "http://", "http://127.0.0.1:99999", "x"]
)
def test_a_bad_endpoint_is_one_line_and_exit_2(url: str) -> None:
    run = cli("summary", "--otlp-endpoint", url, str(capture("acks")))
    assert run.returncode == 2 and run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert "--otlp-endpoint" in line and "Traceback" not in run.stderr


def test_endpoint_urls() -> None:
    assert endpoint_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/metrics"
    assert endpoint_url("http://h:4318/") == "http://h:4318/v1/metrics"
    assert endpoint_url("https://h/otlp") == "https://h/otlp/v1/metrics"
    assert endpoint_url("https://h/otlp/v1/metrics") == "https://h/otlp/v1/metrics"
    with pytest.raises(UsageError):
        endpoint_url("127.0.0.1:4318")


# --------------------------------------------------------------------------- the push


def test_the_push_drops_the_oldest_and_warns_once_per_run_of_failures() -> None:
    err = io.StringIO()
    with collector("hang") as sink:
        push = OtlpPush(sink.url, err, queue=3, timeout=30)
        push.submit(b'{"n":0}')
        assert sink.entered.wait(30)  # the first is in flight, held by the receiver
        for n in range(1, 6):
            push.submit(b'{"n":%d}' % n)
        assert push.dropped == 2  # 1 and 2 made room for 4 and 5
        sink.answers[:] = [500, 500, 200]
        sink.release.set()
        push.close()  # the first hangs no more: it answers nothing (a failure), then 3, 4, 5
        bodies = [json.loads(b)["n"] for _, _, b in sink.bodies()]
    assert bodies == [0, 3, 4, 5]
    assert (push.sent, push.failed, push.dropped) == (1, 3, 2)
    (line,) = err.getvalue().splitlines()  # one run of failures (0, 3, 4), then a success
    assert "OTLP push to" in line


def test_runs_of_failures_are_one_line_each() -> None:
    err = io.StringIO()
    with collector(500, 503, 200, 500, 200, 200) as sink:
        push = OtlpPush(sink.url, err)
        for _ in range(6):
            push.submit(b"{}")
        push.close()
        assert len(sink.bodies()) == 6
    assert (push.sent, push.failed, push.dropped) == (3, 3, 0)
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and "HTTP 500" in lines[0] and "HTTP 500" in lines[1], lines


# --------------------------------------------------------------------------- live


def sample_packets(name: str) -> list[tuple[int, bytes]]:
    with open_capture(capture(name)) as reader:
        return [(p.ts, p.data) for p in reader]


def test_live_writes_and_pushes_a_request_per_flush(tmp_path: Path) -> None:
    name = "multi_producer"
    record = manifest(name)
    pkts = sample_packets(name)
    path = tmp_path / "metrics.otlp.jsonl"
    with collector() as sink:
        opts = LiveOptions(otlp_out=str(path), otlp_endpoint=sink.url)
        resource = otlp.resource_attributes(interface="fake0")
        sent_out = OtlpMetricsOut(
            resource, io.StringIO(), path=str(path), endpoint=sink.url, interval=0
        )  # every snapshot published is exported (no flush interval to wait for)
        session = Session(
            opts, FakeSource(pkts, 1), io.StringIO(), io.StringIO(), publish=sent_out.publish
        )
        half = len(pkts) // 2
        session.packets(pkts[:half])
        session.publish()  # what each flush interval does
        session.packets(pkts[half:])
        session.close()  # the last request
        sent_out.close()  # then the push drains
        pushed = [body for _, _, body in sink.bodies()]
    lines = path.read_bytes().splitlines(keepends=True)
    assert pushed == lines and len(lines) == 2
    first, last = (metrics_of(parse(line)) for line in lines)
    sent, received = client_counts(record)
    assert per_topic(last["messaging.client.sent.messages"]) == dict(sent)
    assert per_topic(last["messaging.client.consumed.messages"]) == dict(received)
    packets = [int(points(m[PREFIX + "packets_total"])[0]["asInt"]) for m in (first, last)]
    assert packets == [half, len(pkts)]
    captured = int(points(last[PREFIX + "captured_bytes_total"])[0]["asInt"])
    assert captured == sum(len(data) for _, data in pkts)
    early = per_topic(first.get("messaging.client.sent.messages", {"sum": {"dataPoints": []}}))
    assert all(early[t] <= sent[t] for t in early)  # cumulative: counts only grow
    starts = {
        p["startTimeUnixNano"] for m in (first, last) for p in points(m[PREFIX + "packets_total"])
    }
    assert len(starts) == 1  # one start for the run


def test_a_live_run_ends_with_its_last_request(tmp_path: Path) -> None:
    """`live` (its loop, a replayed capture through a fake source): the end's request holds
    every count, after the lines of the flush intervals (none here: a run shorter than one)."""
    name = "produce_consume"
    pkts = sample_packets(name)
    path = tmp_path / "run.otlp.jsonl"
    err = io.StringIO()
    opts = LiveOptions(count=len(pkts), otlp_out=str(path), flush_interval=3600)
    assert live_run(opts, io.StringIO(), err, source=FakeSource(pkts, 1)) == 0, err.getvalue()
    (line,) = path.read_bytes().splitlines()
    request = parse(line)
    metrics = metrics_of(request)
    sent, received = client_counts(manifest(name))
    assert per_topic(metrics["messaging.client.sent.messages"]) == dict(sent)
    assert per_topic(metrics["messaging.client.consumed.messages"]) == dict(received)
    assert int(points(metrics[PREFIX + "packets_total"])[0]["asInt"]) == len(pkts)
    resource = attrs(request["resourceMetrics"][0]["resource"])
    assert resource["network.interface.name"] == "fake0" and "host.name" in resource
    assert "OTLP" not in err.getvalue()


def test_a_live_stop_waits_for_a_hanging_collector_at_most_the_timeout() -> None:
    pkts = sample_packets("produce_consume")
    err = io.StringIO()
    with collector("hang") as sink:
        opts = LiveOptions(count=len(pkts), otlp_endpoint=sink.url, otlp_timeout=0.5)
        # without the bound the run would never return: the receiver never answers
        assert live_run(opts, io.StringIO(), err, source=FakeSource(pkts, 1)) == 0
        assert sink.entered.is_set()
    warnings = [line for line in err.getvalue().splitlines() if "OTLP" in line]
    assert len(warnings) == 1 and "failed" in warnings[0], err.getvalue()


def test_a_live_file_that_cannot_be_written_stops_before_the_capture(tmp_path: Path) -> None:
    opts = LiveOptions(count=1, otlp_out=str(tmp_path / "no" / "such" / "dir.jsonl"))
    with pytest.raises(OutputError, match="cannot write OTLP metrics"):
        live_run(opts, io.StringIO(), io.StringIO(), source=FakeSource([], 1))


@pytest.mark.parametrize("jobs", [1, 2])
def test_live_pushes_what_real_peers_sent_and_received(tmp_path: Path, jobs: int) -> None:
    """Real peers (pulsar-lite and the official client) on loopback under `live` (-j 2: the
    workers' snapshots merged by the parent): the collector's requests, and the file's
    lines, reach the client's record."""
    require_capture()
    path = tmp_path / "live.otlp.jsonl"
    with collector() as sink, PulsarLite() as broker:
        live = Live(
            *("-i", "lo", "--port", str(broker.port), "--flush-interval", "0.5", "-j", str(jobs)),
            *("--otlp-out", str(path), "--otlp-endpoint", sink.url),
        )
        try:
            record = run_scenario(broker.url, messages=12, batching=False)
            sent, received = client_counts(record)
            pushed: list[bytes] = []
            while True:  # each request is an event; the deadline only bounds a hang
                _, content_type, body = sink.received.get(timeout=60)
                assert content_type == "application/json"
                pushed.append(body)
                metrics = metrics_of(parse(body))
                if "messaging.client.consumed.messages" in metrics and per_topic(
                    metrics["messaging.client.consumed.messages"]
                ) == dict(received):
                    break
        finally:
            rc = live.stop(signal.SIGINT)
        pushed += [body for _, _, body in sink.bodies()]  # the last one, at the stop
    assert rc == 0, live.stderr
    assert "OTLP" not in live.stderr  # no warning: every push was taken
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines == pushed and len(lines) >= 2
    last = metrics_of(parse(lines[-1]))
    assert per_topic(last["messaging.client.sent.messages"]) == dict(sent)
    assert per_topic(last["messaging.client.consumed.messages"]) == dict(received)
    sends = [
        p
        for p in points(last["messaging.client.operation.duration"])
        if attrs(p)["messaging.operation.name"] == "send"
    ]
    assert sum(int(p["count"]) for p in sends) == sum(sent.values())  # unbatched: a SEND each
    clock = [metrics_of(parse(x)).get(PREFIX + "packets_total") for x in lines]
    times = [int(points(m)[0]["timeUnixNano"]) for m in clock if m is not None]
    assert times == sorted(times) and len(times) == len(lines)  # packets counted at each flush
