"""The exposition of the metrics (dissector.metrics.openmetrics) read back by
prometheus_client's own parsers, and `summary --format openmetrics|prometheus`.

Expected values come from elsewhere: the snapshot the text was made from, numpy counts of
the timeline's latencies per bucket, hand-crafted captures (1,200 topics, auth data and
payloads) whose contents the test chose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families
from prometheus_client.registry import CollectorRegistry

from dissector.metrics.families import FAMILIES, LABEL_LIMITS, LATENCY_BUCKETS, OTHER
from dissector.metrics.openmetrics import (
    CONTENT_TYPE_OPENMETRICS,
    CONTENT_TYPE_TEXT,
    SnapshotCollector,
    render,
)
from dissector.metrics.store import Snapshot
from dissector.read.metrics import metrics_of
from dissector.read.tables import read_tables
from tests.support.cli import cli
from tests.support.crafted import B2C, C2B, Session, baseline_msgs, msg, write_pcap
from tests.support.samples import CAPTURES, IDS

P = "pulsar_dissect_"
OFFLINE = [f for f in FAMILIES if not f.live_only]


def samples(text: str, parse: Any = text_families) -> dict[str, dict[tuple[Any, ...], float]]:
    """Sample name -> {sorted label items: value}."""
    out: dict[str, dict[tuple[Any, ...], float]] = {}
    for family in parse(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def expected_samples(snapshot: Snapshot) -> dict[str, dict[tuple[Any, ...], float]]:
    """What the text must hold: each series of the snapshot, as prometheus names samples."""
    out: dict[str, dict[tuple[Any, ...], float]] = {}
    for family, series in snapshot.families():
        if family.live_only:
            continue
        for key, value in series.items():
            labels = dict(zip(family.labels, key, strict=True))
            if family.kind == "histogram":
                bounds = [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]
                for le, n in zip(bounds, value.cumulative(), strict=True):
                    items = tuple(sorted({**labels, "le": le}.items()))
                    out.setdefault(family.name + "_bucket", {})[items] = n
                out.setdefault(family.name + "_count", {})[tuple(sorted(labels.items()))] = (
                    value.count
                )
                out.setdefault(family.name + "_sum", {})[tuple(sorted(labels.items()))] = value.sum
            else:
                out.setdefault(family.name, {})[tuple(sorted(labels.items()))] = value
        if not family.labels and not series:
            out.setdefault(family.name, {})[()] = 0
    return out


def normal_le(found: dict[str, dict[tuple[Any, ...], float]]) -> dict[str, Any]:
    """`le` as Python's float text (the parsers keep the text as written)."""
    out: dict[str, Any] = {}
    for name, series in found.items():
        out[name] = {
            tuple((k, str(float(v)) if k == "le" and v != "+Inf" else v) for k, v in key): value
            for key, value in series.items()
        }
    return out


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_both_formats_parse_back_to_the_snapshot(capture: Path) -> None:
    snapshot = metrics_of([capture])
    expected = normal_le(expected_samples(snapshot))
    for openmetrics, parse in ((False, text_families), (True, openmetrics_families)):
        text = render(snapshot, openmetrics=openmetrics, live=False).decode()
        assert text.endswith("# EOF\n") == openmetrics
        found = normal_le(samples(text, parse))
        assert found == expected
        assert {f.name for f in parse(text)} == {f.base for f in OFFLINE}


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_request_buckets_are_numpys_counts_of_the_timeline(capture: Path) -> None:
    timeline = read_tables([capture], tables=["timeline"])["timeline"].to_pandas()
    answered = timeline[timeline.outcome.isin(["success", "error"]) & timeline.latency_us.notna()]
    command = answered.request_command.fillna(answered.response_command)
    found = samples(render(metrics_of([capture]), openmetrics=False, live=False).decode())
    buckets = found[P + "request_duration_seconds_bucket"]
    assert len(answered)
    for (cmd, outcome), group in answered.groupby([command, answered.outcome]):
        us = group.latency_us.to_numpy(dtype=np.int64)
        for bound in [*LATENCY_BUCKETS, float("inf")]:
            le = "+Inf" if bound == float("inf") else repr(bound)
            key = tuple(sorted({"command": cmd, "outcome": outcome, "le": le}.items()))
            want = int(np.sum(us <= bound * 1e6)) if bound != float("inf") else len(us)
            assert buckets[key] == want, (cmd, outcome, le)


def test_live_only_families_and_content_types() -> None:
    snapshot = metrics_of([CAPTURES[0]])
    offline = render(snapshot, openmetrics=False, live=False).decode()
    live = render(snapshot, openmetrics=False).decode()
    assert P + "kernel_dropped_packets_total" not in offline
    assert f"{P}kernel_dropped_packets_total 0.0" in live  # a label-less family shows 0
    assert CONTENT_TYPE_TEXT.startswith("text/plain; version=0.0.4")
    assert CONTENT_TYPE_OPENMETRICS.startswith("application/openmetrics-text; version=1.0.0")


