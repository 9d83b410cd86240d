"""lookup.redirect_loop on a cycle: the same Redirect (from one broker to the same broker URL)
twice in one chain of lookups, below the consecutive-redirect threshold.

Input: crafted captures (tests/support/scenes.py) of one client (10.0.0.1) looking a topic
up on two brokers, A (10.0.0.2:6650) and B (10.0.0.3:6650), one connection to each: every
LOOKUP on a broker's connection, answered there.
Output: the findings.
Rule: expected values come from the scene (which broker redirected where, and which
LOOKUP_RESPONSE packets carried the Redirects), never from our output. A ping-pong
A -> B -> A -> B -> A repeats the Redirect A -> B: a loop; A -> B -> A answered Connect at A
(the Java broker's answer when the leader assigns the bundle to the broker asked first)
visits A twice and repeats no Redirect: no loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dissector.findings import FindingCode as F
from tests.support.crafted import B2C, C2B, Conn, Msg, msg
from tests.support.scenes import TOPIC, Scene, codes, findings

A = Conn(client_port=40001, broker_ip="10.0.0.2")
B = Conn(client_port=40002, broker_ip="10.0.0.3")
C = Conn(client_port=40003, broker_ip="10.0.0.4")
NAME = {A: "10.0.0.2:6650", B: "10.0.0.3:6650", C: "10.0.0.4:6650"}
URL = {conn: f"pulsar://{name}" for conn, name in NAME.items()}
CONNECT, FAILED = 1, 2  # LookupType


def _chain(
    path: list[Conn], last: int = CONNECT, urls: dict[Conn, str] = URL
) -> tuple[Scene, list[Msg]]:
    """LOOKUPs of TOPIC on the brokers of `path` in turn, 0.1 s apart: each but the last
    answered with a Redirect (authoritative, and followed as such) naming `urls[the next
    broker of the path]`; the last answered `last`. Returns the scene and its Redirects."""
    s = Scene()
    for conn in dict.fromkeys(path):
        s.open(conn)
    redirects = []
    for rid, (conn, after) in enumerate(zip(path, [*path[1:], None], strict=True), 1):
        t = rid / 10
        s.at(t, msg(C2B, "LOOKUP", topic=TOPIC, request_id=rid, authoritative=rid > 1), conn)
        answer: dict[str, Any] = {"response": last}
        if after is not None:
            answer = {"response": 0, "authoritative": True, "brokerServiceUrl": urls[after]}
        m = msg(B2C, "LOOKUP_RESPONSE", request_id=rid, **answer)
        s.at(t + 0.01, m, conn)
        if after is not None:
            redirects.append(m)
    for conn in dict.fromkeys(path):
        s.close(2, conn)
    return s, redirects


def test_a_ping_pong_between_two_brokers_is_a_loop(tmp_path: Path) -> None:
    """A -> B -> A -> B -> A, then the client gives up (the lookup at A fails): the third
    Redirect is the first's again (A to B): a cycle A -> B -> A -> B, four Redirects in all,
    far below the threshold of 20."""
    s, redirects = _chain([A, B, A, B, A], FAILED)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.LOOKUP_REDIRECT_LOOP and row["topic"] == TOPIC
    cycle = " -> ".join(NAME[c] for c in (A, B, A, B))
    assert f"a cycle of Redirects {cycle}" in row["summary"], row["summary"]
    assert f"{NAME[A]} to {URL[B]} twice" in row["summary"]
    # the cycle's three Redirects, and the fourth (B to A again) as the loop goes on
    assert row["evidence"] == [s.packet(r) for r in redirects]
    assert row["value"] == 4 and row["unit"] == "redirects"
    assert row["conn_id"] == 2  # B's connection (opened second): the loop's latest Redirect


def test_back_to_the_broker_asked_first_and_connected_is_no_loop(tmp_path: Path) -> None:
    """A -> B -> A answered Connect at A: A is visited twice, no Redirect repeats."""
    s, _ = _chain([A, B, A], CONNECT)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_redirect_repeated_in_a_later_chain_is_no_loop(tmp_path: Path) -> None:
    """A -> B connected at B; later (a new chain, after the Connect) A -> B again, connected:
    each chain holds the Redirect once."""
    s = Scene()
    s.open(A)
    s.open(B)
    for rid, t in ((1, 0.1), (3, 1.1)):
        s.at(t, msg(C2B, "LOOKUP", topic=TOPIC, request_id=rid), A)
        redirect = msg(
            B2C, "LOOKUP_RESPONSE", request_id=rid, response=0, authoritative=True,
            brokerServiceUrl=URL[B],
        )  # fmt: skip
        s.at(t + 0.01, redirect, A)
        s.at(t + 0.1, msg(C2B, "LOOKUP", topic=TOPIC, request_id=rid + 1, authoritative=True), B)
        s.at(t + 0.11, msg(B2C, "LOOKUP_RESPONSE", request_id=rid + 1, response=CONNECT), B)
    s.close(2, A).close(2, B)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_triangle_repeated_is_a_loop(tmp_path: Path) -> None:
    """A -> B -> C -> A -> B: the fourth Redirect (A to B) repeats the first: a cycle
    A -> B -> C -> A -> B."""
    s, redirects = _chain([A, B, C, A, B], CONNECT)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    cycle = "10.0.0.2:6650 -> 10.0.0.3:6650 -> 10.0.0.4:6650 -> 10.0.0.2:6650 -> 10.0.0.3:6650"
    assert f"a cycle of Redirects {cycle} (" in row["summary"], row["summary"]
    assert row["evidence"] == [s.packet(r) for r in redirects]


def test_asked_again_where_it_began_is_a_retry_not_a_cycle(tmp_path: Path) -> None:
    """A -> B; the client never asks B (it could not reach it) and starts again at A, which
    names B again, then connects at A: the Redirect A -> B twice, but not on one path."""
    s, _ = _chain([A, A, A], urls={A: URL[B]})
    assert codes(s.write(tmp_path / "c.pcap")) == []


HOSTS = {A: "pulsar://broker-a.pulsar.svc:6650", B: "pulsar://broker-b.pulsar.svc:6650"}


def test_a_ping_pong_named_by_host_names_is_a_loop(tmp_path: Path) -> None:
    """Brokers advertising host names (the capture cannot resolve them): the next LOOKUP went
    to another broker on the URL's port, so it followed; A -> B -> A -> B repeats A -> B."""
    s, redirects = _chain([A, B, A, B], urls=HOSTS)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    cycle = f"{NAME[A]} -> broker-b.pulsar.svc:6650 -> broker-a.pulsar.svc:6650 -> "
    assert f"a cycle of Redirects {cycle}broker-b.pulsar.svc:6650 (" in row["summary"]
    assert row["evidence"] == [s.packet(r) for r in redirects]


