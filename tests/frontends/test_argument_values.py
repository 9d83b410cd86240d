"""Values that cannot be right are refused before any reading: exit 2 and the reason.

Ports outside 1-65535, negative bounds and counts, a zero frame size limit, -j 0 and
negative idle timeouts each name the option and the value; nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.samples import CAPTURES

CAPTURE = str(CAPTURES[0])


#: What each command needs besides the value tried: a capture and an output to not write.
def _rest(command: str, tmp_path: Path) -> list[str]:
    if command == "read":
        return [CAPTURE, "-o", str(tmp_path / "out.parquet")]
    if command == "summary":
        return [CAPTURE, "--format", "json"]
    return []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("read", "--port", "70000"), "not a TCP port (1-65535): '70000'"),
        (("read", "--port", "-1"), "not a TCP port (1-65535): '-1'"),
        (("read", "--tls-port", "0"), "not a TCP port (1-65535): '0'"),
        (("read", "--max-uncompressed", "-1"), "not a whole number >= 0: '-1'"),
        (("read", "--payload-preview", "-5"), "not a whole number >= 0: '-5'"),
        (("read", "--max-frame-size", "0"), "not a positive whole number: '0'"),
        (("read", "-j", "0"), "not a positive whole number: '0'"),
        (("read", "--conn", "-3"), "not a whole number >= 0: '-3'"),
        (("read", "--idle-timeout", "nan"), "not a number of seconds: 'nan'"),
        (("summary", "--top", "-2"), "not a whole number >= 0: '-2'"),
        (("live", "-i", "lo", "--port", "99999"), "not a TCP port (1-65535): '99999'"),
    ],
)
def test_impossible_values_are_refused(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    command, *values = args
    done = cli(command, *_rest(command, tmp_path), *values)
    assert done.returncode == 2
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.parquet").exists()
