"""The bundled sample captures (pcaps/) and their manifests, for golden tests.

Input: nothing. Output: the list of captures that have a manifest, and a reader for it.
Rule: a manifest holds what the client itself reported; tests compare our tables to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PCAPS = Path(__file__).resolve().parent.parent.parent / "pcaps"


def manifest_path(capture: Path) -> Path:
    return PCAPS / (capture.name.split(".")[0] + ".manifest.json")


def manifest(capture: Path) -> dict[str, Any]:
    return dict(json.loads(manifest_path(capture).read_text()))


CAPTURES = sorted(p for p in PCAPS.glob("*.pcap*") if manifest_path(p).exists())
IDS = [p.name for p in CAPTURES]
