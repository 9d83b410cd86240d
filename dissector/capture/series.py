"""Group capture files into series: the rotated files of one capture point, in time order.

Input: capture paths (and a grouping mode). Output: a list of series, each a list of paths
to be read as one continuous capture, so connections spanning files are reassembled whole.
Rules, by mode:
- "auto" (default): tcpdump -C naming only: `cap.pcap`, `cap.pcap1`, `cap.pcap2`, ... (a base
  file and the same name with a number appended) form one series, base first then by number.
- "digits": also -G style names: files whose names differ only in their digits
  (`cap-20261122-1015.pcap`, `cap-20261122-1016.pcap`) form one series, in natural order.
  Opt-in, since `broker1.pcap` and `broker2.pcap` would be grouped too.
- "none": every file on its own.
Series keep the order of their first file in the sorted input, so numbering is stable.
"""

from __future__ import annotations

import os
import re

from dissector.errors import UsageError

MODES = ("auto", "digits", "none")
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")
_DIGITS = re.compile(r"\d+")


def _natural(path: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def group(paths: list[str], mode: str = "auto") -> list[list[str]]:
    if mode not in MODES:
        raise UsageError(f"series mode must be one of {', '.join(MODES)}, not {mode!r}")
    ordered = sorted(dict.fromkeys(paths), key=_natural)
    if mode == "none":
        return [[p] for p in ordered]
    groups: dict[str, list[str]] = {}
    if mode == "auto":
        names = set(ordered)
        for path in ordered:
            m = _TRAILING_DIGITS.match(path)
            base = m.group(1) if m and m.group(1) in names else path
            groups.setdefault(base, []).append(path)
        for base, members in groups.items():
            members.sort(key=lambda p: (p != base, _natural(p)))
    else:
        for path in ordered:
            directory, name = os.path.split(path)
            groups.setdefault(os.path.join(directory, _DIGITS.sub("#", name)), []).append(path)
    return sorted(groups.values(), key=lambda members: _natural(members[0]))
