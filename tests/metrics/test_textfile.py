"""`summary --format prometheus` read by a real node_exporter's textfile collector (Debian's
prometheus-node-exporter) and checked by promtool (Debian's prometheus): the format the
textfile collector reads, typed as declared, its values the snapshot's.

Expected values come from the snapshot the text was made from (dissector.read.metrics), and
the real programs' own reading of the files. Both programs are test dependencies (`make
testdeps` installs them with apt); without them these tests fail.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dissector.metrics.families import FAMILIES
from dissector.read.metrics import metrics_of
from tests.support.cli import cli
from tests.support.samples import CAPTURES

P = "pulsar_dissect_"
NODE_EXPORTER = "prometheus-node-exporter"
PROMTOOL = "promtool"
#: Seconds node_exporter may take to say it listens (a safety net: the test waits for the line).
DEADLINE = 60.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_textfiles(folder: Path) -> str:
    """What node_exporter, with only its textfile collector reading `folder`, serves."""
    program = shutil.which(NODE_EXPORTER)
    assert program, f"{NODE_EXPORTER} is needed: `make testdeps` installs it with apt"
    address = f"127.0.0.1:{_port()}"
    args = [
        program,
        "--collector.disable-defaults",
        "--collector.textfile",
        f"--collector.textfile.directory={folder}",
        f"--web.listen-address={address}",
    ]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(DEADLINE, proc.kill)  # never reached when it starts
    timer.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # wait for the line saying it listens
            if "Listening on" in line:
                break
        else:
            pytest.fail(f"{NODE_EXPORTER} ended before listening")
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=DEADLINE) as answer:
            return str(answer.read().decode())
    finally:
        timer.cancel()
        proc.kill()
        proc.wait()


def test_the_textfile_collector_reads_the_prometheus_format(tmp_path: Path) -> None:
    paths = [str(p) for p in CAPTURES[:3]]
    folders = {fmt: tmp_path / fmt for fmt in ("prometheus", "openmetrics")}
    for fmt, folder in folders.items():
        folder.mkdir()
        res = cli("summary", "--format", fmt, *paths)
        assert res.returncode == 0, res.stderr
        (folder / "pulsar.prom").write_text(res.stdout)
    snapshot = metrics_of(paths)
    scraped = {
        f.name: f for f in text_string_to_metric_families(scrape_textfiles(folders["prometheus"]))
    }
    assert scraped["node_textfile_scrape_error"].samples[0].value == 0
    for family in FAMILIES:
        if family.live_only:
            continue
        found = scraped.get(family.base)
        series = snapshot.series[family.name]
        if found is None:  # node_exporter leaves out a family with no sample
            assert not series and family.labels, family.name
            continue
        assert found.type == family.kind, family.name
        if family.kind != "histogram":
            values = {
                tuple(s.labels[label] for label in family.labels): s.value for s in found.samples
            }
            assert values == (series or {(): 0}), family.name
        else:
            counts = {
                tuple(s.labels[label] for label in family.labels): s.value
                for s in found.samples
                if s.name.endswith("_count")
            }
            assert counts == {k: h.count for k, h in series.items()}, family.name
    # the OpenMetrics text names a counter's family without _total: the collector's parser
    # (Prometheus text 0.0.4) then types its samples as untyped
    other = {
        f.name: f.type
        for f in text_string_to_metric_families(scrape_textfiles(folders["openmetrics"]))
    }
    assert other[P + "frames_total"] == "unknown"


def test_promtool_accepts_the_prometheus_format(tmp_path: Path) -> None:
    """promtool's lint (names, units, HELP) passes on it; on the OpenMetrics text it finds
    counters without help (their HELP names the family without `_total`)."""
    program = shutil.which(PROMTOOL)
    assert program, f"{PROMTOOL} is needed: `make testdeps` installs prometheus with apt"
    paths = [str(p) for p in CAPTURES[:3]]
    text = cli("summary", "--format", "prometheus", *paths).stdout
    checked = subprocess.run(
        [program, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    openmetrics = cli("summary", "--format", "openmetrics", *paths).stdout
    checked = subprocess.run(
        [program, "check", "metrics"], input=openmetrics, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert f"{P}frames_total no help text" in checked.stdout + checked.stderr
