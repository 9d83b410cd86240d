"""The fleet's journeys without Spark: each series recorded on its own, keyed, ordered and
joined (dissector.frontends.journey_events.journeys, the fleet job's steps in one process)
give the journeys of a local read of the captures together, row for row (connection ids
and packet numbers translated: tests/support/lake.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from dissector.capture import series as series_mod
from dissector.frontends import journey_events as je
from dissector.frontends.spark import expand
from dissector.read import ReaderOptions, read_tables
from tests.support.crafted import Conn
from tests.support.lake import journeys_as_local, table_rows
from tests.support.scenes import Scene, ack, message, producer, receipt, send, subscribe

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
TABLES = ["journeys", "frames", "conversations"]
OTHER = "persistent://public/default/other"


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
