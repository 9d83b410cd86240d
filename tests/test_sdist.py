"""The source distribution: everything a build needs, nothing generated at install time.

Input: this checkout; `setup.py sdist` (with PULSAR_DISSECTOR_PURE=1, so that nothing but
MANIFEST.in and the package listing put files in: the strictest case); pip.
Output: assertions. The sdist holds every C source and header of the compiled core
(dissector/_core/*.c, *.h, fields.h as committed, so no generator runs at install), every
module of the package, the build files, and no compiled file. Installed from it with pip,
offline (--no-index --no-build-isolation: the build requirements of this environment), it
gives the compiled core where a C compiler is (and PULSAR_DISSECTOR_PURE is not set) or the
pure package, and that install reads a sample as this checkout does.
Rule: the sdist is built into a temporary folder and nothing is written into the checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "pcaps" / "produce_consume.pcap"
#: Files besides the package that a build from the sdist reads.
BUILD_FILES = ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md")


def build_sdist(out: Path) -> Path:
    env = {**os.environ, "PULSAR_DISSECTOR_PURE": "1"}
    subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "-e", str(out), "sdist", "-d", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("pulsar_dissector-*.tar.gz")
    return found


def package_files() -> set[str]:
    """The package's source files in this checkout (build outputs left out)."""
    out = set()
    for path in (ROOT / "dissector").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
            out.add(path.relative_to(ROOT).as_posix())
    return out


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sdist(tmp_path_factory.mktemp("sdist"))


def test_the_sdist_carries_every_c_source_and_every_module(sdist: Path) -> None:
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
        fields = tar.extractfile(f"{top}/dissector/_core/fields.h")
        assert fields is not None
        assert fields.read() == (ROOT / "dissector" / "_core" / "fields.h").read_bytes()
    core = {p.relative_to(ROOT).as_posix() for p in (ROOT / "dissector/_core").glob("*.[ch]")}
    assert {"dissector/_core/walk.c", "dissector/_core/fields.h"} <= core
    assert sorted(core - names) == []
    assert sorted(package_files() - names) == []
    assert sorted(set(BUILD_FILES) - names) == []
    assert [n for n in names if n.endswith((".so", ".o", ".pyc"))] == []
    assert [n for n in names if n.startswith("build/")] == []


@pytest.mark.slow  # pip builds the compiled core and the mypyc modules from it (~1 to 3 min)
def test_pip_installs_the_sdist_offline_and_it_reads_as_the_checkout(
    sdist: Path, tmp_path: Path
) -> None:
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation",
         "--no-deps", "--target", str(target), str(sdist)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    compiled = shutil.which(os.environ.get("CC", "cc")) is not None
    compiled = compiled and os.environ.get("PULSAR_DISSECTOR_PURE") != "1"
    built = sorted(p.name.split(".")[0] for p in (target / "dissector" / "_core").glob("*.so"))
    declared = re.findall(
        r'Extension\(\s*"dissector\._core\.(\w+)"', (ROOT / "setup.py").read_text()
    )
    assert len(declared) >= 3  # _walk, _frames, _recent at least
    assert built == (sorted(declared) if compiled else []), built
    probe = (
        "import dissector, dissector._core as c; "
        "print(dissector.__file__); print(c.COMPILED and c.frames_native is not None)"
    )
    run = {**env, "PYTHONPATH": str(target)}
    where, core = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=run, capture_output=True, text=True,
        check=True,
    ).stdout.split()  # fmt: skip
    assert where == str(target / "dissector" / "__init__.py")
    assert core == str(compiled)
    args = ["-m", "dissector.frontends.cli", "read", str(SAMPLE)]
    theirs = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=run, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    ours = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert theirs == ours and len(theirs.splitlines()) >= 10
