"""The growth check's vocabulary: an input of a family, a family, and how inputs are written.

Input: records of packets (fuzz.packets) and how the input is to be read.
Output: `Input` (capture files and the read's options), `Family` (a maker of inputs at any
size and how it is judged), `write` (a capture, and its key log, in a folder).
Rule: families live in modules of their own (fuzz/growth.py's, and the per-surface
fuzz/growth_*.py) and are gathered by fuzz.growth.FAMILIES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.mutators import Rec
from fuzz.packets import pcap


@dataclass
class Input:
    """One input of a family: capture files, key logs, and how it is read."""

    captures: list[str]
    keylogs: list[str] = field(default_factory=list)
    expression: str | None = None  # filter family: the -Y expression
    #: ReaderOptions keywords of the read (e.g. {"values": True}); tables: the tables read
    #: (default every table)
    options: dict[str, Any] = field(default_factory=dict)
    tables: list[str] | None = None
    #: instead of a read: the CLI's argv, the captures put after its first word (e.g.
    #: ["diagnose", "-j", "1"]), run in the measuring process with `main` (output discarded)
    argv: list[str] | None = None


@dataclass(frozen=True)
class Family:
    name: str
    finding: str
    make: Callable[[int, Path], Input]
    n: int  # the smallest size at --scale 1
    unit: str
    memory: bool = False  # judged on peak memory (with key log - without), not time
    #: also judged on peak memory at every size (MiB), when set: the command's alone, in a
    #: process of its own (fuzz.growth._cli_peak_mib)
    max_peak_mib: float | None = None


def write(folder: Path, name: str, recs: list[Rec], keylog: str | None = None) -> Input:
    path = folder / f"{name}.pcap"
    path.write_bytes(pcap(recs))
    out = Input([str(path)])
    if keylog is not None:
        (folder / f"{name}.keys").write_text(keylog)
        out.keylogs = [str(folder / f"{name}.keys")]
    return out
