"""Start-up: what `import dissector` and a text read of a small capture import.

Issue 27: `pulsar-dissect read` of a small capture (the README's first example, 95 packets)
stays at or under 0.3 s, so its imports must not grow. Checked structurally, never by
timing (the time itself is measured by `python -m benchmarks.startup`): in a fresh
interpreter, the modules present after the command ran. pandas (~330 ms), pyarrow.compute,
pyarrow.parquet, pyarrow.csv and pyarrow.fs (~60 ms together) belong to the paths that use
them; `import dissector` imports no pyarrow.
The public API stays the same names (PEP 562 `__getattr__`, dissector/_lazy.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dissector
import dissector.read

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "pcaps" / "produce_consume.pcap"

#: Modules a text read must not import (each belongs to another path: DataFrames, -Y or
#: filters on tables, Parquet/CSV output, remote files).
NOT_FOR_TEXT = (
    "pandas",
    "pyarrow.compute",
    "pyarrow.parquet",
    "pyarrow.csv",
    "pyarrow.fs",
    "pyarrow.dataset",
    "duckdb",
    "scapy",
    "matplotlib",
    "dissector.diagnose",  # the findings rules: only reads that make findings load them
    "dissector.journeys",  # the joiner: only reads that make journeys load it
)

#: Run the command line in this process, then write the names of the modules it imported.
_WRAPPER = """
import contextlib, json, sys
out, argv = sys.argv[1], sys.argv[2:]
from dissector.frontends.cli import main
with contextlib.redirect_stdout(sys.stderr):
    code = main(argv)
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def imported_by(tmp_path: Path, code: str, *args: str) -> tuple[int, set[str], str]:
    """(exit code, modules imported, what the command printed) of `code` in a new process."""
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    found = json.loads(out.read_text())
    return found["code"], set(found["modules"]), done.stderr


def test_a_text_read_of_a_small_capture_imports_no_pandas_and_no_pyarrow_extras(
    tmp_path: Path,
) -> None:
    code, modules, printed = imported_by(tmp_path, _WRAPPER, "read", str(SAMPLE))
    assert code == 0
    assert "SEND" in printed and "CONNECT" in printed  # it did read the frames
    assert "dissector.pipeline" in modules
    assert sorted(m for m in NOT_FOR_TEXT if m in modules) == []


def test_a_parquet_read_still_imports_what_it_needs(tmp_path: Path) -> None:
    target = tmp_path / "frames.parquet"
    code, modules, _ = imported_by(
        tmp_path, _WRAPPER, "read", str(SAMPLE), "--table", "frames", "-o", str(target)
    )
    assert code == 0 and target.stat().st_size > 0
    assert "pyarrow.parquet" in modules  # (pyarrow itself may import pandas there)


def test_import_dissector_imports_no_pyarrow(tmp_path: Path) -> None:
    wrapper = (
        "import json, sys\nimport dissector\n"
        "json.dump({'code': 0, 'modules': sorted(sys.modules)}, open(sys.argv[1], 'w'))\n"
    )
    _, modules, _ = imported_by(tmp_path, wrapper)
    assert "dissector" in modules
    assert sorted(m for m in modules if m.split(".")[0] in ("pyarrow", "pandas", "numpy")) == []


def test_the_public_api_is_the_same_names_and_objects() -> None:
    from dissector.pulsar.encoder import command, encode_frame
    from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, StreamStats
    from dissector.read.dataframes import Capture, read_capture
    from dissector.read.options import ReaderOptions
    from dissector.read.runs import iter_events
    from dissector.read.tables import read_tables

    lazy = {
        "command": command,
        "encode_frame": encode_frame,
        "DEFAULT_MAX_FRAME_SIZE": DEFAULT_MAX_FRAME_SIZE,
        "FrameDecoder": FrameDecoder,
        "StreamStats": StreamStats,
        "Capture": Capture,
        "read_capture": read_capture,
        "ReaderOptions": ReaderOptions,
        "iter_events": iter_events,
        "read_tables": read_tables,
    }
    for name, value in lazy.items():
        assert getattr(dissector, name) is value, name
        assert name in dissector.__all__ and name in dir(dissector)
    for name in dissector.read.__all__:
        assert getattr(dissector.read, name) is lazy[name]
    for name in dissector.__all__:  # every public name resolves, eager or lazy
        assert getattr(dissector, name) is not None
    namespace: dict[str, object] = {}
    exec("from dissector import *", namespace)
    assert set(dissector.__all__) <= set(namespace)
    try:
        dissector.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
