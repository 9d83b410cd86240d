"""The HTML report, rendered by a real browser (headless Chromium, network off).

A crafted capture with two connections, a bad checksum and a lost segment: the page must
render (not blank), hold every section and plot, show as many connections and anomaly rows
as were crafted, and its numbers must equal those of the tables they come from. Nothing on
the page may point outside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dissector.read import read_tables
from tests.support.cli import cli
from tests.support.crafted import C2B, Conn, Session, baseline_msgs, msg, write_pcap
from tests.support.html_tables import page_tables

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECTIONS = (
    "findings", "overview", "latency", "subscriptions", "throughput", "ladders", "entities",
    "anomalies",
)  # fmt: skip


def crafted(tmp_path: Path) -> Path:
    """Connection 1: the baseline session, one SEND with a wrong checksum, one segment of
    PINGs lost (a gap). Connection 2: the baseline session, clean."""
    one = Session(Conn(client_port=41001))
    one.handshake()
    one.exchange(baseline_msgs())
    one.exchange([msg(C2B, "SEND", producer_id=1, sequence_id=9, payload=b"x", checksum=7)])
    ping = msg(C2B, "PING").data
    lost = one.send(C2B, ping * 3)
    one.send(C2B, ping)
    one.close()
    two = Session(Conn(client_port=41002))
    two.handshake()
    two.exchange(baseline_msgs())
    two.close()
    segs = [s for s in one.segs if s is not lost] + two.segs
    return write_pcap(tmp_path / "crafted.pcap", segs).path


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing: make testdeps installs it")
        pytest.skip("chromium is not installed (make testdeps installs it)")
    tmp = tmp_path_factory.mktemp("report")
    capture = crafted(tmp)
    out = tmp / "report.html"
    res = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "report", str(capture), "-o", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    browser = [
        *(CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu"),
        *("--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9"),
    ]
    dom = subprocess.run(
        [*browser, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    shot = tmp / "shot.png"
    subprocess.run(
        [*browser, "--window-size=1200,2400", f"--screenshot={shot}", out.as_uri()],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    return capture, shot, dom, out.read_text()


def count_of(dom: str, element_id: str) -> int:
    found = re.search(rf'id="{element_id}">(\d+)<', dom)
    assert found, element_id
    return int(found.group(1))


def rows_of(dom: str, table_id: str) -> int:
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert found, table_id
    return found.group(1).count("<tr") - 1  # less the header


def test_what_went_wrong_comes_first_and_points_at_the_ladder(
    page: tuple[Path, Path, str, str],
) -> None:
    """The crafted SEND with a wrong checksum (conn 1, producer -> broker) is an error
    finding, listed first; it links to conn 1's ladder, where its packet is marked. (Conn 2
    repeats conn 1's session from the same client: its producer's sequence restarts at 0 and
    its subscription gets message 7:3 again after conn 1 acknowledged it: two warnings.)"""
    _, _, dom, _ = page
    assert dom.index('<section id="findings">') < dom.index('<section id="overview">')
    section = dom[dom.index('<section id="findings">') : dom.index('<section id="overview">')]
    codes = re.findall(r"<code>([a-z_.]+)</code>", section)
    assert codes == [
        "checksum.mismatch_hop",
        "producer.sequence_regression",
        "consumer.redelivered_after_ack",
    ]
    assert '<a href="#ladder-1">conn 1</a>' in section and "producer -&gt; broker" in section
    assert 'id="ladder-1"' in dom
    ladder = dom[dom.index('id="ladder-1"') :]
    assert "! checksum.mismatch_hop: evidence" in ladder[: ladder.index("</details>")]


def test_the_page_renders_and_is_not_blank(page: tuple[Path, Path, str, str]) -> None:
    _, shot, dom, _ = page
    assert shot.exists()
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.std() > 10  # text and plots, not a blank page
    for section in SECTIONS:
        assert f'<section id="{section}">' in dom, section
    assert dom.count('class="plot"') >= 2  # the latency and throughput plots


def test_connections_and_anomalies_are_those_crafted(page: tuple[Path, Path, str, str]) -> None:
    _, _, dom, _ = page
    assert count_of(dom, "connection-count") == 2
    assert rows_of(dom, "connections") == 2
    assert dom.count('class="ladder"') == 2
    # one bad checksum, one gap (the lost segment): each a row, each marked on a ladder
    assert rows_of(dom, "anomaly-rows") == count_of(dom, "anomaly-count")
    assert "pulsar.bad_checksum" in dom and "tcp.gap" in dom
    assert dom.count('class="mark ') >= 2


def test_numbers_equal_the_tables(page: tuple[Path, Path, str, str]) -> None:
    capture, _, dom, _ = page
    tables = read_tables(capture)
    assert count_of(dom, "frame-count") == tables["frames"].num_rows
    assert count_of(dom, "message-count") == tables["messages"].num_rows
    assert count_of(dom, "anomaly-count") == tables["anomalies"].num_rows
    commands = tables["frames"].column("command").to_pylist()
    shown = dict(re.findall(r"<tr><td>([A-Z_]+)</td><td class=\"n\">(\d+)</td></tr>",
                            re.search(r'id="count-commands">(.*?)</table>', dom, re.S).group(1)))  # type: ignore[union-attr]  # fmt: skip
    assert {k: int(v) for k, v in shown.items()} == {c: commands.count(c) for c in set(commands)}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href", "action") and v]


def test_nothing_leaves_the_page(page: tuple[Path, Path, str, str]) -> None:
    _, _, _, source = page
    links = _Links()
    links.feed(source)
    assert links.urls, "the page has its plots and navigation"
    assert all(u.startswith(("data:", "#")) for u in links.urls), links.urls
    assert "default-src 'none'" in source  # the browser itself refuses any fetch
    assert not re.search(r"url\(\s*['\"]?https?:", source)


def test_consumers_show_their_acks_and_redeliveries(page: tuple[Path, Path, str, str]) -> None:
    """Each crafted connection has one consumer that got one MESSAGE and acked it."""
    _, _, dom, _ = page
    table = re.search(r'<table id="entities-table">(.*?)</table>', dom, re.S)
    assert table
    consumers = re.findall(
        r"<tr><td>(\d+)</td><td>consumer</td>.*?"
        r'<td class="n">(\d+)</td><td class="n">(\d+)</td></tr>',
        table.group(1),
        re.S,
    )
    assert sorted(consumers) == [("1", "1", "0"), ("2", "1", "0")]


def test_subscriptions_are_those_crafted_and_the_summarys(
    page: tuple[Path, Path, str, str],
) -> None:
    """Both connections' consumers (subscription `sub` of crafted-in) get message 7:3 and
    ack it: one message of the subscription, delivered twice, acknowledged; the summary
    of the capture says the same."""
    capture, _, dom, _ = page
    table = re.search(r'<table id="subscriptions-table">(.*?)</table>', dom, re.S)
    assert table
    cells = re.findall(r"<td(?: class=\"n\")?>([^<]*)</td>", table.group(1))
    assert cells == ["persistent://public/default/crafted-in", "sub", "1", "1", "1", "0"]
    res = cli("summary", "--format", "json", str(capture))
    assert res.returncode == 0, res.stderr
    (sub,) = json.loads(res.stdout)["journeys"]["subscriptions"]
    assert cells == [sub["topic"], sub["subscription"], *(
        str(sub[k]) for k in ("messages", "delivered", "delivered_twice", "not_acked")
    )]  # fmt: skip


def test_latency_table_shows_the_tail_percentiles(page: tuple[Path, Path, str, str]) -> None:
    """Per request command: count, p50, p90, p99, p99.9, p99.99 and max (ms), each the
    standard library's (`statistics.quantiles`, inclusive: linear between the closest ranks)
    of the answered requests' latencies in the timeline table."""
    capture, _, _, source = page
    head, *rows = page_tables(source)["latency-table"]
    assert head == ["request", "count", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "p99.99 ms",
                    "max ms"]  # fmt: skip
    timeline = read_tables(capture)["timeline"].to_pylist()
    latencies: dict[str, list[int]] = {}
    for r in timeline:
        if r["outcome"] in ("success", "error"):
            latencies.setdefault(r["request_command"], []).append(r["latency_us"])
    assert sorted(row[0] for row in rows) == sorted(latencies) and rows
    for command, count, *ms in rows:
        us = latencies[command]
        cuts = statistics.quantiles(us, n=10_000, method="inclusive") if len(us) > 1 else None
        want = [us[0] if cuts is None else cuts[k - 1] for k in (5000, 9000, 9900, 9990, 9999)]
        assert int(count) == len(us)
        assert ms == [f"{round(v / 1000, 3):.3f}" for v in [*want, max(us)]], command
