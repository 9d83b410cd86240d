"""The metrics of the bundled samples against what their clients recorded and against the
tables (dissector.metrics.feed through dissector.read.metrics).

Expected values come from elsewhere: the samples' manifests (the client's own record of the
messages it sent and received), the tables counted by duckdb, frames crafted by hand (the
gauges of a capture cut before its close, permits granted minus used), and numpy over a
frame run's columns.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dissector.events import (
    Conversation,
    ConversationOpened,
    Direction,
    Finding,
    FlowKey,
    FrameRun,
)
from dissector.findings import REGISTRY
from dissector.metrics.feed import MetricsFeed
from dissector.metrics.store import MetricStore, Snapshot, merge
from dissector.pulsar import frame_runs as R
from dissector.read.metrics import metrics_of
from dissector.read.options import ReaderOptions
from dissector.read.plan import plan_read
from dissector.read.runs import local_batches
from dissector.read.tables import make_builder, read_tables
from tests.support.crafted import C2B, SUBSCRIBED, TOPIC, baseline_session, write_pcap
from tests.support.samples import CAPTURES, IDS, manifest
from tests.support.scenes import faults_capture, us
from tests.support.scenes import no_flow as no_flow_scene

P = "pulsar_dissect_"
#: Samples whose client did not take every delivery the broker made (a seek drops the
#: deliveries already on their way: the client's record has fewer than the wire).
CLIENT_DROPS = {"seek"}


def sql(tables: dict[str, Any], query: str) -> Any:
    """A duckdb query over the tables (each registered under its name)."""
    con = duckdb.connect()
    for name, table in tables.items():
        con.register(name, table)
    return con.sql(query)


def by_topic(snapshot: Snapshot, family: str) -> Counter[str]:
    return Counter({labels[0]: value for labels, value in snapshot.series[P + family].items()})


@pytest.fixture(scope="module")
def measured() -> dict[str, tuple[Snapshot, dict[str, Any]]]:
    tables = ["frames", "messages", "timeline", "journeys", "findings", "anomalies"]
    return {p.name: (metrics_of([p]), read_tables([p], tables=tables)) for p in CAPTURES}


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_published_as_the_client_recorded(capture: Path, measured: Any) -> None:
    snapshot, _ = measured[capture.name]
    sent = [s for s in manifest(capture)["sent"] if s.get("result", "Ok") == "Ok"]
    topics = Counter(s.get("partition_topic") or s["topic"] for s in sent)
    sizes: Counter[str] = Counter()
    for s in sent:
        sizes[s.get("partition_topic") or s["topic"]] += s["size"]
    assert sent
    assert by_topic(snapshot, "messages_published_total") == topics
    assert by_topic(snapshot, "published_bytes_total") == sizes


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_delivered_as_the_client_recorded(capture: Path, measured: Any) -> None:
    snapshot, tables = measured[capture.name]
    received = manifest(capture)["received"]
    delivered = by_topic(snapshot, "messages_delivered_total")
    # the wire's deliveries, as the messages table has them (duckdb, not the feed)
    wire = dict(
        sql(
            tables, "select topic, count(*) from messages where kind = 'delivered' group by topic"
        ).fetchall()
    )
    assert delivered == Counter(wire)
    again = sum(1 for r in received if r["redelivery_count"] > 0)
    assert sum(snapshot.series[P + "messages_redelivered_total"].values()) == again
    # REDELIVER_UNACKNOWLEDGED_MESSAGES: the client's negative acks and redelivery requests
    record = manifest(capture)
    negative = sum(1 for a in record["acks"] if a["kind"] == "negative")
    nacks = sum(snapshot.series[P + "nacks_total"].values())
    assert nacks == negative + len(record["redelivery_requests"])
    if capture.name.split(".")[0] not in CLIENT_DROPS:
        assert delivered == Counter(r["topic_name"] for r in received)


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_frames_and_requests_as_the_tables_count_them(capture: Path, measured: Any) -> None:
    snapshot, tables = measured[capture.name]
    expected = {
        (command, direction): n
        for command, direction, n in sql(
            tables, "select command, direction, count(*) from frames group by all"
        ).fetchall()
    }
    assert snapshot.series[P + "frames_total"] == expected
    requests = {
        (command, outcome): n
        for command, outcome, n in sql(
            tables,
            "select coalesce(request_command, response_command), outcome, count(*) "
            "from timeline group by all",
        ).fetchall()
    }
    assert snapshot.series[P + "requests_total"] == requests
    acks = dict(
        sql(
            tables, "select topic, count(*) from frames where command = 'ACK' group by topic"
        ).fetchall()
    )
    assert by_topic(snapshot, "acks_total") == Counter({t or "": n for t, n in acks.items()})


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_latency_histograms_hold_the_tables_latencies(capture: Path, measured: Any) -> None:
    snapshot, tables = measured[capture.name]
    timeline = tables["timeline"].to_pandas()
    answered = timeline[timeline.outcome.isin(["success", "error"]) & timeline.latency_us.notna()]
    series = snapshot.series[P + "request_duration_seconds"]
    command = answered.request_command.fillna(answered.response_command)
    assert {k: h.count for k, h in series.items()} == {
        k: len(g) for k, g in answered.groupby([command, answered.outcome])
    }
    for (cmd, outcome), group in answered.groupby([command, answered.outcome]):
        hist = series[(cmd, outcome)]
        assert hist.sum == pytest.approx(group.latency_us.sum() / 1e6)
    sends = timeline[(timeline.request_command == "SEND") & (timeline.outcome == "success")]
    publish = snapshot.series[P + "publish_latency_seconds"]
    assert {k[0]: h.count for k, h in publish.items()} == sends.groupby("topic").size().to_dict()
    journeys = tables["journeys"].to_pandas().dropna(subset=["end_to_end_us"])
    e2e = snapshot.series[P + "end_to_end_latency_seconds"]
    expected = journeys.groupby(["topic", "subscription"]).end_to_end_us.apply(np.array)
    assert set(e2e) == set(expected.index)
    for key, values in expected.items():
        assert e2e[key].count == len(values)
        assert e2e[key].sum == pytest.approx(values.sum() / 1e6)


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_findings_and_anomalies_as_their_tables(capture: Path, measured: Any) -> None:
    snapshot, tables = measured[capture.name]
    assert snapshot.series[P + "findings_total"] == {
        (c, s): n
        for c, s, n in sql(
            tables, "select code, severity, count(*) from findings group by all"
        ).fetchall()
    }
    assert snapshot.series[P + "anomalies_total"] == {
        (c, s): n
        for c, s, n in sql(
            tables, "select code, severity, count(*) from anomalies group by all"
        ).fetchall()
    }
    gaps = sql(
        tables, "select direction, sum(length) from anomalies where code = 'tcp.gap' group by all"
    ).fetchall()
    assert snapshot.series[P + "missing_bytes_total"] == {(d,): n for d, n in gaps}


def test_a_capture_cut_before_its_close_shows_what_is_open(tmp_path: Path) -> None:
    """Baseline frames by hand: one producer, one consumer granted 1,000 permits (FLOW) and
    delivered one message; the capture ends before the close."""
    open_ = metrics_of(
        [write_pcap(tmp_path / "open.pcap", baseline_session(close=False).segs).path]
    )
    assert open_.value(P + "connections_open") == 1
    assert open_.value(P + "connections_opened_total") == 1
    assert open_.series[P + "connections_ended_total"] == {}
    assert open_.value(P + "producers_open", (TOPIC,)) == 1
    assert open_.value(P + "consumers_open", (SUBSCRIBED, "sub")) == 1
    assert open_.value(P + "consumer_permits", (SUBSCRIBED, "sub")) == 1000 - 1
    closed = metrics_of([write_pcap(tmp_path / "closed.pcap", baseline_session().segs).path])
    assert closed.value(P + "connections_open") == 0
    assert closed.series[P + "connections_ended_total"] == {("fin",): 1}
    assert closed.value(P + "producers_open", (TOPIC,)) == 0
    assert closed.value(P + "consumers_open", (SUBSCRIBED, "sub")) == 0
    assert closed.value(P + "consumer_permits", (SUBSCRIBED, "sub")) == 0


def test_several_captures_add_up() -> None:
    one, two = CAPTURES[0], CAPTURES[1]
    both = metrics_of([one, two])
    added = merge([metrics_of([one]), metrics_of([two])])
    for name in ("frames_total", "messages_published_total", "requests_total"):
        assert both.series[P + name] == added.series[P + name], name
        assert both.series[P + name]
    assert both.value(P + "connections_opened_total") == 2


def test_a_frame_run_is_counted_from_its_columns() -> None:
    """A run's type column (numpy) gives the frames by command, and its ACKs by topic."""
    types = [R.SEND, R.SEND, R.ACK, R.MESSAGE, R.ACK, R.ACK, R.SEND_RECEIPT]
    topics: list[str | None] = ["a", "a", "a", "b", "b", "a", "a"]
    rows = np.zeros((len(types), R.NCOLS), dtype=np.int64)
    rows[:, R.C_TYPE] = types
    run = FrameRun(1, Direction.CLIENT_TO_BROKER, len(types), rows.tobytes(), 0, [], [], [], topics)
    store = MetricStore()
    feed = MetricsFeed(store)
    feed.event(run)
    feed.finish()
    frames = store.snapshot().series[P + "frames_total"]
    c2b = "client_to_broker"
    assert frames == {("SEND", c2b): 2, ("ACK", c2b): 3, ("MESSAGE", c2b): 1,
                      ("SEND_RECEIPT", c2b): 1}  # fmt: skip
    assert store.snapshot().series[P + "acks_total"] == {("a",): 2, ("b",): 1}


