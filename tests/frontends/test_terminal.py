"""Issue 31 F14/F15: strings from a capture never reach a terminal as controls, and the
report keeps stderr to our own lines.

Expected escapes are written here by hand (tshark's habit: C escapes, `\\xNN`), not taken from
the code under test.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from dissector.frontends.terminal import printable, printable_lines
from tests.support.cli import cli
from tests.support.hostile import HOSTILE, hostile_capture

#: HOSTILE as a safe view shows it (by hand).
SHOWN = "a\\x1b[31mRED\\x1b[0m\\x1b]0;owned\\a\\rz\\u202e\\x7f\\u009b"


def _controls(text: str) -> list[str]:
    """Characters a terminal may act on, other than the line break between our lines."""
    bidi = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    return [c for c in text if c != "\n" and (unicodedata.category(c) in ("Cc", "Cs") or c in bidi)]


def test_printable_escapes_by_hand() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("plain text / ünïcode ok") == "plain text / ünïcode ok"
    assert printable("a\nb\tc\x00") == "a\\nb\\tc\\x00"
    assert printable("name-\udcff\udcfe.pcap") == "name-\\xff\\xfe.pcap"  # surrogateescape
    assert printable_lines("one\x1b\ntwo") == "one\\x1b\ntwo"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_capture(tmp_path_factory.mktemp("hostile") / "hostile.pcap")


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize(
    "args",
    [
        ["read"],
        ["read", "-V"],
        ["read", "-x"],
        ["summary"],
        ["sql", "--", "SELECT topic, command FROM frames"],
    ],
    ids=["read", "read-V", "read-x", "summary", "sql"],
)
def test_text_views_show_no_control_character(hostile: Path, args: list[str]) -> None:
    command, rest = args[0], args[1:]
    if command == "sql":
        done = cli("sql", str(hostile), rest[-1])
    else:
        done = cli(command, str(hostile), *rest)
    assert done.returncode == 0, done.stderr
    assert _controls(done.stdout) == []
    assert _controls(done.stderr) == []
    assert SHOWN in done.stdout  # shown, escaped, not dropped


def test_error_lines_escape_file_names(tmp_path: Path) -> None:
    name = tmp_path / "bad\x1b]0;x\x07.pcap"
    name.write_bytes(b"not a capture at all")
    done = cli("read", str(name))
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert _controls(done.stderr.rstrip("\n")) == []
    assert "bad\\x1b]0;x\\a.pcap" in done.stderr


def test_report_keeps_stderr_to_our_lines(hostile: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    done = cli("report", str(hostile), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no matplotlib "Glyph ... missing" warning
    assert out.stat().st_size > 0
    assert re.search(r"report written to .*r\.html", done.stdout)
