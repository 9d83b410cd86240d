"""The fleet's journeys: each series recorded on its own, keyed, ordered and joined give the
journeys of a local read of the captures together, row for row (connection ids and packet
numbers translated: tests/support/lake.py); without Spark (dissector.frontends.
journey_events.journeys, the fleet job's steps in one process), then by the fleet job and
the data source in a local Spark session."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from dissector.capture import series as series_mod
from dissector.frontends import spark as ds
from dissector.frontends.fleet import job as fleet
from dissector.frontends.fleet import journey_events as je
from dissector.frontends.spark import expand
from dissector.pulsar.wire import MessageMetadata
from dissector.read import ReaderOptions, read_tables
from dissector.tables.schema import SCHEMAS
from tests.support.crafted import T0_US, Conn, write_pcap
from tests.support.lake import journeys_as_local, lake_table, table_rows
from tests.support.scenes import (
    Scene,
    ack,
    message,
    producer,
    receipt,
    send,
    subscribe,
    two_hosts,
    us,
)

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
TABLES = ["journeys", "frames", "conversations"]
OTHER = "persistent://public/default/other"
TABLES_SCHEMA = SCHEMAS["journeys"]
PRODUCER = "diag-producer"


def _meta(seq: int) -> MessageMetadata:
    return MessageMetadata(producer_name=PRODUCER, sequence_id=seq, publish_time=T0_US // 1000)


def fleet_and_local(paths: list[str]) -> tuple[list[str], list[str], pa.Table]:
    """(the fleet's journeys as a local read numbers them, the local read's, the fleet's)."""
    series = series_mod.group(paths, "auto")
    made = je.journeys(series, ReaderOptions())
    fleet = read_tables(paths, ReaderOptions(per_series_ids=True), tables=TABLES)
    fleet["journeys"] = made
    local = read_tables(paths, tables=TABLES)
    return journeys_as_local(fleet, local), table_rows(local["journeys"]), made


def test_the_samples_read_as_a_fleet() -> None:
    got, want, _ = fleet_and_local(expand(str(PCAPS)))
    assert len(want) > 100
    assert got == want


def test_merge_groups_are_chains_of_overlapping_series() -> None:
    """As dissector.capture.merge groups series (hand-worked): by first packet time, a
    series joins the group when it starts by the latest time of the group's series (a
    chain); a series without packets is a group of its own, first; a group with an event
    of unknown topic is joined as one."""
    spans = [
        (0, 100, 200, False),
        (1, 150, 400, False),  # overlaps 0
        (2, 390, 500, True),  # overlaps 1 only: same group, which it makes "one"
        (3, 501, 600, False),  # starts after 500: a group of its own
        (4, None, None, False),  # no packet
        (5, 600, 700, False),  # starts at 3's latest time: joins it
        (6, None, None, False),  # no packet either: a group of its own too
        (7, None, 50, False),  # none in its first file, some later: first, alone here
    ]
    assert je.groups(spans) == {
        4: (0, False),
        6: (1, False),
        7: (2, False),
        0: (3, True),
        1: (3, True),
        2: (3, True),
        3: (4, False),
        5: (4, False),
    }


def _two_hosts(tmp_path: Path, *, subscribed: bool = True) -> list[str]:
    """A producer's host and a consumer's host captured apart at the same time: two topics,
    one of them with a subscription on each; the consumer's SUBSCRIBE of the first topic
    captured or not."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p, 0.0)
    s.open(c, 0.01)
    for m in [*producer(name="p1"), *producer(pid=5, rid=9, name="p2", topic=OTHER)]:
        s.at(0, m, p)
    for m in [*(subscribe() if subscribed else []), *subscribe(cid=7, rid=8, topic=OTHER)]:
        s.at(0.01, m, c)
    s.at(1.0, send(0), p).at(1.001, send(0, pid=5), p)
    s.at(1.002, receipt(0, entry=3), p).at(1.003, receipt(0, pid=5, entry=4), p)
    s.at(1.005, message(3), c).at(1.006, message(4, cid=7), c)
    s.at(1.3, ack(3), c).at(1.4, ack(4, cid=7), c).at(2.0, send(1), p)
    s.close(3, p)
    s.close(3, c)
    files = s.write_apart({p: tmp_path / "producer-host.pcap", c: tmp_path / "consumer-host.pcap"})
    return [str(f) for f in files]


def test_two_hosts_apart_joined_by_topic(tmp_path: Path) -> None:
    got, want, made = fleet_and_local(_two_hosts(tmp_path))
    assert got == want
    rows = made.to_pylist()
    joined = [r for r in rows if r["send_ts"] is not None and r["acked_ts"] is not None]
    assert sorted(r["topic"] for r in joined) == sorted([OTHER, "persistent://public/default/diag"])


def test_two_hosts_apart_with_a_subscribe_missed(tmp_path: Path) -> None:
    """A consumer whose SUBSCRIBE was not captured: its topic is unknown, so its group of
    captures is joined as one, and its delivery still joins the producer's message."""
    got, want, made = fleet_and_local(_two_hosts(tmp_path, subscribed=False))
    assert got == want
    unnamed = [r for r in made.to_pylist() if r["subscription"] is None and r["deliveries"]]
    assert len(unnamed) == 1 and unnamed[0]["send_ts"] is not None


def test_two_hosts_apart_joined_in_time_order(tmp_path: Path) -> None:
    """A receipt the producer's host did not capture: the consumer's delivery joins the SEND
    still waiting for it by producer name and sequence id (docs/journeys.md rule 8), which
    it can only if the SEND is replayed first, as the time order of the captures says
    (the consumer's capture is the first series)."""
    s, p, c = two_hosts(PRODUCER)
    s.at(1.0, send(0, metadata=_meta(0)), p).at(1.005, message(3, metadata=_meta(0)), c)
    s.at(1.3, ack(3), c)
    files = s.write_apart({p: tmp_path / "producer-host.pcap", c: tmp_path / "consumer-host.pcap"})
    got, want, made = fleet_and_local([str(f) for f in files])
    assert got == want
    (row,) = made.to_pylist()
    assert row["send_ts"] is not None and row["acked_ts"] is not None


def test_captures_apart_in_time_are_not_joined(tmp_path: Path) -> None:
    """Captures whose times do not overlap are read one after the other, each group its own
    journeys (dissector.capture.merge): the consumer's capture, taken after the producer's
    ended, does not join its messages, in the fleet as in a local read."""
    s = Scene()
    p, c = Conn(client_port=40001), Conn(client_port=40002)
    s.open(p, 0.0)
    for m in producer(name=PRODUCER):
        s.at(0, m, p)
    s.at(1.0, send(0), p).at(1.002, receipt(0, entry=3), p)
    s.close(1.5, p)
    s.open(c, 2.0)
    for m in subscribe():
        s.at(2.0, m, c)
    s.at(2.5, message(3), c).at(2.6, ack(3), c)
    files = s.write_apart({p: tmp_path / "producer-host.pcap", c: tmp_path / "consumer-host.pcap"})
    got, want, made = fleet_and_local([str(f) for f in files])
    assert got == want
    assert made.num_rows == 2 and all(r["send_ts"] is None for r in made.to_pylist()[1:])


def test_a_capture_whose_clock_goes_back(tmp_path: Path) -> None:
    """A producer's capture whose receipt is stamped before its SEND (a clock stepped back)
    and a consumer's captured apart: replayed in the merged read's order all the same."""
    s, p, c = two_hosts(PRODUCER)
    s.at(1.0, send(0, metadata=_meta(0)), p).at(1.002, receipt(0, entry=3), p)
    s.at(1.001, message(3, metadata=_meta(0)), c).at(1.3, ack(3), c)
    s.at(1.1, send(1, metadata=_meta(1)), p).at(1.2, receipt(1, entry=4), p)
    s.at(1.15, message(4, metadata=_meta(1)), c).at(1.31, ack(4), c)
    mine = [seg for seg in s._ordered() if seg.conn == p]
    back = next(i for i, seg in enumerate(mine) if seg.ts_us == us(1.002))
    mine[back] = mine[back].replace(ts_us=us(0.9))  # written in place, stamped earlier
    write_pcap(tmp_path / "producer-host.pcap", mine)
    write_pcap(tmp_path / "consumer-host.pcap", [seg for seg in s._ordered() if seg.conn == c])
    files = [str(tmp_path / "consumer-host.pcap"), str(tmp_path / "producer-host.pcap")]
    got, want, made = fleet_and_local(files)
    assert got == want
    assert made.num_rows == 2


# ---------------------------------------------------------------------------- in Spark


def _spark_journeys_as_local(spark: SparkSession, paths: list[str], tmp_path: Path) -> list[str]:
    out = tmp_path / "out"
    fleet.dissect(spark, paths, str(out), ReaderOptions())
    tables = {name: lake_table(out, name) for name in TABLES}
    return journeys_as_local(tables, read_tables(paths, tables=TABLES))


@pytest.mark.parametrize("subscribed", [True, False])
def test_fleet_job_joins_two_hosts_captures(
    spark: SparkSession, tmp_path: Path, subscribed: bool
) -> None:
    """The producer's and the consumer's host captured apart, two inputs of the fleet job:
    its journeys table is the local read's of both captures together."""
    paths = _two_hosts(tmp_path, subscribed=subscribed)
    _, want, _ = fleet_and_local(paths)
    assert _spark_journeys_as_local(spark, paths, tmp_path) == want


def test_data_source_journeys_are_the_fleets(spark: SparkSession, tmp_path: Path) -> None:
    paths = _two_hosts(tmp_path)
    df = ds.read(spark, paths, table="journeys")
    assert df.columns == TABLES_SCHEMA.names
    got = pa.Table.from_pylist([r.asDict() for r in df.collect()], TABLES_SCHEMA)
    fleet_tables = read_tables(paths, ReaderOptions(per_series_ids=True), tables=TABLES)
    fleet_tables["journeys"] = got
    _, want, _ = fleet_and_local(paths)
    assert journeys_as_local(fleet_tables, read_tables(paths, tables=TABLES)) == want
    with pytest.raises(Exception, match=r"dissector\.spark\.read"):
        spark.read.format("pulsar").option("table", "journeys").load(paths[0]).collect()


def test_the_fleets_journeys_carry_the_messages_trace_context(tmp_path: Path) -> None:
    """Producer and consumer hosts captured apart, the message carrying a W3C traceparent:
    the fleet's journey (its entries replayed from the recorded events) has the trace
    context the property says, as the local read's has."""
    trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    meta = _meta(0)
    meta.properties.add(key="traceparent", value=f"00-{trace}-{span}-01")
    s, p, c = two_hosts(PRODUCER)
    s.at(1.0, send(0, metadata=meta), p).at(1.002, receipt(0, entry=3), p)
    s.at(1.005, message(3, metadata=meta), c).at(1.3, ack(3), c)
    files = s.write_apart({p: tmp_path / "producer.pcap", c: tmp_path / "consumer.pcap"})
    got, want, made = fleet_and_local([str(f) for f in files])
    assert got == want
    ((row),) = made.to_pylist()
    assert (row["trace_id"], row["span_id"], row["trace_format"]) == (trace, span, "w3c")
    assert row["send_ts"] is not None and row["acked_ts"] is not None  # one journey, joined