def test_losses_count_what_is_new_since_the_last_call() -> None:
    store = MetricStore()
    feed = MetricsFeed(store)
    feed.losses(None, 0)
    feed.losses(5, 2)
    feed.losses(5, 7)
    feed.losses(9, 7)
    feed.packets(10, 1500)
    feed.packets(3, 200)
    snap = store.snapshot()
    assert snap.value(P + "kernel_dropped_packets_total") == 9
    assert snap.value(P + "skipped_packets_total") == 7
    assert snap.value(P + "packets_total") == 13
    assert snap.value(P + "captured_bytes_total") == 1700


def test_findings_counted_and_open_while_their_connection_is(tmp_path: Path) -> None:
    """The faults scene's three findings (its docstring names them); a consumer that never
    sends FLOW on a connection the capture leaves open: one finding open."""
    snap = metrics_of([faults_capture(tmp_path / "faults.pcap")])
    assert snap.series[P + "findings_total"] == {
        ("producer.send_timeout", "error"): 1,
        ("flow.no_flow_after_subscribe", "warning"): 1,
        ("producer.sequence_regression", "warning"): 1,
    }
    assert not any(snap.series[P + "findings_open"].values())  # every connection closed
    left_open = metrics_of([no_flow_scene().write(tmp_path / "open.pcap")])
    no_flow = ("flow.no_flow_after_subscribe", "warning")
    assert left_open.series[P + "findings_total"] == {no_flow: 1}
    assert left_open.series[P + "findings_open"] == {no_flow: 1}


