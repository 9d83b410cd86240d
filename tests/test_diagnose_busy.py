"""producer.busy on a crafted capture: one row per topic a connection's producers were
refused on, each naming its refused producers and counting its refusals.

The scene refuses producers on two topics of one connection (ProducerBusy, then twice
ProducerFenced); the rows expected follow from that (which PRODUCER named which topic,
which ERROR answered it: ServerError 16 and 25 of proto/pulsar_api.proto), not from the
dissector's output. A producer accepted on a third topic is no row.
"""

from __future__ import annotations

from pathlib import Path

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, msg
from tests.support.scenes import Scene, findings, producer

BUSY, FENCED = 16, 25  # ServerError.ProducerBusy, ServerError.ProducerFenced
ONE = "persistent://public/default/busy-one"
TWO = "persistent://public/default/busy-two"
OK = "persistent://public/default/busy-ok"


def _refused(pid: int, name: str, topic: str, error: int) -> tuple[object, object]:
    asked = msg(C2B, "PRODUCER", topic=topic, producer_id=pid, request_id=pid, producer_name=name)
    return asked, msg(B2C, "ERROR", request_id=pid, error=error, message=f"no {name}")


def test_refusals_on_two_topics_are_a_row_each(tmp_path: Path) -> None:
    s = Scene()
    s.open()
    refusals = {
        (1, "p-one", ONE, BUSY): 1.0,
        (2, "p-two", TWO, FENCED): 2.0,
        (3, "p-three", TWO, FENCED): 3.0,
    }
    errors = {}
    for (pid, name, topic, error), t in refusals.items():
        asked, refused = _refused(pid, name, topic, error)
        s.at(t, asked).at(t + 0.1, refused)  # type: ignore[arg-type]
        errors[pid] = refused
    for m in producer(pid=4, rid=4, name="p-ok", topic=OK):
        s.at(4.0, m)
    s.close(5.0)
    rows = findings(s.write(tmp_path / "c.pcap"))
    assert [(r["code"], r["topic"], r["count"], r["entity"]) for r in rows] == [
        (F.PRODUCER_BUSY, ONE, 1, "producer 1 (p-one)"),
        (F.PRODUCER_BUSY, TWO, 2, "producer 2 (p-two), producer 3 (p-three)"),
    ]
    one, two = rows
    assert one["evidence"] == [s.packet(errors[1])]  # type: ignore[arg-type]
    assert two["evidence"] == [s.packet(errors[2]), s.packet(errors[3])]  # type: ignore[arg-type]
    assert "ProducerBusy" in one["summary"] and "ProducerFenced" in two["summary"]
    assert one["conn_id"] == two["conn_id"]
