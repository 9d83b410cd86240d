"""A Go toolchain new enough for our Go peer: the one on PATH, else one installed in a cache.

Input:  go.mod beside this module (its `go` line is the oldest Go that builds the peer);
        `go` on PATH; the Go module proxy (GOPROXY's first entry, else proxy.golang.org), which
        serves each Go release as the module golang.org/toolchain.
Output: `go_binary()`, the path of a `go` command new enough, or FileNotFoundError saying
        how to get one; `install()`, which downloads TOOLCHAIN into the cache when no such
        `go` is found (`make testdeps` runs `python3 -m tests.support.gopeer.toolchain`);
Rule:   a `go` is new enough when `go env GOVERSION` is at least go.mod's `go` line (Debian
        bookworm's golang-go 1.19 is not). The cache is $PULSAR_DISSECTOR_GO_CACHE, else
        /tmp/pulsar-dissector-go; the toolchain sits in toolchain/go<VERSION>.<os>-<arch>/,
        unpacked from the proxy's zip (its sha256 checked against SHA256 when pinned) in a
        temporary folder and renamed into place when complete, under an exclusive lock; the
        zip holds no file modes, so bin/ and pkg/tool/ are made executable as the go
        command's own toolchain switch does. Only the standard library is used, so that it
        runs before any virtual environment exists.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from tests.support import build_cache
from tests.support.build_cache import locked

HERE = Path(__file__).resolve().parent
GO_MOD = HERE / "go.mod"
CACHE_ENV = "PULSAR_DISSECTOR_GO_CACHE"
#: The Go release installed when none new enough is found (the one this project is tried on).
TOOLCHAIN = "1.26.8"
#: sha256 of the proxy's zip of TOOLCHAIN, per GOARCH (what this machine downloaded).
SHA256 = {"amd64": "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7"}
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
DOWNLOAD_TIMEOUT = 600.0
MISSING = (
    "no Go {need} or newer found (on PATH: {found}): `make testdeps` installs Go {version} into "
    "{cache} (python3 -m tests.support.gopeer.toolchain)"
)


def cache_root() -> Path:
    """The cache folder of the Go peer (created if missing)."""
    return build_cache.cache_root(CACHE_ENV, "/tmp/pulsar-dissector-go")


def _release(text: str) -> tuple[int, ...]:
    """(1, 26, 8) from 'go1.26.8', '1.24.0' or '1.24'; () when it names no release."""
    found = re.match(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    return tuple(int(p) for p in found.groups() if p is not None) if found else ()


def required() -> tuple[int, ...]:
    """The oldest Go release go.mod accepts (its `go` line)."""
    found = re.search(r"^go\s+(\S+)", GO_MOD.read_text(encoding="utf-8"), re.M)
    assert found, f"no go line in {GO_MOD}"
    return _release(found.group(1))


def version_of(go: str) -> tuple[int, ...]:
    """The release of the `go` command at `go` (() when it does not answer)."""
    try:
        done = subprocess.run(
            [go, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "GOTOOLCHAIN": "local"},
        )
    except OSError:
        return ()
    return _release(done.stdout) if done.returncode == 0 else ()


def _arch() -> str:
    machine = platform.machine().lower()
    if machine not in ARCHES:
        raise RuntimeError(f"no Go toolchain known for this processor ({machine})")
    return ARCHES[machine]


def cached_dir() -> Path:
    """Where install() puts TOOLCHAIN (its bin/go)."""
    return cache_root() / "toolchain" / f"go{TOOLCHAIN}.linux-{_arch()}"


def go_binary() -> str:
    """A `go` new enough for go.mod: PATH's, else the cached toolchain's."""
    need = required()
    on_path = shutil.which("go")
    if on_path and version_of(on_path) >= need:
        return on_path
    cached = cached_dir() / "bin" / "go"
    if cached.is_file() and version_of(str(cached)) >= need:
        return str(cached)
    found = ".".join(map(str, version_of(on_path))) if on_path else "none"
    raise FileNotFoundError(
        MISSING.format(
            need=".".join(map(str, need)), found=found, version=TOOLCHAIN, cache=cache_root()
        )
    )


def _proxy() -> str:
    """The first proxy URL of GOPROXY (else the default one)."""
    for entry in re.split(r"[,|]", os.environ.get("GOPROXY", "")):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    return "https://proxy.golang.org"


def _unpack(archive: Path, folder: Path) -> None:
    """The zip's files under `folder`, its top folder (golang.org/toolchain@v...) stripped."""
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if len(parts) < 3 or info.is_dir() or ".." in parts:
                continue
            target = folder.joinpath(*parts[2:])
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
    for tool in [*(folder / "bin").glob("*"), *(folder / "pkg" / "tool").glob("*/*")]:
        tool.chmod(0o755)


def install() -> Path:
    """The cached toolchain's folder, downloaded and unpacked if missing."""
    final = cached_dir()
    arch = _arch()
    with locked(cache_root()):
        if (final / "bin" / "go").is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        url = f"{_proxy()}/golang.org/toolchain/@v/v0.0.1-go{TOOLCHAIN}.linux-{arch}.zip"
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            archive = staging / "toolchain.zip"
            with (
                urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as answer,
                open(archive, "wb") as out,
            ):
                shutil.copyfileobj(answer, out)
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()
            if arch in SHA256 and digest != SHA256[arch]:
                raise RuntimeError(f"{url}: sha256 {digest}, expected {SHA256[arch]}")
            _unpack(archive, staging / "go")
            (staging / "go").rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def main() -> int:
    """Install TOOLCHAIN when no `go` new enough is found; print the `go` to use."""
    try:
        print(go_binary())
        return 0
    except FileNotFoundError as missing:
        print(f"{missing}: installing", file=sys.stderr)
    install()
    print(go_binary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