def test_a_finding_counts_when_established_and_once(tmp_path: Path) -> None:
    """As `live` drives the feed (the builder's batches taken after every event, the
    Diagnoser's listener installed): a consumer that sends no FLOW for the flow wait (10 s)
    on a connection still open counts and is open before any findings row is made (told at
    the PING at 20 s, the first frame after the wait); the connection's FIN closes it, and
    its row, made then, does not count it again."""
    path = no_flow_scene(close=45.0).write(tmp_path / "no_flow.pcap")
    options = ReaderOptions()
    plan = plan_read(options, MetricsFeed.TABLES)
    store = MetricStore()
    feed = MetricsFeed(store)
    told: list[Finding] = []

    def listener(found: Finding) -> None:  # as live's, with --findings: both told
        told.append(found)
        feed.established(found)

    builder = make_builder(plan, options, listener=listener)
    add = builder.feeder()
    rows = 0
    seen: list[tuple[Any, int, dict[Any, float], dict[Any, float]]] = []
    for _, _, events in local_batches([path], options, plan):
        for ev in events:
            add(ev)
            feed.event(ev)
            for name, batches in builder.batches.items():
                taken = batches.take()
                rows += sum(b.num_rows for b in taken) if name == "findings" else 0
                feed.batches(name, taken)
            snap = store.snapshot()
            seen.append((ev, rows, snap.series[P + "findings_total"],
                         snap.series[P + "findings_open"]))  # fmt: skip
    builder.finish()
    for name, batches in builder.batches.items():
        feed.batches(name, batches.take())
    feed.finish()
    no_flow = ("flow.no_flow_after_subscribe", "warning")
    first = next(i for i, (_, _, total, _) in enumerate(seen) if total)
    ev, before, total, opened = seen[first]
    assert ev.last_ts == us(20.0) and ev.command_name == "PING"  # told there, once
    assert [f.code for f in told] == [no_flow[0]]
    assert before == 0 and total == {no_flow: 1} and opened == {no_flow: 1}
    ended = next(i for i, (ev, *_) in enumerate(seen) if type(ev) is Conversation)
    assert seen[ended - 1][3] == {no_flow: 1}  # open while its connection is
    assert seen[ended][2:] == ({no_flow: 1}, {no_flow: 0})  # FIN: closed, counted still
    assert seen[-1][1] == 1 and seen[-1][2:] == ({no_flow: 1}, {no_flow: 0})  # its row: once
    final = store.snapshot()
    whole = metrics_of([path])  # offline: the same
    for family in ("findings_total", "findings_open"):
        assert final.series[P + family] == whole.series[P + family], family


