"""`pulsar-dissect summary` and the read filters, checked against the tables themselves."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from dissector.errors import UsageError
from dissector.frontends.summary import Summary, summarize
from dissector.read import read_tables
from dissector.read.dataframes import to_pandas
from dissector.tables.filters import Filter, parse_time
from dissector.tables.schema import TABLES
from tests.support.cli import cli

PCAP = Path(__file__).resolve().parents[2] / "pcaps" / "produce_consume.pcap"
MULTI = Path(__file__).resolve().parents[2] / "pcaps" / "multi_producer.pcap"


def test_summary_numbers_come_from_the_tables() -> None:
    tables = read_tables([PCAP, MULTI])
    s = summarize(tables)
    timeline = to_pandas(tables["timeline"])
    answered = timeline[timeline["outcome"].isin(["success", "error"])]
    assert {k: v["count"] for k, v in s["latency"].items()} == answered.groupby(
        "request_command"
    ).size().to_dict()
    sends = answered[answered["request_command"] == "SEND"]["latency_us"]
    assert s["latency"]["SEND"]["max_ms"] == round(sends.max() / 1000, 3)
    assert len(s["connections"]) == tables["conversations"].num_rows == 2
    assert s["frames"] == tables["frames"].num_rows
    # the client's acks of messages already acknowledged are told apart from faults
    unmatched = timeline[timeline["outcome"] == "unmatched"]
    repeated = unmatched["error_message"].str.startswith("already acknowledged").fillna(False)
    assert repeated.sum() > 0
    assert (unmatched["first_ack_packet"].notna() == repeated).all()
    assert s["repeated_acks"] == {"ACK": int(repeated.sum())}
    assert s["unmatched"] == ({"ACK": int((~repeated).sum())} if (~repeated).sum() else {})


def test_summary_json_and_text_show_the_tail_percentiles() -> None:
    """Per request command, p50 to p99.99 and max, in the JSON and in the text: numpy's
    linear quantile and the standard library's `statistics.quantiles` (inclusive) of the
    timeline's answered latencies, in ms to the µs."""
    timeline = read_tables([PCAP, MULTI])["timeline"].to_pylist()
    latencies: dict[str, list[int]] = {}
    for r in timeline:
        if r["outcome"] in ("success", "error"):
            latencies.setdefault(r["request_command"], []).append(r["latency_us"])
    res = cli("summary", "--format", "json", str(PCAP), str(MULTI))
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)["latency"]
    assert set(got) == set(latencies)
    names = ["p50_ms", "p90_ms", "p99_ms", "p99_9_ms", "p99_99_ms"]
    tail = 0
    for command, us in latencies.items():
        s = got[command]
        assert list(s) == ["count", *names, "max_ms"] and s["count"] == len(us)
        cuts = statistics.quantiles(us, n=10_000, method="inclusive") if len(us) > 1 else us * 9999
        cut = {0.5: 5000, 0.9: 9000, 0.99: 9900, 0.999: 9990, 0.9999: 9999}  # k/10000
        for name, (p, k) in zip(names, cut.items(), strict=True):
            assert s[name] == round(float(np.quantile(us, p, method="linear")) / 1000, 3)
            assert s[name] == round(cuts[k - 1] / 1000, 3), (command, name)
        assert s["max_ms"] == round(max(us) / 1000, 3)
        tail += s["p99_9_ms"] != s["p99_ms"]
    assert tail  # the tail percentiles are not the p99 again
    text = cli("summary", str(PCAP), str(MULTI)).stdout.splitlines()
    at = text.index("Latency per request (ms)")
    assert text[at + 1].split() == ["request", "count", "p50", "p90", "p99", "p99.9", "p99.99",
                                    "max"]  # fmt: skip
    rows = {line.split()[0]: line.split()[1:] for line in text[at + 2 : at + 2 + len(got)]}
    assert rows == {
        c: [str(s["count"]), *(f"{s[n]:.3f}" for n in [*names, "max_ms"])] for c, s in got.items()
    }