def test_a_registry_renders_the_collectors_latest_snapshot() -> None:
    """A server's registry holds a SnapshotCollector: each scrape renders what `get` gives
    then, with the content type prometheus_client negotiates."""
    first, second = metrics_of([CAPTURES[0]]), metrics_of(CAPTURES[:2])
    current = [first]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: current[0]))
    encoder, content_type = choose_encoder("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith(CONTENT_TYPE_OPENMETRICS)
    assert encoder(registry) == render(first)
    current[0] = second
    assert encoder(registry) == render(second) != render(first)
    encoder, content_type = choose_encoder("text/plain")
    assert content_type == CONTENT_TYPE_TEXT
    assert encoder(registry) == render(second, openmetrics=False)


def many_topics(path: Path, count: int) -> list[str]:
    """One connection, `count` producers each on a topic of its own, each sending one
    message that the broker receipts."""
    topics = [f"persistent://public/default/t-{i:04d}" for i in range(count)]
    frames = []
    for i, topic in enumerate(topics, start=1):
        frames += [
            msg(C2B, "PRODUCER", topic=topic, producer_id=i, request_id=i),
            msg(B2C, "PRODUCER_SUCCESS", request_id=i, producer_name=f"p{i}"),
            msg(C2B, "SEND", producer_id=i, sequence_id=0, payload=b"x"),
            msg(B2C, "SEND_RECEIPT", producer_id=i, sequence_id=0,
                message_id={"ledgerId": 1, "entryId": i}),
        ]  # fmt: skip
    session = Session()
    session.handshake()
    session.exchange(frames)
    write_pcap(path, session.segs)
    return topics


def test_topics_past_the_limit_fold_into_other(tmp_path: Path) -> None:
    limit = LABEL_LIMITS["topic"]
    topics = many_topics(tmp_path / "topics.pcap", limit + 200)
    snapshot = metrics_of([tmp_path / "topics.pcap"])
    published = snapshot.series[P + "messages_published_total"]
    assert published == {**{(t,): 1 for t in topics[:limit]}, (OTHER,): 200}
    assert snapshot.series[P + "publish_latency_seconds"][(OTHER,)].count == 200
    assert snapshot.value(P + "producers_open", (OTHER,)) == 200
    folded_families = [
        f.name for f in FAMILIES
        if "topic" in f.labels and any(OTHER in key for key in snapshot.series[f.name])
    ]  # fmt: skip
    assert sorted(folded_families) == sorted(
        P + n
        for n in (
            "messages_published_total",
            "published_bytes_total",
            "publish_latency_seconds",
            "producers_open",
        )
    )
    assert snapshot.value(P + "label_values_folded_total", ("topic",)) == 200 * len(folded_families)
    found = samples(render(snapshot, openmetrics=True, live=False).decode(), openmetrics_families)
    assert len(found[P + "messages_published_total"]) == limit + 1


def test_no_payload_or_auth_data_in_the_exposition(tmp_path: Path) -> None:
    secret, payload = b"tok-3f9a-secret-value", b"hello pulsar"  # baseline_msgs' payload
    session = Session()
    session.handshake()
    session.exchange(baseline_msgs(auth_data=secret))
    session.close()
    path = write_pcap(tmp_path / "auth.pcap", session.segs).path
    snapshot = metrics_of([path])
    assert snapshot.series[P + "messages_published_total"]  # the payload was decoded
    for openmetrics in (True, False):
        text = render(snapshot, openmetrics=openmetrics, live=False)
        assert secret not in text and payload not in text
        assert b"token" not in text  # the auth method is not a label either
    for fmt in ("openmetrics", "prometheus"):
        res = cli("summary", "--format", fmt, str(path))
        assert res.returncode == 0, res.stderr
        assert secret.decode() not in res.stdout and payload.decode() not in res.stdout


def test_summary_openmetrics_with_several_captures_and_jobs() -> None:
    paths = [str(p) for p in CAPTURES[:3]]
    one = cli("summary", "--format", "openmetrics", "-j", "1", *paths)
    two = cli("summary", "--format", "openmetrics", "-j", "2", *paths)
    assert one.returncode == 0 and two.returncode == 0, (one.stderr, two.stderr)
    assert one.stdout == two.stdout
    assert one.stdout == render(metrics_of(paths), live=False).decode()
    families = {f.name: f for f in openmetrics_families(one.stdout)}
    assert families[P + "frames"].type == "counter"
    assert families[P + "request_duration_seconds"].type == "histogram"
    text = cli("summary", "--format", "prometheus", *paths)
    assert text.returncode == 0
    # the 0.0.4 parsers (node_exporter's textfile collector) type a sample by the name its
    # TYPE line gives: with `_total` there, without it in OpenMetrics
    assert f"# TYPE {P}frames_total counter\n" in text.stdout
    assert f"# TYPE {P}frames counter\n" in one.stdout
    assert {f.type for f in text_families(text.stdout)} == {"counter", "gauge", "histogram"}


def test_summary_bad_usage_is_one_line(tmp_path: Path) -> None:
    res = cli("summary", "--format", "openmetric", str(CAPTURES[0]))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    missing = cli("summary", "--format", "openmetrics", str(tmp_path / "none.pcap"))
    assert missing.returncode != 0 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