def test_a_finding_told_matches_its_row_by_key() -> None:
    """Hand-made: a finding told twice on an open connection, then rows: its own (same
    code, topic, entity, connection: not counted again, still open), another consumer's on
    that connection (counted, open); reconnect.storm told on one connection matches its row
    naming another of the same client, not open (counted once, closed); a finding told that
    never made a row is no longer open at the end, and stays counted."""
    store = MetricStore()
    feed = MetricsFeed(store)
    key = FlowKey("10.0.0.1", 40000, "10.0.0.2", 6650)
    for conn in (1, 2, 3):
        feed.event(ConversationOpened(conn, key, 1_000, 1))
    feed.established(_found("flow.starved", 1, key, "consumer 1 (sub s)"))
    feed.established(_found("flow.starved", 1, key, "consumer 1 (sub s)"))  # told again
    feed.established(_found("flow.starved", 2, key, "consumer 7 (sub s)"))  # never a row
    feed.established(_found("reconnect.storm", 3, key, None))
    snap = store.snapshot()
    starved = ("flow.starved", "warning")
    storm = ("reconnect.storm", "warning")
    assert snap.series[P + "findings_total"] == {starved: 2, storm: 1}
    assert snap.series[P + "findings_open"] == {starved: 2, storm: 1}
    feed.batches("findings", [_rows([
        ("flow.starved", 1, "consumer 1 (sub s)"),  # the one told
        ("flow.starved", 1, "consumer 2 (sub s)"),  # not told
        ("reconnect.storm", 4, None),  # the storm's row names a later connection (ended)
    ])])  # fmt: skip
    snap = store.snapshot()
    assert snap.series[P + "findings_total"] == {starved: 3, storm: 1}
    assert snap.series[P + "findings_open"] == {starved: 3, storm: 0}
    feed.finish()  # consumer 7's stall made no row: no longer open, still counted
    snap = store.snapshot()
    assert snap.series[P + "findings_total"] == {starved: 3, storm: 1}
    assert snap.series[P + "findings_open"] == {starved: 2, storm: 0}


def _found(code: str, conn: int, key: FlowKey, entity: str | None) -> Finding:
    return Finding(code=code, severity=REGISTRY[code].severity, ts=0, first_ts=0, last_ts=0,
                   conn_id=conn, key=key, topic=TOPIC, entity=entity, summary="", hint="",
                   count=1, value=None, unit=None, evidence=())  # fmt: skip


def _rows(rows: list[tuple[str, int, str | None]]) -> pa.RecordBatch:
    """Findings table rows (the columns the feed reads) of one client's connections."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "conn_id": conn,
                "client_ip": "10.0.0.1",
                "code": code,
                "severity": str(REGISTRY[code].severity),
                "topic": TOPIC,
                "entity": entity,
            }
            for code, conn, entity in rows
        ]
    )


def test_missing_bytes_are_the_gaps_lengths(tmp_path: Path) -> None:
    """A baseline session whose SEND segment the capture lost: that many bytes missing."""
    session = baseline_session()
    lost = next(s for s in session.segs if s.payload and s.offset and s.direction is C2B
                and b"hello pulsar" in s.payload)  # fmt: skip
    kept = [s for s in session.segs if s is not lost]
    snap = metrics_of([write_pcap(tmp_path / "gap.pcap", kept).path])
    assert snap.series[P + "missing_bytes_total"] == {("client_to_broker",): len(lost.payload)}
    assert snap.value(P + "anomalies_total", ("tcp.gap", "warning")) == 1


@pytest.mark.parametrize("capture", CAPTURES[:4] + CAPTURES[-2:], ids=IDS[:4] + IDS[-2:])
def test_batches_taken_after_every_packet_give_the_same_metrics(capture: Path) -> None:
    """As `live` drives the feed: the builder's batches taken (small ones) after each
    packet's events, the store read between; the end is the whole read's."""
    options = ReaderOptions()
    plan = plan_read(options, MetricsFeed.TABLES)
    store = MetricStore()
    feed = MetricsFeed(store)
    builder = make_builder(plan, options, end_to_end=feed.end_to_end, listener=feed.established)
    add = builder.feeder()
    taken = 0
    for _, _, events in local_batches([capture], options, plan):
        for ev in events:
            add(ev)
            feed.event(ev)
        for name, batches in builder.batches.items():
            made = batches.take()
            taken += len(made)
            feed.batches(name, made)
        store.snapshot()
    builder.finish()
    for name, batches in builder.batches.items():
        feed.batches(name, batches.take())
    feed.finish()
    whole = metrics_of([capture])
    assert taken > 10  # many small batches
    for family, series in store.snapshot().families():
        expected = whole.series[family.name]
        if family.kind == "histogram":
            assert {k: (h.cumulative(), h.count) for k, h in series.items()} == {
                k: (h.cumulative(), h.count) for k, h in expected.items()
            }, family.name
        elif family.kind == "gauge":  # a series shown at 0 once its value went: the same
            assert {k: v for k, v in series.items() if v} == {
                k: v for k, v in expected.items() if v
            }, family.name
        else:
            assert series == expected, family.name
