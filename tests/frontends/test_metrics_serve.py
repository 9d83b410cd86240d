"""The metrics endpoint (`dissector.metrics.serve`) and the snapshots' way to it
(`frontends.live.published`), without capturing: a server on loopback, scraped with urllib.

Expected values: a MetricStore filled by hand (the numbers written here), read back through
prometheus_client's own parsers of both formats; the content types of the formats'
specifications (OpenMetrics 1.0: application/openmetrics-text; version=1.0.0, Prometheus
text: text/plain; version=0.0.4). Waits are for events (an answer, a connection's end), a
generous deadline only bounding a hang.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from dissector.errors import InputError, UsageError
from dissector.frontends.live.published import Latest, SnapshotPipe, WorkerSnapshots
from dissector.metrics import serve
from dissector.metrics.serve import MAX_CONNECTIONS, MetricsServer, parse_address
from dissector.metrics.store import MetricStore, Snapshot, merge
from tests.support.scrape import fetch, media, samples

P = "pulsar_dissect_"
OPENMETRICS = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
DEADLINE = 30.0  # bounds a hang; never the expected duration


def filled() -> MetricStore:
    store = MetricStore(start_us=1_700_000_000_000_000)
    store.inc(P + "packets_total", (), 70)
    store.inc(P + "frames_total", ("SEND", "client_to_broker"), 12)
    store.set(P + "connections_open", (), 3)
    # 100 µs, 2 ms and 2 s: buckets 0.0001, 0.0025 and 2.5
    store.observe(
        P + "publish_latency_seconds", ("persistent://t/n/a",), np.array([100, 2000, 2_000_000])
    )
    return store


@pytest.fixture
def server() -> Iterator[tuple[MetricsServer, Latest]]:
    latest = Latest(filled().snapshot())
    made = MetricsServer("127.0.0.1", 0, latest.get)
    made.start()
    try:
        yield made, latest
    finally:
        made.close()


def until(done: Callable[[], bool], what: str) -> None:
    """Poll `done` (each try an answer from the server) until it holds; DEADLINE bounds a hang."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9464", ("127.0.0.1", 9464)),
        (":9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("[::]:0", ("::", 0)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_addresses_default_to_loopback(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "the port must be a number 0-65535"),
        ("x:y", "the port must be a number 0-65535"),
        ("1.2.3.4:70000", "the port must be a number 0-65535"),
        ("::1:9464", "put an IPv6 address in brackets"),
        ("[nothost]:1", "'nothost' is not an IPv6 address"),
        ("[::1]", "expected [HOST:]PORT"),
        ("a b:1", "'a b' is not a host name or address"),
        ("\uff19\uff14\uff16\uff14", "the port must be a number"),  # fullwidth digits
    ],
)
def test_bad_addresses_are_one_usage_line(text: str, why: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_address(text)
    message = str(raised.value)
    assert why in message and "\n" not in message, message


def test_a_port_in_use_is_one_input_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(InputError) as raised:
            MetricsServer("127.0.0.1", port, filled().snapshot)
    assert str(raised.value) == f"cannot serve metrics on 127.0.0.1:{port}: address already in use"


def test_an_address_not_of_this_machine_is_one_input_line() -> None:
    with pytest.raises(InputError) as raised:  # TEST-NET-2: bound, never sent to
        MetricsServer("198.51.100.7", 0, filled().snapshot)
    assert (
        str(raised.value)
        == "cannot serve metrics on 198.51.100.7:0: cannot assign requested address"
    )


def test_only_the_address_asked_answers() -> None:
    with MetricsServer("127.0.0.1", 0, filled().snapshot) as made:
        made.start()
        assert fetch(made.url)[0] == 200
        for other in (("127.0.0.2", made.port), ("::1", made.port)):  # loopback, not bound
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(other, timeout=DEADLINE).close()


def test_every_ipv4_address_when_asked() -> None:
    with MetricsServer("0.0.0.0", 0, filled().snapshot) as made:
        made.start()
        assert made.url == f"http://0.0.0.0:{made.port}/metrics"
        assert fetch(f"http://127.0.0.2:{made.port}/metrics")[0] == 200  # any local address
        with pytest.raises(ConnectionRefusedError):  # IPv4 only: not IPv6's loopback
            socket.create_connection(("::1", made.port), timeout=DEADLINE).close()


def test_ipv6_loopback_when_asked() -> None:
    with MetricsServer("::1", 0, filled().snapshot) as made:
        made.start()
        assert made.url == f"http://[::1]:{made.port}/metrics"
        assert fetch(made.url)[0] == 200
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", made.port), timeout=DEADLINE).close()


def test_a_forked_process_does_not_keep_the_port() -> None:
    made = MetricsServer("127.0.0.1", 0, filled().snapshot)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its copy of the listening socket is closed already
            os._exit(0 if made._server.socket.fileno() == -1 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert made._server.socket.fileno() != -1  # the parent's still open
    finally:
        made.close()
    with socket.create_server(("127.0.0.1", made.port)):  # closed: the port is free again
        pass


# --------------------------------------------------------------------------- what it serves


def test_openmetrics_when_asked_with_its_content_type(server: tuple[MetricsServer, Latest]) -> None:
    made, _ = server
    status, content_type, body = fetch(made.url, OPENMETRICS)  # Prometheus' own Accept
    kind, params = media(content_type)
    assert status == 200 and kind == "application/openmetrics-text", content_type
    assert params["version"] == "1.0.0" and params["charset"] == "utf-8"
    assert body.endswith(b"# EOF\n")
    got = samples(body, openmetrics=True)
    assert got[P + "packets_total", frozenset()] == 70
    assert (
        got[P + "frames_total", frozenset({("command", "SEND"), ("direction", "client_to_broker")})]
        == 12
    )
    assert got[P + "connections_open", frozenset()] == 3
    topic = ("topic", "persistent://t/n/a")
    bucket = P + "publish_latency_seconds_bucket"
    counts = {
        le: got[bucket, frozenset({topic, ("le", le)})]
        for le in ("5e-05", "0.0001", "0.0025", "2.5", "+Inf")
    }
    assert counts == {"5e-05": 0, "0.0001": 1, "0.0025": 2, "2.5": 3, "+Inf": 3}
    assert got[P + "publish_latency_seconds_count", frozenset({topic})] == 3
    assert got[P + "publish_latency_seconds_sum", frozenset({topic})] == pytest.approx(2.0021)


@pytest.mark.parametrize("accept", [None, "text/plain", "text/plain;version=0.0.4", "*/*"])
def test_prometheus_text_otherwise(
    server: tuple[MetricsServer, Latest], accept: str | None
) -> None:
    made, _ = server
    status, content_type, body = fetch(made.url, accept)
    kind, params = media(content_type)
    assert status == 200 and kind == "text/plain", content_type
    assert params["version"] == "0.0.4" and params["charset"] == "utf-8"
    assert b"# EOF" not in body
    got = samples(body, openmetrics=False)
    assert got[P + "packets_total", frozenset()] == 70
    assert (
        got[P + "publish_latency_seconds_count", frozenset({("topic", "persistent://t/n/a")})] == 3
    )


def test_health_and_nothing_else(server: tuple[MetricsServer, Latest]) -> None:
    made, _ = server
    base = made.url.removesuffix("/metrics")
    for path in ("/health", "/-/healthy"):
        assert fetch(base + path)[::2] == (200, b"ok\n")
    for path in ("/", "/metric", "/metrics/x", "/favicon.ico", "/../etc/passwd"):
        status, _, body = fetch(base + path)
        assert status == 404 and b"/metrics" in body, (path, status)


def test_each_scrape_reads_the_newest_snapshot(server: tuple[MetricsServer, Latest]) -> None:
    made, latest = server
    store = filled()
    store.inc(P + "packets_total", (), 5)
    latest.set(store.snapshot())
    got = samples(fetch(made.url)[2], openmetrics=False)
    assert got[P + "packets_total", frozenset()] == 75


# --------------------------------------------------------------------------- hanging scrapers


def test_scrapers_that_hang_cost_one_connection_each_bounded(
    server: tuple[MetricsServer, Latest],
) -> None:
    made, latest = server
    silent = [socket.create_connection(("127.0.0.1", made.port)) for _ in range(MAX_CONNECTIONS)]
    try:
        store = filled()
        store.inc(P + "packets_total", (), 1)
        latest.set(store.snapshot())  # publishing waits for nobody
        extra = socket.create_connection(("127.0.0.1", made.port))  # past the limit
        extra.settimeout(DEADLINE)
        extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert extra.recv(1) == b""  # closed unanswered: no thread for it
        extra.close()
        silent.pop().close()  # one leaves: its thread ends, a scrape is answered again
        answers: list[bytes] = []
        until(lambda: _answered(made.url, answers), "a scrape answered beside the silent ones")
        assert samples(answers[0], openmetrics=False)[P + "packets_total", frozenset()] == 71
    finally:
        for sock in silent:
            sock.close()


def _answered(url: str, answers: list[bytes]) -> bool:
    """Whether a scrape was answered (its body kept), not refused for want of a thread."""
    try:
        status, _, body = fetch(url)
    except (ConnectionError, urllib.error.URLError):
        return False
    answers.append(body)
    return status == 200


def test_a_silent_scraper_is_dropped_after_the_socket_timeout(
    server: tuple[MetricsServer, Latest], monkeypatch: pytest.MonkeyPatch
) -> None:
    made, _ = server
    monkeypatch.setattr(serve._Handler, "timeout", 0.2)
    silent = socket.create_connection(("127.0.0.1", made.port))
    silent.settimeout(DEADLINE)
    assert silent.recv(1) == b""  # the server gave up on it
    silent.close()


# --------------------------------------------------------------------------- -j: the pipes


def _worker_snapshot(topics: int, packets: int) -> Snapshot:
    store = MetricStore()
    store.inc(P + "packets_total", (), packets)
    for n in range(topics):
        store.observe(P + "publish_latency_seconds", (f"persistent://t/n/{n}",), np.array([n + 1]))
    return store.snapshot()


def test_a_worker_never_waits_for_its_parent_and_the_newest_arrives() -> None:
    read, write = os.pipe()
    pipe = SnapshotPipe(write)
    parent = WorkerSnapshots(MetricStore().snapshot())
    parent.add(0, read)
    try:
        snaps = [_worker_snapshot(500, packets) for packets in (1, 2, 3)]  # each > a pipe's 64 KiB
        for snap in snaps:
            pipe.send(snap)  # the parent reads nothing yet: returns all the same
        while parent.get().value(P + "packets_total") != 3:  # the newest comes last
            assert parent.get().value(P + "packets_total") in (0, 1)  # the second was skipped
            parent.read(read)
            pipe.send(snaps[-1])  # the worker's next ticks
    finally:
        closing = threading.Thread(target=pipe.close)  # its last snapshot written whole
        closing.start()
    while read in parent.fds:  # up to the worker's end: its last snapshot kept
        parent.read(read)
    closing.join()
    assert (
        parent.get().value(P + "packets_total") == 3
        and parent.get().value(P + "packets_total") == 3
    )


def test_a_workers_last_snapshot_arrives_whole_when_it_closes() -> None:
    """A worker's last snapshot, far larger than a pipe holds, sent while the parent reads
    nothing and the pipe closed at once (the worker's end): the parent, reading up to the
    pipe's end, has that snapshot and not an earlier one."""
    read, write = os.pipe()
    pipe = SnapshotPipe(write)
    parent = WorkerSnapshots(MetricStore().snapshot())
    parent.add(0, read)
    last = _worker_snapshot(2000, 7)  # its pickle: several times a pipe's 64 KiB
    pipe.send(_worker_snapshot(2000, 6))  # a first one fills the pipe
    pipe.send(last)  # waits behind it
    closing = threading.Thread(target=pipe.close)
    closing.start()  # blocks until the parent reads
    while read in parent.fds:  # up to the worker's end
        parent.read(read)
    closing.join()
    got = parent.get()
    assert got.value(P + "packets_total") == 7
    assert (
        got.series[P + "publish_latency_seconds"].keys()
        == last.series[P + "publish_latency_seconds"].keys()
    )


def test_the_parent_merges_every_workers_newest() -> None:
    parent = WorkerSnapshots(MetricStore().snapshot())
    pipes = []
    for k in range(2):
        read, write = os.pipe()
        parent.add(k, read)
        pipes.append((read, SnapshotPipe(write)))
    sent = [_worker_snapshot(3, 10), _worker_snapshot(2, 5)]
    for (read, pipe), snap in zip(pipes, sent, strict=True):
        pipe.send(snap)
        pipe.close()
        while read in parent.fds:
            parent.read(read)
    got, expected = parent.get(), merge(sent)
    assert got.value(P + "packets_total") == 15
    for labels, hist in expected.series[P + "publish_latency_seconds"].items():
        assert got.value(P + "publish_latency_seconds", labels).count == hist.count
    assert got.value(P + "publish_latency_seconds", ("persistent://t/n/0",)).count == 2
