"""Build: the pure-Python package, with its compiled core and hot modules when possible.

Input: the environment of `pip install` (a C compiler, mypyc from the build requirements).
Output: the `dissector` package; the compiled stage `dissector._core._walk` (hand-written C
in dissector/_core/, docs/compiled-core.md: no generator, so the sdist carries all it needs);
the modules in HOT also as C extensions beside their source (mypyc).
Rule: compiled or not, the package behaves the same (the test suite runs on both, see
tests/test_pure_python.py); compiling is about twice as fast in the per-packet path. It is
skipped, with one line saying so, when PULSAR_DISSECTOR_PURE=1 is set or when no C compiler
or mypyc is available: the pure-Python package is then installed.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from setuptools import Extension, setup

#: The compiled stage: plain C with the CPython API (docs/compiled-core.md).
CORE = Extension(
    "dissector._core._walk",
    sources=["dissector/_core/_walkmodule.c", "dissector/_core/walk.c"],
    depends=["dissector/_core/cursor.h", "dissector/_core/walk.h"],
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
)

#: The compiled framing stage (C, phase 3 of docs/compiled-core.md): not wired yet.
FRAMES = Extension(
    "dissector._core._frames",
    sources=[
        "dissector/_core/_framesmodule.c",
        "dissector/_core/frames.c",
        "dissector/_core/pbscan.c",
        "dissector/_core/crc32c.c",
    ],
    depends=[
        "dissector/_core/cursor.h",
        "dissector/_core/frames.h",
        "dissector/_core/pbscan.h",
        "dissector/_core/crc32c.h",
        "dissector/_core/fields.h",
    ],
    extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
)

#: The per-packet path: packet records, headers (tunnels, IP fragments), TCP, framing,
#: decoding, conversation state, the pipeline and the table builder (mypyc needs their type
#: hints to be exact).
HOT = [
    "dissector/capture/_source.py",
    "dissector/capture/pcap.py",
    "dissector/capture/pcapng.py",
    "dissector/connection.py",
    "dissector/flow/classify.py",
    "dissector/flow/decap.py",
    "dissector/flow/fragments.py",
    "dissector/flow/net.py",
    "dissector/flow/preamble.py",
    "dissector/flow/reassembly.py",
    "dissector/flow/recent.py",
    "dissector/flow/shard.py",
    "dissector/flow/tcp.py",
    "dissector/pulsar/entities.py",
    "dissector/pulsar/frame_events.py",
    "dissector/pulsar/framing.py",
    "dissector/pulsar/messages.py",
    "dissector/pulsar/pairing.py",
    "dissector/pulsar/pairs.py",
    "dissector/pulsar/publish.py",
    "dissector/pulsar/payload.py",
    "dissector/pulsar/sections.py",
    "dissector/pulsar/text_fields.py",
    "dissector/pipeline.py",
    "dissector/tables/builders.py",
]


def _extensions() -> list[Any]:
    if os.environ.get("PULSAR_DISSECTOR_PURE") == "1":
        print("pulsar-dissector: PULSAR_DISSECTOR_PURE=1: pure Python", file=sys.stderr)
        return []
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("pulsar-dissector: no C compiler: pure Python (slower)", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("pulsar-dissector: mypyc not available: hot modules in Python", file=sys.stderr)
        return [CORE, FRAMES]
    return [CORE, FRAMES, *mypycify(HOT, opt_level="3")]


setup(ext_modules=_extensions())