def test_a_retry_named_by_host_name_is_no_loop(tmp_path: Path) -> None:
    """The retry above with a host name: the LOOKUP after the Redirect went to the broker
    that redirected, not another: a new path each time."""
    s, _ = _chain([A, A, A], urls={A: HOSTS[B]})
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_ping_pong_behind_a_pulsar_proxy_is_a_loop(tmp_path: Path) -> None:
    """Every connection goes to the proxy (10.0.0.9:6650); each but the first names the
    broker it goes to in CONNECT's proxy_to_broker_url, which answers its LOOKUPs: the proxy
    sends the client to A, A to B, B to A, A to B again: a cycle A -> B -> A -> B."""
    s = Scene()
    proxy = {name: Conn(client_port=port, broker_ip="10.0.0.9") for name, port in
             (("first", 40010), ("A", 40011), ("B", 40012))}  # fmt: skip
    for name, conn in proxy.items():
        s.open(conn, connect=False)
        s._timed(s.sessions[conn].handshake(), 0)
        to: dict[str, Any] = {}
        if name != "first":
            to["proxy_to_broker_url"] = URL[A if name == "A" else B]
        s.at(0, msg(C2B, "CONNECT", client_version="diag-client", protocol_version=21, **to), conn)
        s.at(0, msg(B2C, "CONNECTED", server_version="diag-broker", protocol_version=21), conn)
    path = [("first", A), ("A", B), ("B", A), ("A", B)]
    redirects = []
    for rid, (asked, to_broker) in enumerate(path, 1):
        conn, t = proxy[asked], rid / 10
        s.at(t, msg(C2B, "LOOKUP", topic=TOPIC, request_id=rid, authoritative=rid > 1), conn)
        redirect = msg(
            B2C, "LOOKUP_RESPONSE", request_id=rid, response=0, authoritative=True,
            brokerServiceUrl=URL[to_broker], proxy_through_service_url=True,
        )  # fmt: skip
        s.at(t + 0.01, redirect, conn)
        redirects.append(redirect)
    for conn in proxy.values():
        s.close(1, conn)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    cycle = " -> ".join(NAME[c] for c in (A, B, A, B))
    told = f"a cycle of Redirects {cycle} (the Redirect from {NAME[A]} to {URL[B]} twice)"
    assert told in row["summary"], row["summary"]
    assert row["evidence"] == [s.packet(r) for r in redirects[1:]]
