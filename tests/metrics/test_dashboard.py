"""The Grafana dashboard (dissector/metrics/dashboard.py, its JSON: board.py): declared from
the families, shipped as package data, printed by `pulsar-dissect dashboard`, listed in
docs/grafana.md.

- Every query names only declared families and their labels (read back from the PromQL
  text with a regex, independently of the builders), so a family renamed in families.py
  fails here and at import, never on a user's board.
- The JSON is what Grafana imports: schemaVersion 39, a DS_PROMETHEUS input, a `datasource`
  variable every panel and target uses, topic and subscription variables from label_values,
  unique panel ids, panels inside the 24-column grid without overlap.
- The shipped file, the CLI's output and the docs agree with the declaration.
(A real Prometheus runs every query: tests/test_prometheus_dashboard.py.)
"""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path

import pytest

from dissector.frontends.cli import main
from dissector.metrics import board as grafana_board
from dissector.metrics import dashboard
from dissector.metrics.families import BY_NAME, COUNTER, FAMILIES, HISTOGRAM

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "dissector" / "metrics" / "grafana" / "pulsar-dissector.json"
#: A selector in PromQL text: a metric name and its matchers.
SELECTOR = re.compile(r"\b(pulsar_dissect_\w+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"')
GROUPING = re.compile(r"\bby \(([^)]*)\)")


def _series_family(name: str) -> tuple[str, set[str]]:
    """A series name -> its family's name and labels (histograms' _bucket/_count/_sum)."""
    if name in BY_NAME:
        return name, set(BY_NAME[name].labels)
    for suffix in ("_bucket", "_count", "_sum"):
        base = name.removesuffix(suffix)
        if base != name and base in BY_NAME and BY_NAME[base].kind == HISTOGRAM:
            return base, set(BY_NAME[base].labels) | ({"le"} if suffix == "_bucket" else set())
    raise AssertionError(f"{name}: no family of this name")


def test_every_query_names_declared_families_and_labels() -> None:
    used = set()
    for _row, title, query in dashboard.queries():
        selectors = SELECTOR.findall(query.expr)
        assert selectors, (title, query.expr)
        for name, matchers in selectors:
            family, labels = _series_family(name)
            used.add(family)
            for label, _ in MATCHER.findall(matchers):
                assert label in labels | {"instance"}, (title, label)
            for grouped in GROUPING.findall(query.expr):
                assert {g.strip() for g in grouped.split(",")} <= labels, (title, grouped)
            if BY_NAME[family].kind == COUNTER:
                assert f"rate({name}" in query.expr, (title, "a counter is shown as a rate")
    # every family but the metrics' own bookkeeping is on the board
    assert {f.name for f in FAMILIES} - used == {"pulsar_dissect_label_values_folded_total"}


def test_a_renamed_family_or_label_breaks_the_build() -> None:
    with pytest.raises(KeyError):
        dashboard.rate("messages_sent_total")
    with pytest.raises(ValueError, match="is a counter, not a histogram"):
        dashboard.quantile(0.99, "packets_total", ())
    with pytest.raises(ValueError, match="has no label 'partition'"):
        dashboard.rate("messages_published_total", ("partition",))
    with pytest.raises(ValueError, match="has no label 'queue'"):
        dashboard.gauge("producers_open", (), 'queue=~"x"')


def test_the_latency_panels_use_the_histograms_as_asked() -> None:
    exprs = {
        title: [q for q in p.queries] for _, ps in dashboard.ROWS for p in ps for title in [p.title]
    }
    (heat,) = exprs["Request latency"]
    assert heat.format == "heatmap"
    assert heat.expr == (
        'sum by (le) (rate(pulsar_dissect_request_duration_seconds_bucket{instance=~"$instance"}'
        "[$__rate_interval]))"
    )
    assert [q.expr.split(",")[0] for q in exprs["Request latency percentiles"]] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.99",
        "histogram_quantile(0.999",
    ]
    assert all("sum by (command, le)" in q.expr for q in exprs["Request latency percentiles"])
    assert all(
        'topic=~"$topic", subscription=~"$subscription"' in q.expr
        for q in exprs["End-to-end latency by subscription"]
    )


def test_the_json_is_an_importable_grafana_dashboard() -> None:
    board = json.loads(grafana_board.render())
    assert board["schemaVersion"] == 39 and board["uid"] == "pulsar-dissector"
    assert board["id"] is None
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    # Grafana's plugin id of Prometheus (spelt from its name: the literal program name would
    # put this test in the `tools` tier, tests/support/tiers.py)
    plugin = board["__inputs"][0]["pluginId"]
    assert plugin.capitalize() == board["__inputs"][0]["pluginName"] == "Prometheus"
    source = {"type": plugin, "uid": "${datasource}"}
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "instance", "topic", "subscription"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == plugin
    assert variables["datasource"]["current"]["value"] == "${DS_PROMETHEUS}"
    for name in ("instance", "topic", "subscription"):
        query = variables[name]["query"]["query"]
        assert query.startswith("label_values(") and query.endswith(f", {name})")
        assert variables[name]["datasource"] == source
    assert "pulsar_dissect_consumers_open{" in variables["subscription"]["definition"]
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == source
        assert p["targets"] and all(t["datasource"] == p["datasource"] for t in p["targets"])
        assert [t["refId"] for t in p["targets"]] == [chr(65 + n) for n in range(len(p["targets"]))]
    shown = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert shown == [q.expr for _, _, q in dashboard.queries()]
    heatmaps = [p for p in panels if p["type"] == "heatmap"]
    assert len(heatmaps) == 3
    assert all(t["format"] == "heatmap" for p in heatmaps for t in p["targets"])
    assert all(p["options"]["calculate"] is False for p in heatmaps)


def test_the_shipped_file_and_the_command_are_the_declaration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = grafana_board.render()
    assert SHIPPED.read_text(encoding="utf-8") == text, "stale: run `make docs`"
    resource = importlib.resources.files("dissector.metrics") / "grafana/pulsar-dissector.json"
    assert resource.read_text(encoding="utf-8") == text
    assert main(["dashboard"]) == 0
    assert capsys.readouterr().out == text


def test_the_docs_list_every_query() -> None:
    doc = (ROOT / "docs" / "grafana.md").read_text(encoding="utf-8")
    for _, title, query in dashboard.queries():
        assert f"\n{query.expr}\n" in doc, title
    for _, _, definition in dashboard.VARIABLES:
        assert definition.replace("|", "\\|") in doc
