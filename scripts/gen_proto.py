"""Regenerate the protobuf bindings in dissector/_pb from proto/pulsar_api.proto.

Input: proto/pulsar_api.proto. Output: dissector/_pb/pulsar_api_pb2.py and .pyi.
Rule: the bindings are only ever written by this script (grpcio-tools' bundled protoc, pinned
in pyproject.toml); `--check` regenerates into a scratch folder and fails if they differ.
The stub gets one fix: protoc writes enum values named like Python keywords (Schema.Type's
`None`) as stub attributes, which is a syntax error; those lines are dropped.
"""

from __future__ import annotations

import argparse
import filecmp
import keyword
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto" / "pulsar_api.proto"
OUT = ROOT / "dissector" / "_pb"
GENERATED = ("pulsar_api_pb2.py", "pulsar_api_pb2.pyi")


def generate(out_dir: Path) -> None:
    """Run protoc on PROTO, writing the Python module and its type stub into out_dir."""
    from grpc_tools import protoc

    args = [
        "protoc",
        f"-I{PROTO.parent}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        str(PROTO),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    stub = out_dir / "pulsar_api_pb2.pyi"
    stub.write_text(_fix_stub(stub.read_text()))


_STUB_ATTR = re.compile(r"^\s+(\w+): ")


def _fix_stub(text: str) -> str:
    """Drop stub lines that declare an attribute named like a Python keyword."""
    lines = text.splitlines(keepends=True)
    return "".join(
        line
        for line in lines
        if not ((m := _STUB_ATTR.match(line)) and keyword.iskeyword(m.group(1)))
    )


def stale_files() -> list[str]:
    """Names of generated files that differ from a fresh generation (empty when fresh)."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in GENERATED
            if not (OUT / name).exists()
            or not filecmp.cmp(Path(tmp) / name, OUT / name, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale bindings")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print("stale generated bindings: " + ", ".join(stale) + " (run `make proto`)")
            return 1
        print("generated bindings are fresh")
        return 0
    generate(OUT)
    print(f"wrote {', '.join(GENERATED)} to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
