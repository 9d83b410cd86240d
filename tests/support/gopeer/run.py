"""Our Go peer (main.go) run against a broker: the Go client's own record of what it did.

Input:  a service URL, a topic, a subscription and the run's shape: a scenario (plain, batch,
        chunk), a compression codec (none, lz4, zlib, zstd), a count, a size and a chunk bound
        (main.go's header says what each means).
Output: `run_go(...)`, the record (a dict from the program's JSON: what it sent, with the ids
        the broker gave, and what it received and acknowledged).
Rule:   the program is built by build.binary() (once per source); it runs to its end,
        bounded by RUN_TIMEOUT (generous), and a non-zero exit or a missing record raises
        with its output's tail. Nothing here reads our dissector's output.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tests.support.build_cache import run_checked
from tests.support.gopeer.build import binary

RUN_TIMEOUT = 300.0


def run_go(
    url: str,
    topic: str,
    subscription: str,
    *,
    scenario: str = "plain",
    compression: str = "none",
    count: int = 1,
    size: int = 1,
    chunk: int = 0,
) -> dict[str, Any]:
    """Run the Go peer once against `url`; its record."""
    flags: dict[str, object] = {"url": url, "topic": topic, "sub": subscription}
    flags |= {"scenario": scenario, "compression": compression, "count": count}
    flags |= {"size": size, "chunk": chunk}
    with tempfile.TemporaryDirectory(prefix="gopeer-") as tmp:
        out = Path(tmp) / "record.json"
        argv = [str(binary())]
        for name, value in (*flags.items(), ("out", out)):
            argv += [f"-{name}", str(value)]
        run_checked(argv, "the Go peer", RUN_TIMEOUT)
        if not out.exists():
            raise RuntimeError(f"the Go peer wrote no record: {' '.join(argv)}")
        record: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return record
