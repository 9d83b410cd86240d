"""reconnect.retry_loop and reconnect.storm on crafted captures.

retry_loop: a client (10.0.0.1) asks one broker (10.0.0.2:6650) for the same PRODUCER over
and over, each refused with ERROR ServiceNotReady (ServerError 6 of proto/pulsar_api.proto),
on a new connection each time or on one pooled connection; the default threshold
(retry_refusals 5) makes five in a row a loop and four not; a LOOKUP of the topic answered
between two refusals, a success, another error, or a non-retriable error (ProducerBusy)
breaks the run.
storm: one client opens and ends connections to one broker; the default threshold
(storm_per_minute 20) makes 20 opened and ended within a minute a storm, 19 not, nor 20 over
two minutes, nor 20 whose opening the capture missed.
Expected values come from the scenes (how many refusals, when, on which connections).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, Conn, Msg, msg
from tests.support.scenes import TOPIC, Scene, findings

NOT_READY, TOO_MANY, AUTH, PRODUCER_BUSY = 6, 14, 3, 16  # ServerError
NO_REQUEST = 2**64 - 1  # an ERROR answering no request (request_id -1)
BROKER_B = "10.0.0.3"


def _rows(path: Path, code: str) -> list[dict[str, Any]]:
    return [r for r in findings(path) if r["code"] == code]


def _producer(rid: int, name: str | None = "pinned") -> Msg:
    named: dict[str, Any] = {"producer_name": name} if name else {}
    return msg(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=rid, **named)


def _error(rid: int, error: int = NOT_READY) -> Msg:
    return msg(B2C, "ERROR", request_id=rid, error=error, message="Please redo the lookup")


def _lookup(rid: int) -> tuple[Msg, Msg]:
    return (
        msg(C2B, "LOOKUP", topic=TOPIC, request_id=rid, authoritative=False),
        msg(
            B2C, "LOOKUP_RESPONSE", request_id=rid, response=1, brokerServiceUrl="pulsar://10.0.0.2:6650",
            authoritative=True,
        ),
    )  # fmt: skip


def _refusals(
    s: Scene,
    n: int,
    *,
    start: float = 0.0,
    every: float = 1.0,
    error: int = NOT_READY,
    port: int = 41000,
    name: str | None = "pinned",
) -> list[Msg]:
    """`n` connections, each refused once (at start + i * every), then ended; the ERRORs."""
    errors = []
    for i in range(n):
        t = start + i * every
        conn = Conn(client_port=port + i)
        s.open(conn, t)
        refused = _error(i + 1, error)
        s.at(t + 0.05, _producer(i + 1, name), conn).at(t + 0.1, refused, conn)
        s.close(t + 0.2, conn)
        errors.append(refused)
    return errors  # fmt: skip


# ------------------------------------------------------------------ retry loop


def test_five_refusals_in_a_row_across_connections_are_a_loop(tmp_path: Path) -> None:
    s = Scene()
    errors = _refusals(s, 5)
    (row,) = _rows(s.write(tmp_path / "loop.pcap"), F.RECONNECT_RETRY_LOOP)
    assert (row["topic"], row["entity"], row["count"]) == (TOPIC, "producer pinned", 5)
    assert row["evidence"] == [s.packet(e) for e in errors]
    summary = row["summary"]
    for said in ("10.0.0.2:6650", "ServiceNotReady", "5 times", "over 4.0 s", "5 connections"):
        assert said in summary, (said, summary)
    assert "sent the client" not in summary  # no CLOSE_* or TOPIC_MIGRATED before
    assert "shows no LOOKUP from this client at all" in summary, summary


def test_four_refusals_are_not_a_loop(tmp_path: Path) -> None:
    s = Scene()
    _refusals(s, 4)
    assert _rows(s.write(tmp_path / "four.pcap"), F.RECONNECT_RETRY_LOOP) == []


def test_a_lookup_between_refusals_breaks_the_run(tmp_path: Path) -> None:
    """Two refusals, a LOOKUP answered (on its own connection), three refusals: no run of 5."""
    s = Scene()
    _refusals(s, 2)
    lookup = Conn(client_port=42000)
    s.open(lookup, 2.5)
    for m in _lookup(100):
        s.at(2.6, m, lookup)
    s.close(2.7, lookup)
    _refusals(s, 3, start=3.0, port=41100)
    assert _rows(s.write(tmp_path / "lookup.pcap"), F.RECONNECT_RETRY_LOOP) == []


def test_a_lookup_answered_with_an_error_breaks_the_run_too(tmp_path: Path) -> None:
    s = Scene()
    _refusals(s, 2)
    lookup = Conn(client_port=42000)
    s.open(lookup, 2.5)
    s.at(2.6, _lookup(100)[0], lookup).at(2.65, _error(100, TOO_MANY), lookup)
    s.close(2.7, lookup)
    _refusals(s, 3, start=3.0, port=41100)
    assert _rows(s.write(tmp_path / "lookup-error.pcap"), F.RECONNECT_RETRY_LOOP) == []


def test_an_unanswered_lookup_does_not_break_the_run(tmp_path: Path) -> None:
    s = Scene()
    _refusals(s, 2)
    lookup = Conn(client_port=42000)
    s.open(lookup, 2.5)
    s.at(2.6, _lookup(100)[0], lookup)
    s.close(2.7, lookup)
    _refusals(s, 3, start=3.0, port=41100)
    (row,) = _rows(s.write(tmp_path / "unanswered.pcap"), F.RECONNECT_RETRY_LOOP)
    assert row["count"] == 5


def test_a_success_or_another_error_breaks_the_run(tmp_path: Path) -> None:
    s = Scene()
    _refusals(s, 3)
    _refusals(s, 1, start=3.0, port=41100, error=TOO_MANY)  # another retriable error
    _refusals(s, 4, start=4.0, port=41200)
    assert _rows(s.write(tmp_path / "mixed.pcap"), F.RECONNECT_RETRY_LOOP) == []
    s = Scene()
    _refusals(s, 3)
    ok = Conn(client_port=41100)
    s.open(ok, 3.0)
    s.at(3.05, _producer(9), ok).at(
        3.1, msg(B2C, "PRODUCER_SUCCESS", request_id=9, producer_name="pinned"), ok
    )
    s.close(3.2, ok)
    _refusals(s, 4, start=4.0, port=41200)
    assert _rows(s.write(tmp_path / "success.pcap"), F.RECONNECT_RETRY_LOOP) == []


def test_producer_busy_is_not_retriable(tmp_path: Path) -> None:
    s = Scene()
    _refusals(s, 6, error=PRODUCER_BUSY)
    rows = findings(s.write(tmp_path / "busy.pcap"))
    assert F.RECONNECT_RETRY_LOOP not in {r["code"] for r in rows}
    assert {r["code"] for r in rows} == {F.PRODUCER_BUSY}  # its own code, per connection


def test_a_loop_on_one_pooled_connection_after_an_assigned_broker_close(tmp_path: Path) -> None:
    """Symptom #2: broker A closes the producer naming broker B; the client goes to B and
    asks again and again on one connection, refused ServiceNotReady, never looking up."""
    s = Scene()
    a = Conn(client_port=40001)
    s.open(a, 0.0)
    s.at(0.05, _producer(1), a)
    s.at(0.1, msg(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="pinned"), a)
    close = msg(
        B2C, "CLOSE_PRODUCER", producer_id=1, request_id=NO_REQUEST,
        assignedBrokerServiceUrl=f"pulsar://{BROKER_B}:6650",
    )  # fmt: skip
    s.at(1.0, close, a)
    b = Conn(client_port=40002, broker_ip=BROKER_B)
    s.open(b, 1.1)
    errors = []
    for i in range(6):
        t = 1.2 + i * 0.5
        refused = _error(10 + i)
        s.at(t, _producer(10 + i), b).at(t + 0.01, refused, b)
        errors.append(refused)
    s.close(5.0, b)
    s.close(5.0, a)
    (row,) = _rows(s.write(tmp_path / "pinned.pcap"), F.RECONNECT_RETRY_LOOP)
    assert (row["count"], row["broker_ip"]) == (6, BROKER_B)
    assert row["evidence"] == [s.packet(e) for e in errors]
    summary = row["summary"]
    assert f"{BROKER_B}:6650" in summary and "1 connection," in summary, summary
    assert "over 2.5 s" in summary, summary
    assert f"CLOSE_PRODUCER on conn 1 (packet {s.packet(close)})" in summary, summary
    assert f"pulsar://{BROKER_B}:6650" in summary, summary
    assert "shows no LOOKUP from this client at all" in summary, summary


def test_a_client_seen_looking_up_other_topics_is_not_said_to_use_http(tmp_path: Path) -> None:
    s = Scene()
    other = Conn(client_port=42000)
    s.open(other, 0.0)
    answer = _lookup(100)[1]
    elsewhere = "persistent://public/default/elsewhere"
    s.at(0.1, msg(C2B, "LOOKUP", topic=elsewhere, request_id=100), other).at(0.2, answer, other)
    s.close(0.3, other)
    _refusals(s, 5, start=1.0)
    (row,) = _rows(s.write(tmp_path / "looker.pcap"), F.RECONNECT_RETRY_LOOP)
    assert row["count"] == 5 and "LOOKUP from this client at all" not in row["summary"]


def test_an_unnamed_producer_is_keyed_by_its_topic(tmp_path: Path) -> None:
    s = Scene()
    _refusals(s, 5, name=None)
    (row,) = _rows(s.write(tmp_path / "unnamed.pcap"), F.RECONNECT_RETRY_LOOP)
    assert (row["entity"], row["count"]) == (None, 5)
    assert "an unnamed producer" in row["summary"]


# ------------------------------------------------------------------ storm


def _storm(s: Scene, n: int, every: float, *, syn: bool = True, errors: int = 0) -> None:
    """`n` connections opened every `every` seconds, each ended 0.5 s later; the first
    `errors` of them after an ERROR AuthenticationError."""
    for i in range(n):
        t = i * every
        conn = Conn(client_port=43000 + i)
        s.open(conn, t, connect=syn)
        if not syn:
            s.at(t, msg(C2B, "PING"), conn)
        if i < errors:
            s.at(
                t + 0.1,
                msg(B2C, "ERROR", request_id=NO_REQUEST, error=AUTH, message="expired"),
                conn,
            )
        s.close(t + 0.5, conn)


def test_twenty_connections_in_a_minute_are_a_storm(tmp_path: Path) -> None:
    s = Scene()
    _storm(s, 20, 3.0, errors=12)  # opened 0 .. 57 s, ended by 57.5 s
    path = s.write(tmp_path / "storm.pcap")
    (row,) = _rows(path, F.RECONNECT_STORM)
    assert (row["count"], row["value"], row["unit"]) == (20, 20.0, "connections/min")
    summary = row["summary"]
    assert "10.0.0.1 opened and ended 20 connections to 10.0.0.2:6650" in summary, summary
    assert "(20 in all)" in summary, summary
    assert "12 ended (fin) after ERROR AuthenticationError" in summary, summary
    assert "8 ended (fin) after CONNECTED, with no producer or consumer" in summary, summary
    syns = [n for n, seg in enumerate(s._ordered(), 1) if seg.flags == "S"]
    assert len(syns) == 20  # each connection's first packet, in the order they opened
    assert row["evidence"] == syns[:9] + syns[-1:]  # the first ones and the last


def test_nineteen_connections_in_a_minute_are_not_a_storm(tmp_path: Path) -> None:
    s = Scene()
    _storm(s, 19, 3.0)
    assert _rows(s.write(tmp_path / "nineteen.pcap"), F.RECONNECT_STORM) == []


def test_twenty_connections_over_two_minutes_are_not_a_storm(tmp_path: Path) -> None:
    s = Scene()
    _storm(s, 20, 6.0)  # 10 a minute
    assert _rows(s.write(tmp_path / "slow.pcap"), F.RECONNECT_STORM) == []


def test_connections_whose_opening_was_missed_do_not_count(tmp_path: Path) -> None:
    s = Scene()
    _storm(s, 25, 1.0, syn=False)
    assert _rows(s.write(tmp_path / "midstream.pcap"), F.RECONNECT_STORM) == []