def test_summary_tells_repeated_acks_by_their_field_not_their_text() -> None:
    """A repeated ack is an unmatched row with first_ack_packet set, whatever its message."""
    rows: list[dict[str, Any]] = [
        {"outcome": "unmatched", "response_command": "ACK", "first_ack_packet": 7},
        {"outcome": "unmatched", "response_command": "ACK", "first_ack_packet": 8},
        {
            "outcome": "unmatched",
            "response_command": "ACK",
            "error_message": "already acknowledged (a broker's own words)",
        },
        {"outcome": "unmatched", "response_command": "PONG"},
        {
            "outcome": "success",
            "response_command": "ACK",
            "request_command": "MESSAGE",
            "latency_us": 9,
        },
    ]
    schema = TABLES["timeline"].schema
    batch = pa.RecordBatch.from_pylist(
        [{name: r.get(name) for name in schema.names} | {"conn_id": 1} for r in rows],
        schema=schema,
    )
    summary = Summary()
    summary.add("timeline", batch)
    got = summary.result()
    assert got["repeated_acks"] == {"ACK": 2}
    assert got["unmatched"] == {"ACK": 1, "PONG": 1}


def test_summary_cli_text_and_json() -> None:
    res = cli("summary", str(PCAP))
    assert res.returncode == 0, res.stderr
    for heading in ("Connections", "Latency per request (ms)", "Unanswered requests"):
        assert heading in res.stdout
    data = json.loads(cli("summary", "--format", "json", str(PCAP)).stdout)
    assert data["connections"][0]["client_version"].startswith("Pulsar-CPP")
    assert data["latency"]["SEND"]["count"] == 20
    text = res.stdout
    assert text.index("Latency per request") < text.index("Connections")  # first, not buried
    assert "Unmatched responses (answers to no request seen): none" in text


def test_filters_on_tables() -> None:
    tables = read_tables(MULTI)
    frames = tables["frames"]
    only_send = Filter(commands=frozenset({"SEND"})).table(frames)
    assert set(only_send["command"].to_pylist()) == {"SEND"}
    topic = sorted(t for t in set(frames["topic"].to_pylist()) if t)[0]
    by_topic = Filter(topics=frozenset({topic})).table(frames)
    assert by_topic.num_rows > 0 and set(by_topic["topic"].to_pylist()) == {topic}
    pairs = Filter(commands=frozenset({"LOOKUP_RESPONSE"})).table(tables["timeline"])
    assert set(pairs["response_command"].to_pylist()) == {"LOOKUP_RESPONSE"}
    ts = frames["ts"].cast(pa.int64()).to_pylist()
    middle = sorted(ts)[len(ts) // 2]
    window = Filter(since=middle).table(frames)
    assert window.num_rows == sum(1 for t in ts if t >= middle)
    assert Filter(until=middle).table(frames).num_rows == sum(1 for t in ts if t < middle)
    assert Filter(conns=frozenset({999})).table(frames).num_rows == 0
    anomalies_untouched = Filter(topics=frozenset({topic})).table(tables["anomalies"])
    assert anomalies_untouched.num_rows == tables["anomalies"].num_rows


def test_time_parsing() -> None:
    assert parse_time("1700000000.5") == 1_700_000_000_500_000
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000_000_000
    assert parse_time("2023-11-14T22:13:20") == 1_700_000_000_000_000  # naive means UTC
    with pytest.raises(UsageError):
        parse_time("yesterday")


def test_read_filters_in_the_cli() -> None:
    res = cli("read", str(PCAP), "--command", "send")
    lines = res.stdout.splitlines()
    assert lines and all(" SEND " in line for line in lines)
    assert len(lines) == 20
    res = cli("read", str(PCAP), "--table", "timeline", "--command", "LOOKUP")
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert rows and {r["request_command"] for r in rows} == {"LOOKUP"}
    bad = cli("read", str(PCAP), "--since", "yesterday")
    assert bad.returncode == 2 and "not a time" in bad.stderr and "Traceback" not in bad.stderr


def test_summary_all_lists_every_connection() -> None:
    top = json.loads(cli("summary", "--format", "json", "--top", "1", str(PCAP), str(MULTI)).stdout)
    every = json.loads(cli("summary", "--format", "json", "--all", str(PCAP), str(MULTI)).stdout)
    assert top["connection_count"] == every["connection_count"] == 2
    assert len(top["connections"]) == 1 and len(every["connections"]) == 2
