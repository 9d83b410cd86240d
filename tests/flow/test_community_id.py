"""The Community ID column: the spec's published vectors, and tshark's ids on the samples.

Expected values come from corelight/community-id-spec (baseline/README.md tables and
baseline/baseline_deflt.json, baseline_seed1.json, made by the reference implementation from
pcaps/combined.pcap.gz) and from tshark's `communityid` dissector run here on the bundled
captures, never from our own output.
Rule: tshark is a test dependency (`make testdeps` installs it); without it the tshark test
fails, and one id recorded from tshark 4.0.17 still checks a sample.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from dissector.flow.community_id import TCP, community_id
from dissector.read import read_capture
from tests.support.crafted import Conn, baseline_session, write_pcap
from tests.support.samples import CAPTURES, IDS, PCAPS, manifest

UDP, SCTP = 17, 132

#: (proto, src, src port, dst, dst port, seed, Community ID): the spec's tables (README, both
#: directions of each flow) and the TCP, UDP and SCTP flows of its JSON baselines.
SPEC_VECTORS = [
    (TCP, "1.2.3.4", 1122, "5.6.7.8", 3344, 0, "1:wCb3OG7yAFWelaUydu0D+125CLM="),
    (TCP, "5.6.7.8", 3344, "1.2.3.4", 1122, 0, "1:wCb3OG7yAFWelaUydu0D+125CLM="),
    (UDP, "1.2.3.4", 1122, "5.6.7.8", 3344, 0, "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg="),
    (UDP, "5.6.7.8", 3344, "1.2.3.4", 1122, 0, "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg="),
    (SCTP, "1.2.3.4", 1122, "5.6.7.8", 3344, 0, "1:EKt4MsxuyaE6mL+hmrEkQ9csDD8="),
    (TCP, "1.2.3.4", 1122, "5.6.7.8", 3344, 1, "1:HhA1B+6CoLbiKPEs5nhNYN4XWfk="),
    (TCP, "5.6.7.8", 3344, "1.2.3.4", 1122, 1, "1:HhA1B+6CoLbiKPEs5nhNYN4XWfk="),
    (UDP, "1.2.3.4", 1122, "5.6.7.8", 3344, 1, "1:OShq+iKDAMVouh/4bMxB9Sz4amw="),
    (SCTP, "5.6.7.8", 3344, "1.2.3.4", 1122, 1, "1:uitchpn5MMGAQKBJh7bIr/bAr7s="),
    (TCP, "128.232.110.120", 34855, "66.35.250.204", 80, 0, "1:LQU9qZlK+B5F3KDmev6m5PMibrg="),
    (TCP, "66.35.250.204", 80, "128.232.110.120", 34855, 0, "1:LQU9qZlK+B5F3KDmev6m5PMibrg="),
    (TCP, "128.232.110.120", 34855, "66.35.250.204", 80, 1, "1:3V71V58M3Ksw/yuFALMcW0LAHvc="),
    (
        TCP,
        "2001:470:e5bf:dead:4957:2174:e82c:4887",
        63943,
        "2607:f8b0:400c:c03::1a",
        25,
        0,
        "1:/qFaeAR+gFe1KYjMzVDsMv+wgU4=",
    ),
    (
        TCP,
        "2607:f8b0:400c:c03::1a",
        25,
        "2001:470:e5bf:dead:4957:2174:e82c:4887",
        63943,
        0,
        "1:/qFaeAR+gFe1KYjMzVDsMv+wgU4=",
    ),
    (
        TCP,
        "2001:470:e5bf:dead:4957:2174:e82c:4887",
        63943,
        "2607:f8b0:400c:c03::1a",
        25,
        1,
        "1:eJYTW6AOzFLlSUoESovMjnu7rMw=",
    ),
    (UDP, "192.168.1.52", 54585, "8.8.8.8", 53, 0, "1:d/FP5EW3wiY1vCndhwleRRKHowQ="),
    (UDP, "8.8.8.8", 53, "192.168.1.52", 54585, 1, "1:Q9We8WO3piVF8yEQBNJF4uiSVrI="),
    # Same port both sides: the addresses alone order the endpoints.
    (SCTP, "192.168.170.8", 7, "192.168.170.56", 7, 0, "1:MP2EtRCAUIZvTw6MxJHLV7N7JDs="),
    (SCTP, "192.168.170.56", 7, "192.168.170.8", 7, 1, "1:5w3ZRjeKBzqT3zsaEECDGjUbYeg="),
]


@pytest.mark.parametrize(("proto", "src", "sport", "dst", "dport", "seed", "want"), SPEC_VECTORS)
def test_spec_vectors(
    proto: int, src: str, sport: int, dst: str, dport: int, seed: int, want: str
) -> None:
    assert community_id(src, sport, dst, dport, proto, seed) == want


def test_not_an_ip_address_gives_no_id() -> None:
    assert community_id("not-an-address", 1, "10.0.0.1", 2) is None


#: Every table that has a connection carries its id.
TABLES = ("frames", "messages", "anomalies", "conversations", "timeline", "entities")

#: tshark 4.0.17 (`-r pcaps/produce_consume.pcap --enable-protocol communityid -T fields
#: -e communityid`): the one connection of that sample, both directions.
PRODUCE_CONSUME_TSHARK = "1:1eSUzTQm+rKRNvKTW8+cV0q8sDc="


def ids_by_conn(path: Path, port: int = 6650) -> dict[tuple[tuple[str, int], ...], str]:
    """Our Community ID of each connection of a capture, by its two endpoints (sorted);
    every row of every table of a connection must hold the same id."""
    cap = read_capture(path, ports=[port])
    conv = cap.conversations
    by_conn = dict(zip(conv["conn_id"], conv["community_id"], strict=True))
    for name in TABLES:
        table = getattr(cap, name)
        for conn_id, cid in zip(table["conn_id"], table["community_id"], strict=True):
            assert cid == by_conn[conn_id], (name, conn_id)
    return {
        tuple(sorted([(r.client_ip, r.client_port), (r.broker_ip, r.broker_port)])): r.community_id
        for r in conv.itertuples()
    }


def tshark_ids(path: Path) -> dict[tuple[tuple[str, int], ...], str]:
    """tshark's Community ID of each TCP connection in a capture, by its two endpoints."""
    fields = ["ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst", "tcp.dstport"]
    args = ["-T", "fields", *(a for f in fields + ["communityid"] for a in ("-e", f))]
    proc = subprocess.run(
        ["tshark", "-n", "-r", str(path), "--enable-protocol", "communityid", "-Y", "tcp", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out: dict[tuple[tuple[str, int], ...], str] = {}
    for line in proc.stdout.splitlines():
        src4, src6, sport, dst4, dst6, dport, cid = line.split("\t")
        ends = tuple(sorted([(src4 or src6, int(sport)), (dst4 or dst6, int(dport))]))
        assert out.setdefault(ends, cid) == cid, ends  # one id per connection, both directions
    return out


def test_produce_consume_id_is_the_one_tshark_recorded() -> None:
    path = PCAPS / "produce_consume.pcap"
    ours = ids_by_conn(path, manifest(path)["broker_port"])
    assert list(ours.values()) == [PRODUCE_CONSUME_TSHARK]


@pytest.mark.parametrize("path", CAPTURES, ids=IDS)
def test_every_sample_has_tsharks_ids(path: Path) -> None:
    assert shutil.which("tshark"), "tshark is needed: `make testdeps` installs it with apt"
    ours = ids_by_conn(path, manifest(path)["broker_port"])
    assert ours and ours == tshark_ids(path)


@pytest.mark.parametrize(
    "conn",
    [
        Conn(client_ip="2001:db8::9", broker_ip="2001:db8::2"),  # IPv6, client's address larger
        Conn(client_ip="10.0.0.9", broker_ip="10.0.0.2"),  # IPv4, client's address larger
        Conn(client_ip="10.0.0.1", broker_ip="10.0.0.2"),  # IPv4, broker's address larger
    ],
    ids=["v6", "v4-client-larger", "v4-broker-larger"],
)
def test_crafted_connections_have_tsharks_ids(tmp_path: Path, conn: Conn) -> None:
    assert shutil.which("tshark"), "tshark is needed: `make testdeps` installs it with apt"
    path = write_pcap(tmp_path / "crafted.pcap", baseline_session(conn).segs).path
    ours = ids_by_conn(path)
    assert ours and ours == tshark_ids(path)
