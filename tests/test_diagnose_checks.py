"""The clean bill: what the findings' rules checked and what the capture could not tell them
(the checks table, dissector.diagnose.checks), and how `diagnose` says it.

The scene is built with chosen latencies: 200 SENDs of one producer answered 190 in 1.0 ms,
8 in 2.0 ms and 2 in 4.1 ms (so the longest is 4.1 ms and the 198th of 200, the 99th
percentile, 2.0 ms); its PRODUCER answered in 12 ms, its SUBSCRIBE in 3 ms, a second PRODUCER
refused (TopicNotFound) in 5 ms; one PING answered in 0.7 ms; one consumer granted permits.
A second connection starts before the capture (no CONNECT) with a FLOW of a consumer the
capture never saw subscribe and a LOOKUP never answered; a third loses a segment (a TCP
gap). Every number expected below is the scene's, counted by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dissector.diagnose.checks import bucket, merge, quantile, upper
from dissector.read import read_capture
from tests.support.cli import cli
from tests.support.crafted import B2C, C2B, Conn, msg
from tests.support.scenes import Scene, flow, ping, pong, producer, receipt, send, subscribe

TOPIC_NOT_FOUND = 11  # ServerError.TopicNotFound (proto/pulsar_api.proto)
#: (how many SENDs, their latency in seconds), in the order they are sent
LATENCIES = [(190, 0.001), (8, 0.002), (2, 0.0041)]


def _scene(path: Path) -> Path:
    s = Scene()
    one, two, three = Conn(client_port=40001), Conn(client_port=40002), Conn(client_port=40003)
    s.open(one, 0.0)
    made, ok = producer()
    s.at(0.0, made, one).at(0.012, ok, one)  # PRODUCER answered in 12 ms
    asked, answered = subscribe()
    s.at(0.1, asked, one).at(0.103, answered, one)  # SUBSCRIBE answered in 3 ms
    s.at(0.2, flow(10), one)
    seq, t = 0, 1.0
    for count, latency in LATENCIES:
        for _ in range(count):
            s.at(t, send(seq), one).at(t + latency, receipt(seq, entry=seq), one)
            seq, t = seq + 1, t + 0.01
    s.at(5.0, ping(), one).at(5.0007, pong(), one)  # PING answered in 0.7 ms
    refused = msg(C2B, "PRODUCER", topic="persistent://public/default/none", producer_id=3,
                  request_id=3, producer_name="p-none")  # fmt: skip
    error = msg(B2C, "ERROR", request_id=3, error=TOPIC_NOT_FOUND, message="no topic")
    s.at(6.0, refused, one).at(6.005, error, one)  # refused in 5 ms
    s.close(10.0, one)
    s.open(two, 0.5, connect=False)  # started before the capture: no SYN, no CONNECT
    s.at(0.5, flow(5, cid=7), two)
    s.at(0.6, msg(C2B, "LOOKUP", topic="persistent://public/default/x", request_id=9), two)
    s.open(three, 7.0)
    s.at(7.1, send(0, pid=4), three)
    lost = s.carriers[-1][1]
    s.segs.remove(lost)  # its bytes never reach the capture: a TCP gap
    s.at(7.2, send(1, pid=4), three)
    s.close(8.0, three)
    return s.write(path)


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _scene(tmp_path_factory.mktemp("checks") / "checks.pcap")


def _checks(path: Path | list[Path], jobs: int = 1) -> dict[str, dict[str, Any]]:
    table = read_capture(path, tables=["checks"]).arrow["checks"]
    return {r["check"]: r for r in table.to_pylist()}


def test_each_check_counts_what_the_scene_did(scene: Path) -> None:
    got = _checks(scene)
    assert list(got) == ["sends", "requests", "pings", "permits", "connections", "bytes"]
    sends = got["sends"]
    # 200 answered on producer 1; the third connection's SENDs: the first's bytes are lost,
    # the second has no receipt (unknown)
    assert (sends["count"], sends["entities"], sends["failed"]) == (200, 1, 0)
    assert sends["unknown"] == 1
    assert sends["worst_us"] == 4100
    assert 2000 <= sends["p99_us"] <= 2000 * 1.0625  # the sketch's bound of 2.0 ms
    assert sum(sends["latency_buckets"]) == 200
    assert sends["latency_buckets"][bucket(1000)] == 190
    requests = got["requests"]
    assert (requests["count"], requests["failed"], requests["worst_us"]) == (3, 1, 12_000)
    assert requests["entities"] == 1  # one connection had requests answered
    assert requests["unknown"] == 1  # the LOOKUP of the second connection
    pings = got["pings"]
    assert (pings["count"], pings["worst_us"], pings["unknown"]) == (1, 700, 0)
    permits = got["permits"]
    assert (permits["count"], permits["unknown"]) == (1, 1)  # consumer 2; consumer 7 unknown
    connections = got["connections"]
    assert (connections["entities"], connections["count"], connections["unknown"]) == (3, 2, 1)
    gaps = got["bytes"]
    assert (gaps["entities"], gaps["count"], gaps["unknown"]) == (3, 2, 1)
    assert {r["conn_id"] for r in got.values()} == {0}


def test_the_text_says_what_was_checked_and_not_known(scene: Path) -> None:
    done = cli("diagnose", str(scene))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "checked: 200 SENDs on 1 producer answered within 4.1 ms (p99 2.0 ms);" in out
    assert "3 requests answered within 12 ms, 1 of them with ERROR;" in out
    assert "1 PING answered within 700 µs;" in out
    assert "1 consumer's permits followed;" in out
    assert "could not know: 1 SEND with no answer in the capture;" in out
    assert "1 consumer's permits (granted before the capture)" in out
    assert "1 connection starts before the capture" in out
    assert "1 connection lost bytes (TCP gap)." in out


def test_no_findings_is_a_clean_bill(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    made, ok = producer()
    s.at(0, made).at(0.004, ok)
    for seq, latency in enumerate((0.0011, 0.0041, 0.0023)):
        s.at(1 + seq, send(seq)).at(1 + seq + latency, receipt(seq, entry=seq))
    s.at(5.0, ping(B2C)).at(5.002, pong(C2B)).close(6)
    path = s.write(tmp_path / "ok.pcap")
    done = cli("diagnose", str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "no findings. checked: 3 SENDs on 1 producer, every one answered within 4.1 ms; "
        "1 request answered within 4.0 ms; 1 PING answered within 2.0 ms; "
        "1 connection from its CONNECT.\n"
    )
    page = tmp_path / "ok.html"
    assert cli("report", str(path), "-o", str(page)).returncode == 0
    assert "checked: 3 SENDs on 1 producer, every one answered within 4.1 ms;" in (page.read_text())
    shown = json.loads(cli("diagnose", str(path), "--format", "json").stdout)
    assert (shown["findings"], shown["connections"]) == (0, [])
    sends = shown["checked"]["sends"]
    assert (sends["count"], sends["entities"], sends["worst_us"], sends["unknown"]) == (
        3,
        1,
        4100,
        0,
    )


def test_after_findings_the_checked_part_follows(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    made, ok = producer()
    s.at(0, made).at(0.004, ok)
    s.at(1, send(0)).at(1.002, receipt(0)).at(2, send(1)).close(3)  # SEND 1 pending at FIN
    done = cli("diagnose", str(s.write(tmp_path / "late.pcap")))
    out = done.stdout
    assert out.startswith("1 finding in 1 connection (1 error)"), out
    assert out.rstrip().endswith(
        "checked: 1 SEND on 1 producer answered within 2.0 ms; "
        "1 request answered within 4.0 ms; 1 connection from its CONNECT."
    ), out
    assert "could not know" not in out  # the short form, after findings


def test_two_captures_add_up(tmp_path: Path) -> None:
    """Two captures of different times read together are two groups (two Diagnosers):
    counts add, the worst is the larger, the p99 is that of every answer."""
    paths = []
    for name, start, latencies in (("a", 0, [0.001] * 150), ("b", 100, [0.003] * 3 + [0.009])):
        s = Scene()
        s.open(t=start)
        made, ok = producer()
        s.at(start, made).at(start + 0.001, ok)
        for seq, latency in enumerate(latencies):
            t = start + 1 + seq * 0.01
            s.at(t, send(seq)).at(t + latency, receipt(seq))
        s.close(start + 3)
        paths.append(s.write(tmp_path / f"{name}.pcap"))
    table = read_capture(paths, tables=["checks"]).arrow["checks"].to_pylist()
    assert [r["count"] for r in table if r["check"] == "sends"] == [150, 4]
    shown = json.loads(cli("diagnose", *map(str, paths), "--format", "json").stdout)
    sends = shown["checked"]["sends"]
    assert (sends["count"], sends["entities"], sends["worst_us"]) == (154, 2, 9000)
    # 154 answers: the 153rd (ceil(0.99 * 154)) is 3 ms
    assert 3000 <= sends["p99_us"] <= 3000 * 1.0625
    assert shown["checked"]["connections"]["count"] == 2


def test_j2_gives_the_rows_of_j1(scene: Path, tmp_path: Path) -> None:
    """-j 2 with a table of shards (frames): the checks come from the worker that reads every
    connection, as the findings do, so they are -j 1's; diagnose -j 2 says what -j 1 says."""
    got = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"tables-{jobs}"
        tables = ("--table", "frames", "--table", "checks", "--table", "findings")
        done = cli("read", str(scene), *tables, "-o", str(out), "-j", jobs)
        assert done.returncode == 0, done.stderr
        got[jobs] = pq.read_table(out / "checks.parquet").to_pylist()
    assert got["1"] == got["2"] and len(got["1"]) == 6
    assert got["2"][0]["count"] == 200
    said = {jobs: cli("diagnose", str(scene), "-j", jobs).stdout for jobs in ("1", "2")}
    assert said["1"] == said["2"] and "200 SENDs" in said["1"]


def test_the_sketch_bounds_every_latency() -> None:
    """Each latency falls in a bucket whose bound is at most 6.25% above it; buckets rise."""
    last = -1
    for us in [*range(0, 5000), 65_535, 1_000_000, 3_600_000_000]:
        b = bucket(us)
        assert b >= last
        last = b
        assert us <= upper(b) <= max(us, us * 1.0625)
    assert quantile(merge([[0, 2], [0, 0, 0, 1]]), 0.5, None) == 1
    assert quantile([], 0.99, None) is None
