"""`summary` and `report` per subscription, on a crafted capture whose times are chosen.

The scene sends each message, its receipt, its deliveries and its ack at seconds chosen
here; the expected counts and percentiles are computed by hand from those times (docs/
journeys.md: dispatch = first delivery - receipt, end to end = ack - send; the percentile
rule of dissector.tables.stats: linear between the closest ranks), never from our output.
The report's tables must show the summary's numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dissector.pulsar.wire import MessageMetadata
from tests.support.cli import cli
from tests.support.crafted import B2C, C2B, T0_US, Conn, Msg, msg
from tests.support.html_tables import report_tables
from tests.support.scenes import SUB, TOPIC, Scene, ack, message, producer, receipt, send, subscribe

PRODUCER = "sub-producer"
OTHER = "other-sub"

#: sequence id -> (send, receipt, [deliveries], ack) in seconds; None: not seen
DIAG_SUB: dict[int, tuple[float, float, list[float], float | None]] = {
    0: (1.000, 1.001, [1.002], 1.010),  # dispatch 1 ms, end to end 10 ms
    1: (1.100, 1.101, [1.104, 1.120], 1.130),  # 3 ms, 30 ms; delivered twice
    2: (1.200, 1.201, [1.206], 1.220),  # 5 ms, 20 ms
    3: (1.300, 1.301, [1.310], 1.340),  # 9 ms, 40 ms
    5: (1.500, 1.501, [1.503], None),  # 2 ms, never acked
}
NEVER = (6, 1.600, 1.601)  # sequence id, send, receipt: never delivered

#: By hand. diag-sub's dispatch (ms) sorted: 1, 2, 3, 5, 9 (n = 5): p50 at rank 2: 3;
#: p90 at rank 3.6: 5 + 0.6 * 4 = 7.4; p99 at rank 3.96: 5 + 0.96 * 4 = 8.84; p99.9 at rank
#: 3.996: 8.984; p99.99 at rank 3.9996: 8.9984 (8.998 to the µs); max 9.
#: End to end: 10, 20, 30, 40 (n = 4, the unacked one has none): p50 at rank 1.5: 25;
#: p90 at rank 2.7: 30 + 0.7 * 10 = 37; p99 at rank 2.97: 39.7; p99.9 at rank 2.997: 39.97;
#: p99.99 at rank 2.9997: 39.997; max 40.
#: other-sub: seq 0 delivered at 1.050 (49 ms after its receipt), acked at 1.060 (60 ms).
EXPECTED = {
    "subscriptions": [
        {
            "topic": TOPIC,
            "subscription": SUB,
            "messages": 5,
            "delivered": 5,
            "delivered_twice": 1,
            "not_acked": 1,
            "dispatch": {
                "count": 5,
                "p50_ms": 3.0,
                "p90_ms": 7.4,
                "p99_ms": 8.84,
                "p99_9_ms": 8.984,
                "p99_99_ms": 8.998,
                "max_ms": 9.0,
            },
            "end_to_end": {
                "count": 4,
                "p50_ms": 25.0,
                "p90_ms": 37.0,
                "p99_ms": 39.7,
                "p99_9_ms": 39.97,
                "p99_99_ms": 39.997,
                "max_ms": 40.0,
            },
        },
        {
            "topic": TOPIC,
            "subscription": OTHER,
            "messages": 1,
            "delivered": 1,
            "delivered_twice": 0,
            "not_acked": 0,
            "dispatch": {
                "count": 1,
                "p50_ms": 49.0,
                "p90_ms": 49.0,
                "p99_ms": 49.0,
                "p99_9_ms": 49.0,
                "p99_99_ms": 49.0,
                "max_ms": 49.0,
            },
            "end_to_end": {
                "count": 1,
                "p50_ms": 60.0,
                "p90_ms": 60.0,
                "p99_ms": 60.0,
                "p99_9_ms": 60.0,
                "p99_99_ms": 60.0,
                "max_ms": 60.0,
            },
        },
    ],
    "never_delivered": [{"topic": TOPIC, "never_delivered": 1}],
}


def _meta(seq: int) -> MessageMetadata:
    return MessageMetadata(producer_name=PRODUCER, sequence_id=seq, publish_time=T0_US // 1000)


def _other(cid: int, rid: int) -> list[Msg]:
    return [
        msg(
            C2B, "SUBSCRIBE", topic=TOPIC, subscription=OTHER, subType=0,
            consumer_id=cid, request_id=rid, consumer_name="other",
        ),
        msg(B2C, "SUCCESS", request_id=rid),
    ]  # fmt: skip


def capture(path: Path) -> Path:
    """The scene above: a producer's connection, diag-sub's and other-sub's consumers."""
    s = Scene()
    p, c, o = Conn(client_port=40001), Conn(client_port=40002), Conn(client_port=40003)
    for conn in (p, c, o):
        s.open(conn)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    for m in subscribe():
        s.at(0, m, c)
    for m in _other(cid=4, rid=3):
        s.at(0, m, o)
    entry = {seq: 10 + seq for seq in (*DIAG_SUB, NEVER[0])}
    for seq, (sent, stored, deliveries, acked) in DIAG_SUB.items():
        s.at(sent, send(seq, metadata=_meta(seq)), p).at(stored, receipt(seq, entry=entry[seq]), p)
        for n, t in enumerate(deliveries):
            s.at(t, message(entry[seq], metadata=_meta(seq), redelivery_count=n), c)
        if acked is not None:
            s.at(acked, ack(entry[seq]), c)
    seq, sent, stored = NEVER
    s.at(sent, send(seq, metadata=_meta(seq)), p).at(stored, receipt(seq, entry=entry[seq]), p)
    s.at(1.050, message(entry[0], cid=4, metadata=_meta(0)), o).at(1.060, ack(entry[0], cid=4), o)
    for conn in (p, c, o):
        s.close(3, conn)
    return s.write(path)


