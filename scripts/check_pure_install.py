"""Install from the sdist where no C compiler works: the pure package, and one line saying so.

Input: `python scripts/check_pure_install.py [--keep]`, run with the project's .venv (its
setuptools and runtime packages serve the build and the install offline).
Output: for each way of having no compiler (CC=/bin/false; a PATH holding no C compiler;
PULSAR_DISSECTOR_PURE=1 for the record) a new venv in a temporary folder, the sdist
installed into it with pip (--no-index --no-build-isolation --no-deps, -v so that the build's
own lines show), then checked: pip exits 0, the build said exactly one `pulsar-dissector:`
line and it is the expected one, the installed package has no compiled module
(dissector._core.COMPILED is False, no .so) and its `pulsar-dissect read` of a sample gives
the checkout's lines. One line per case on stdout; exit 1 on the first failure.
Rule: nothing is downloaded and nothing outside the temporary folder is written: the new
venv sees this environment's packages through a .pth file naming a folder of links to them
(the project's own installation left out, so pip sees no pulsar-dissector to replace).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "pcaps" / "produce_consume.pcap"
#: The build's line for each case (setup.py).
NO_COMPILER = "pulsar-dissector: no working C compiler: pure Python (slower)"
PURE_ASKED = "pulsar-dissector: PULSAR_DISSECTOR_PURE=1: pure Python"
#: Programs the build needs besides a compiler, linked into the compiler-free PATH.
TOOLS = ("sh", "bash", "env", "uname", "ls", "cat", "rm", "mkdir", "cp", "mv", "ln")


def run(
    args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def build_sdist(out: Path) -> Path:
    out.mkdir()
    done = run(
        [sys.executable, "setup.py", "-q", "egg_info", "-e", str(out), "sdist", "-d", str(out)],
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"sdist failed: {done.stderr[-2000:]}")
    (found,) = out.glob("pulsar_dissector-*.tar.gz")
    return found


def dependencies(out: Path) -> Path:
    """A folder of links to this environment's installed packages but the project's own."""
    site = Path(sysconfig.get_paths()["purelib"])
    out.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("pulsar_dissector", "__editable__", "dissector")) or name.endswith(
            ".pth"
        ):
            continue
        (out / entry.name).symlink_to(entry)
    return out


def new_venv(where: Path, deps: Path) -> Path:
    venv.EnvBuilder(with_pip=False).create(where)  # pip, setuptools: this environment's
    python = where / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    (Path(purelib.stdout.strip()) / "deps.pth").write_text(f"{deps}\n")
    return python


def compiler_free_path(where: Path) -> str:
    """A PATH of one folder: the tools a build runs, no C compiler (cc, gcc, clang...)."""
    where.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (where / tool).symlink_to(found)
    return str(where)


def check(case: str, env: dict[str, str], sdist: Path, work: Path, deps: Path) -> str:
    python = new_venv(work / case, deps)
    done = run(
        [str(python), "-m", "pip", "install", "-v", "--no-index", "--no-build-isolation",
         "--no-deps", str(sdist)],
        cwd=work,
        env=env,
    )  # fmt: skip
    said = [
        line.strip()
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip().startswith("pulsar-dissector:")
    ]
    if done.returncode != 0:
        raise SystemExit(f"{case}: pip failed:\n{done.stdout[-1500:]}{done.stderr[-2500:]}")
    expected = PURE_ASKED if env.get("PULSAR_DISSECTOR_PURE") == "1" else NO_COMPILER
    if said != [expected]:
        raise SystemExit(f"{case}: the build said {said}, not [{expected!r}]")
    probe = run(
        [str(python), "-c", "import dissector._core as c; print(c.__file__, c.COMPILED)"],
        cwd=work,
    )
    where, compiled = probe.stdout.split()
    if not where.startswith(str(work / case)) or compiled != "False":
        raise SystemExit(f"{case}: imported {where}, compiled {compiled}: {probe.stderr}")
    built = sorted(str(p) for p in Path(where).parents[1].rglob("*.so"))
    if built:
        raise SystemExit(f"{case}: compiled modules installed: {built}")
    cli = [str(work / case / "bin" / "pulsar-dissect"), "read", str(SAMPLE)]
    ours = run([sys.executable, "-m", "dissector.frontends.cli", "read", str(SAMPLE)], cwd=ROOT)
    theirs = run(cli, cwd=work)
    if theirs.returncode != 0 or theirs.stdout != ours.stdout or not ours.stdout:
        raise SystemExit(f"{case}: read differs from the checkout's: {theirs.stderr[-1500:]}")
    lines = len(theirs.stdout.splitlines())
    return f"{case}: pip exit 0, said {said[0]!r}, no .so, read gives the same {lines} lines"


def cases(work: Path) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if k not in ("CC", "PULSAR_DISSECTOR_PURE")}
    base.pop("PYTHONPATH", None)
    return {
        "cc-false": {**base, "CC": "/bin/false"},
        "no-compiler-on-path": {**base, "PATH": compiler_free_path(work / "bin-no-cc")},
        "pure-asked": {**base, "PULSAR_DISSECTOR_PURE": "1"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pulsar-pure-install-"))
    try:
        sdist = build_sdist(work / "sdist")
        deps = dependencies(work / "deps")
        for case, env in cases(work).items():
            print(check(case, env, sdist, work, deps), flush=True)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
