"""The bundled sample captures (pcaps/) and their manifests, for golden tests.

Input: nothing. Output: the list of captures that have a manifest, and a reader for it;
`identity`/`rows`, a message as the manifest and the messages table can both tell it;
`split_pcap`, a capture cut into the files of a rotated series.
Rule: a manifest holds what the client itself reported; tests compare our tables to it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

PCAPS = Path(__file__).resolve().parent.parent.parent / "pcaps"


def manifest_path(capture: Path) -> Path:
    return PCAPS / (capture.name.split(".")[0] + ".manifest.json")


def manifest(capture: Path) -> dict[str, Any]:
    return dict(json.loads(manifest_path(capture).read_text()))


CAPTURES = sorted(p for p in PCAPS.glob("*.pcap*") if manifest_path(p).exists())
IDS = [p.name for p in CAPTURES]


def identity(sha: str, size: int, key: str | None, props: Any) -> tuple[Any, ...]:
    key = key if isinstance(key, str) and key else None  # pandas gives NaN for null
    return (sha, int(size), key, tuple(sorted(dict(props or {}).items())))


def rows(df: Any) -> list[tuple[Any, ...]]:
    return [
        identity(r.payload_sha256, r.payload_size, r.key, r.properties) for r in df.itertuples()
    ]


def split_pcap(source: Path, parts: list[Path], cuts: list[int]) -> None:
    """Write source's records into several pcap files, cutting after the given records."""
    data = source.read_bytes()
    header, pos = data[:24], 24
    records = []
    while pos < len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        records.append(data[pos : pos + 16 + caplen])
        pos += 16 + caplen
    bounds = [0, *cuts, len(records)]
    for path, lo, hi in zip(parts, bounds, bounds[1:], strict=False):
        path.write_bytes(header + b"".join(records[lo:hi]))
