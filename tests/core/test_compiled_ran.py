"""`make test` ran the compiled core: a plain read took the C path, or the pure one on purpose.

Input: the installed build, and the environment the suite runs in.
Output: assertions. Expected build: PULSAR_DISSECTOR_PURE=1 -> the pure package (no
compiled module importable, every read on the Python path); otherwise the compiled core
where a C compiler is on PATH, and always under CI=true (a CI run that fell back to Python
fails here; it is never skipped).
Rule: no monkeypatching: a new interpreter runs `pulsar-dissect read` on a sample as a user
would, then reports the counters the C bindings themselves keep (`dissector._core.stats()`:
segments the walk made, frames the scan took, stream pieces the recent bytes kept).
Independent truth: the sample's TCP packets (and those with a payload) counted by scapy.
`PULSAR_DISSECTOR_CORE=0` must leave the counters at zero (the switch the differential tests
rely on really switches).
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
from dissector.capture import _source, open_capture

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "pcaps" / "produce_consume.pcap"
SWITCHES = ("PULSAR_DISSECTOR_CORE",)

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
    for name in ("dissector._core._walk", "dissector._core._frames", "dissector._core._recent"):
        if compiled_expected():
            module = importlib.import_module(name)
            assert (module.__file__ or "").endswith(".so"), module.__file__
        else:
            with pytest.raises(ImportError):
                importlib.import_module(name)
    assert compiled_expected() == _core.COMPILED
    assert (_core.frames_native is not None) == compiled_expected()
    assert (_core.recent_native is not None) == compiled_expected()


def test_a_read_takes_the_compiled_path_or_the_pure_one_on_purpose(tmp_path: Path) -> None:
    tcp_packets = sum(1 for p in rdpcap(str(SAMPLE)) if TCP in p)
    with_data = sum(1 for p in rdpcap(str(SAMPLE)) if TCP in p and len(p[TCP].payload))
    found = read_in_new_process(tmp_path)
    text = str(found["text"])
    frame_lines = len(text.splitlines())
    assert tcp_packets == 95 and frame_lines == 81  # one line per frame, no anomaly
    if not compiled_expected():
        assert found["stats"] == {}
        return
    stats = found["stats"]
    assert isinstance(stats, dict)
    # Every packet is plain Ethernet/IPv4/TCP, so the C walk parses them all (a record cut
    # by the end of the reader's window too, once the window holds it). Every frame is whole
    # and clean: the C scan takes them all.
    assert stats["segments"] == tcp_packets
    assert stats["raw_packets"] == 0 and stats["frames_taken"] == frame_lines
    # every payload is delivered in order, once: one piece each in the C recent bytes
    assert stats["recent_pieces"] == with_data
    off = read_in_new_process(tmp_path, PULSAR_DISSECTOR_CORE="0")
    zero = {
        "segments": 0,
        "raw_packets": 0,
        "packets_skipped": 0,
        "frames_taken": 0,
        "recent_pieces": 0,
    }
    assert off["stats"] == zero
    assert off["text"] == text  # the same lines either way


def test_a_record_cut_by_the_reader_window_is_walked_in_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a window far smaller than the capture, many records are cut by its end: each one,
    once the window holds it, goes to the compiled walk like the others (a Segment), not to
    the reader's own loop (a RawPacket); the items are those of one window."""

    def items() -> list[object]:
        reader = open_capture(SAMPLE)
        try:
            return list(reader.parsed())
        finally:
            reader.close()

    whole = items()
    monkeypatch.setattr(_source, "CHUNK_SIZE", 1000)  # the sample: 14 kB, 95 records
    before = _core.stats()
    cut = items()
    after = _core.stats()
    assert cut == whole and len(cut) == 95
    if compiled_expected() and _core.active():
        assert after["segments"] - before["segments"] == 95
        assert after["raw_packets"] == before["raw_packets"]
