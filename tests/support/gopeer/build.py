"""Our Go peer (main.go, with apache/pulsar-client-go), built once into a cache.

Input:  main.go, discards.go, ids.go, go.mod and go.sum beside this module; a Go toolchain
        new enough (toolchain.go_binary(): PATH's `go`, else the one `make testdeps` installed); the
        Go module proxy for the modules go.sum names (GOPROXY as set, else Go's default).
Output: `binary()`, the path of the built program (`gopeer`).
Rule:   the program sits in the cache (toolchain.cache_root()) in a folder named by the
        sha256 of its sources and the Go release that built it; it is built in a
        temporary folder (a copy of the sources, so the checkout is never written) with
        GOFLAGS=-mod=mod, GOTOOLCHAIN=local (the Go found is the one used) and CGO_ENABLED=0
        (the client's pure-Go zstd, no C compiler needed), then renamed into place, under
        the cache's exclusive lock so that concurrent sessions build it once. A first build
        fetches and compiles the client's modules (a minute or two); a cached one is instant.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from tests.support.build_cache import locked, run_checked
from tests.support.gopeer.toolchain import cache_root, go_binary, version_of

HERE = Path(__file__).resolve().parent
SOURCES = ("main.go", "discards.go", "ids.go", "go.mod", "go.sum")
PROGRAM = "gopeer"
#: Generous: the first build downloads and compiles about 60 modules.
BUILD_TIMEOUT = 1800.0


def _digest(go_release: tuple[int, ...]) -> str:
    sha = hashlib.sha256(".".join(map(str, go_release)).encode())
    for name in SOURCES:
        sha.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return sha.hexdigest()[:16]


def _build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOFLAGS="-mod=mod", GOTOOLCHAIN="local", CGO_ENABLED="0")
    return env


def binary() -> Path:
    """The built Go peer, built first if its sources or the Go release changed."""
    go = go_binary()
    root = cache_root()
    final = root / f"{PROGRAM}-{_digest(version_of(go))}"
    with locked(root):
        if (final / PROGRAM).is_file():
            return final / PROGRAM
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            for name in SOURCES:
                shutil.copy2(HERE / name, staging / name)
            argv = [go, "build", "-trimpath", "-o", str(staging / "bin" / PROGRAM), "."]
            what = f"go build of {PROGRAM}"
            run_checked(argv, what, BUILD_TIMEOUT, cwd=staging, env=_build_env())
            (staging / "bin").rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final / PROGRAM
