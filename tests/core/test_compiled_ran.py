"""`make test` ran the compiled core: a plain read took the C path, or the pure one on purpose.

Input: the installed build, and the environment the suite runs in.
Output: assertions. Expected build: PULSAR_DISSECTOR_PURE=1 -> the pure package (no
compiled module importable, every read on the Python path); otherwise the compiled core
where a C compiler is on PATH, and always under CI=true (a CI run that fell back to Python
fails here; it is never skipped).
Rule: no monkeypatching: a new interpreter runs `pulsar-dissect read` on a sample as a user
would, then reports the counters the C bindings themselves keep (`dissector._core.stats()`:
segments the walk made, frames the scan took). Independent truth: the sample's TCP packets
counted by scapy. `PULSAR_DISSECTOR_CORE=0` must leave the counters at zero (the switch
the differential tests rely on really switches).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap

import dissector
from dissector import _core

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "pcaps" / "produce_consume.pcap"
SWITCHES = ("PULSAR_DISSECTOR_CORE", "PULSAR_DISSECTOR_CORE_FRAMES")

#: Run the command line here, then write what the compiled stages counted.
_WRAPPER = """
import contextlib, io, json, sys
import dissector
from dissector import _core
from dissector.frontends.cli import main
text = io.StringIO()
with contextlib.redirect_stdout(text):
    code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "stats": _core.stats(), "text": text.getvalue()}, f)
"""


def compiled_expected() -> bool:
    if os.environ.get("PULSAR_DISSECTOR_PURE") == "1":
        return False
    if os.environ.get("CI") == "true":
        return True
    return shutil.which(os.environ.get("CC", "cc")) is not None


def read_in_new_process(tmp_path: Path, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in SWITCHES}
    clean["PYTHONPATH"] = str(Path(dissector.__file__).resolve().parents[1])  # this build
    out = tmp_path / "stats.json"
    subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(out), "read", str(SAMPLE)],
        cwd=tmp_path,
        env={**clean, **env},
        check=True,
        capture_output=True,
    )
    found: dict[str, object] = json.loads(out.read_text())
    assert found["code"] == 0
    return found


def test_the_compiled_modules_are_there_exactly_when_expected() -> None:
    for name in ("dissector._core._walk", "dissector._core._frames"):
        if compiled_expected():
            module = importlib.import_module(name)
            assert (module.__file__ or "").endswith(".so"), module.__file__
        else:
            with pytest.raises(ImportError):
                importlib.import_module(name)
    assert compiled_expected() == _core.COMPILED
    assert (_core.frames_native is not None) == compiled_expected()


def test_a_read_takes_the_compiled_path_or_the_pure_one_on_purpose(tmp_path: Path) -> None:
    tcp_packets = sum(1 for p in rdpcap(str(SAMPLE)) if TCP in p)
    found = read_in_new_process(tmp_path)
    text = str(found["text"])
    frame_lines = len(text.splitlines())
    assert tcp_packets == 95 and frame_lines == 81  # one line per frame, no anomaly
    if not compiled_expected():
        assert found["stats"] == {}
        return
    stats = found["stats"]
    assert isinstance(stats, dict)
    # Every packet is plain Ethernet/IPv4/TCP, so the C walk parses all it walks: all but
    # the record at a place where a walk stops (the end of the reader's window), which the
    # reader's own loop takes. Every frame is whole and clean: the C scan takes them all.
    assert tcp_packets * 0.9 <= stats["segments"] <= tcp_packets
    assert stats["raw_packets"] == 0 and stats["frames_taken"] == frame_lines
    off = read_in_new_process(tmp_path, PULSAR_DISSECTOR_CORE="0")
    zero = {"segments": 0, "raw_packets": 0, "packets_skipped": 0, "frames_taken": 0}
    assert off["stats"] == zero
    assert off["text"] == text  # the same lines either way
    frames_off = read_in_new_process(tmp_path, PULSAR_DISSECTOR_CORE_FRAMES="0")
    assert frames_off["stats"] == {**stats, "frames_taken": 0}
    assert frames_off["text"] == text
