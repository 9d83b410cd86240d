"""What the compiled core shares with Python is declared once, on the Python side.

Input: scripts/gen_core_headers.py, the built extension (where a compiler was).
Output: assertions: fields.h and layout.h are what the generator makes today from the
descriptors and dissector/_core/layout.py, and the loaded extension was built from them
(its column names are layout's, in order).
Rule: a constant changed on one side only fails here, not as wrong rows far downstream.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dissector import _core
from dissector._core import layout

ROOT = Path(__file__).resolve().parents[2]


def test_the_generated_headers_are_fresh() -> None:
    """fields.h from the descriptors, layout.h from layout.py (scripts/gen_core_headers.py)."""
    script = ROOT / "scripts" / "gen_core_headers.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(_core.frames_native is None, reason="pure-Python build: no extension")
def test_the_extension_was_built_from_this_layout() -> None:
    assert _core.frames_native is not None
    assert tuple(_core.frames_native.COLUMNS) == layout.FRAME_COLUMNS


def test_the_header_holds_the_owners_bounds() -> None:
    from dissector.capture._source import MAX_RECORD_SIZE

    text = (ROOT / "dissector" / "_core" / "layout.h").read_text()
    lines = [line.split() for line in text.splitlines() if line.startswith("#define PD_")]
    defines = {words[1]: words[2] for words in lines if len(words) > 2}
    assert defines["PD_MAX_RECORD_SIZE"] == str(MAX_RECORD_SIZE) == str(16 << 20)
    assert int(defines["PD_MAGIC_CHECKSUM"]) == 0x0E01  # the spec's checksum magic
    assert int(defines["PD_MAGIC_BROKER_ENTRY"]) == 0x0E02
    assert int(defines["PD_FC_NCOLS"]) == len(layout.FRAME_COLUMNS)
    names = [words[1] for words in lines]
    assert len(names) == len(set(names))  # no name defined twice
