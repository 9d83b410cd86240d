"""The Grafana dashboard's JSON model, made from its declaration (`dashboard`).

Input: `dashboard.ROWS` and `dashboard.VARIABLES`.
Output: `board()` (the dashboard as Grafana's JSON model, schemaVersion 39, a Prometheus
data source chosen at import: `__inputs` DS_PROMETHEUS, or the `datasource` variable) and
`render()` (its text: what `pulsar-dissect dashboard` prints and what ships as
dissector/metrics/grafana/pulsar-dissector.json).
Rules:
- Every panel and target uses the `datasource` variable; rows and panels are laid out left
  to right on Grafana's 24-column grid, wrapping, each 8 high; ids in order.
- Deterministic: the same declaration gives the same bytes (sorted keys, no ids of this
  run), so the shipped file can be checked for freshness like the docs.
"""

from __future__ import annotations

import json
from typing import Any

from dissector.metrics.dashboard import ROWS, VARIABLES, Panel, Query

#: The data source every panel uses: the `datasource` variable (import sets it).
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
UID = "pulsar-dissector"
TITLE = "Pulsar dissector"
SCHEMA_VERSION = 39
_WIDTH = 24  # Grafana's grid columns


def _target(query: Query, ref: int) -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": query.expr,
        "format": query.format,
        "legendFormat": query.legend,
        "range": True,
        "refId": chr(ord("A") + ref),
    }


def _panel(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "datasource": DATASOURCE,
        "description": panel.description,
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "id": pid,
        "targets": [_target(q, n) for n, q in enumerate(panel.queries)],
        "title": panel.title,
        "type": panel.type,
    }
    if panel.type == "heatmap":
        out["options"] = {
            "calculate": False,
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
            "yAxis": {"axisPlacement": "left", "unit": panel.unit},
            "rowsFrame": {"layout": "auto"},
            "tooltip": {"mode": "single", "yHistogram": True},
        }
    else:
        out["fieldConfig"]["defaults"]["custom"] = {"fillOpacity": 10, "showPoints": "never"}
        out["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    return out


def _panels() -> list[dict[str, Any]]:
    """Rows and their panels, laid out left to right, wrapping at 24 columns."""
    out: list[dict[str, Any]] = []
    pid, y = 1, 0
    for title, panels in ROWS:
        out.append({"collapsed": False, "gridPos": {"h": 1, "w": _WIDTH, "x": 0, "y": y},
                    "id": pid, "panels": [], "title": title, "type": "row"})  # fmt: skip
        pid, y, x = pid + 1, y + 1, 0
        for panel in panels:
            if x + panel.width > _WIDTH:
                x, y = 0, y + 8
            out.append(_panel(panel, pid, x, y))
            pid, x = pid + 1, x + panel.width
        y += 8
    return out


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": query,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "query": {"query": query, "refId": f"{name}-query"},
        "refresh": 2,
        "sort": 1,
        "type": "query",
    }


def board() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (import it, or provision it as a file)."""
    datasource = {
        "current": {"selected": False, "text": "Prometheus", "value": "${DS_PROMETHEUS}"},
        "hide": 0,
        "includeAll": False,
        "label": "data source",
        "multi": False,
        "name": "datasource",
        "query": "prometheus",
        "refresh": 1,
        "type": "datasource",
    }
    return {
        "__inputs": [
            {
                "description": "The Prometheus that scrapes `pulsar-dissect live --metrics`",
                "label": "Prometheus",
                "name": "DS_PROMETHEUS",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
                "type": "datasource",
            },
        ],
        "__requires": [
            {"id": "grafana", "name": "Grafana", "type": "grafana", "version": "10.0.0"},
            {"id": "prometheus", "name": "Prometheus", "type": "datasource", "version": "1.0.0"},
            {"id": "heatmap", "name": "Heatmap", "type": "panel", "version": ""},
            {"id": "timeseries", "name": "Time series", "type": "panel", "version": ""},
        ],
        "annotations": {"list": []},
        "description": "Apache Pulsar traffic as `pulsar-dissect live --metrics` sees it "
        "on the wire: capture health, request, publish and end-to-end latencies, "
        "throughput, producers and consumers, findings and anomalies.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [],
        "liveNow": False,
        "panels": _panels(),
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["pulsar", "pulsar-dissector"],
        "templating": {"list": [datasource, *(_variable(*v) for v in VARIABLES)]},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": TITLE,
        "uid": UID,
        "version": 1,
        "weekStart": "",
    }


def render() -> str:
    """The dashboard's JSON text (sorted keys, two-space indent, a final newline)."""
    return json.dumps(board(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
