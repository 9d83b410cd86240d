"""Installing without a working C compiler gives the pure package, with one line saying so.

Input: scripts/check_pure_install.py (the sdist installed with pip into new venvs, offline,
with CC=/bin/false, with a PATH holding no C compiler, and with PULSAR_DISSECTOR_PURE=1).
Output: assertions: each install succeeds, its build says exactly the one expected line,
nothing is compiled, and the installed command reads a sample as this checkout does.
"""

from __future__ import annotations

import pytest

from tests.support.scripts import load_script


@pytest.mark.slow  # three venvs and three pip installs (~15 to 30 s)
def test_installing_without_a_compiler_gives_the_pure_package(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert load_script("check_pure_install").main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "cc-false",
        "no-compiler-on-path",
        "pure-asked",
    ]
    assert all("no .so" in line and "same 81 lines" in line for line in lines)