def summary_json(path: Path) -> dict[str, Any]:
    res = cli("summary", "--format", "json", str(path))
    assert res.returncode == 0, res.stderr
    result: dict[str, Any] = json.loads(res.stdout)
    return result


def test_summary_per_subscription_is_the_scenes(tmp_path: Path) -> None:
    assert summary_json(capture(tmp_path / "c.pcap"))["journeys"] == EXPECTED


def test_summary_text_shows_them(tmp_path: Path) -> None:
    res = cli("summary", str(capture(tmp_path / "c.pcap")))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    at = lines.index(
        "Subscriptions (from journeys; twice: delivered more than once, redeliveries > 0)"
    )
    assert lines[at + 2 : at + 5] == [
        f"  {TOPIC}",
        f"    {SUB:<30} {5:>10} {5:>10} {1:>10} {1:>10}",
        f"    {OTHER:<30} {1:>10} {1:>10} {0:>10} {0:>10}",
    ]
    assert f"  never delivered (no delivery seen): 1 of {TOPIC}" in lines
    dispatch = lines.index("Dispatch latency per subscription (ms: SEND_RECEIPT to first MESSAGE)")
    assert lines[dispatch + 1].split()[-7:] == ["count", "p50", "p90", "p99", "p99.9", "p99.99",
                                               "max"]  # fmt: skip
    assert lines[dispatch + 3].split() == [SUB, "5", "3.000", "7.400", "8.840", "8.984", "8.998",
                                           "9.000"]  # fmt: skip
    end = lines.index("End-to-end latency per subscription (ms: SEND to the subscription's ACK)")
    assert lines[end + 3].split() == [SUB, "4", "25.000", "37.000", "39.700", "39.970",
                                      "39.997", "40.000"]  # fmt: skip


def test_the_report_shows_the_summarys_numbers(tmp_path: Path) -> None:
    path = capture(tmp_path / "c.pcap")
    tables = report_tables(path, tmp_path / "r.html")
    subs = summary_json(path)["journeys"]["subscriptions"]
    head, *rows = tables["subscriptions-table"]
    assert head == ["topic", "subscription", "messages", "delivered", "delivered twice",
                    "not acked"]  # fmt: skip
    assert rows == [
        [s["topic"], s["subscription"], *(str(s[k]) for k in
         ("messages", "delivered", "delivered_twice", "not_acked"))]
        for s in subs
    ]  # fmt: skip
    for key in ("dispatch", "end_to_end"):
        head, *rows = tables[f"{key}-table"]
        assert head == ["topic", "subscription", "count", "p50 ms", "p90 ms", "p99 ms",
                        "p99.9 ms", "p99.99 ms", "max ms"]  # fmt: skip
        assert rows == [
            [s["topic"], s["subscription"], str(s[key]["count"]),
             *(f"{s[key][n]:.3f}" for n in ("p50_ms", "p90_ms", "p99_ms", "p99_9_ms",
                                            "p99_99_ms", "max_ms"))]
            for s in subs
        ]  # fmt: skip
    assert tables["never-delivered"][1:] == [[TOPIC, "1"]]
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<section id="subscriptions">') :]
    assert section.index('id="end-to-end-plot"') < section.index("</section>")


def test_no_journeys_skips_only_the_subscriptions(tmp_path: Path) -> None:
    path = capture(tmp_path / "c.pcap")
    full = summary_json(path)
    res = cli("summary", "--format", "json", "--no-journeys", str(path))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == full | {"journeys": None}
    text = cli("summary", "--no-journeys", str(path)).stdout
    assert "Subscriptions: not read (--no-journeys)" in text and "Dispatch" not in text


def test_report_no_journeys_skips_only_the_subscriptions(tmp_path: Path) -> None:
    path = capture(tmp_path / "c.pcap")
    res = cli("report", "--no-journeys", str(path), "-o", str(tmp_path / "r.html"))
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Not read (<code>--no-journeys</code>)" in page
    assert "subscriptions-table" not in page and 'id="frame-count"' in page
