"""What the peers' builds share: a cache folder, its lock, and a command run that explains
its failure (the Maven jars and Java classes of tests/support/apache, the Go toolchain and
program of tests/support/gopeer).

Input:  an environment variable naming the cache folder and its default; a command line.
Output: `cache_root(env, default)`, the folder (created if missing); `locked(root)`, a context
        holding its exclusive lock; `run_checked(argv, what, timeout)`, which raises
        RuntimeError with the output's tail when the command fails.
Rule:   the lock is fcntl's on `root/.lock`, so that concurrent test sessions build each
        product once; commands read no stdin. Only the standard library is used: the Go
        toolchain's installer runs before any virtual environment exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Lines of a failed command's output kept in the error.
TAIL_LINES = 40


def cache_root(env: str, default: str) -> Path:
    """The folder $env names, else `default` (created if missing)."""
    root = Path(os.environ.get(env) or default)
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def locked(root: Path) -> Iterator[Path]:
    """`root`, held under an exclusive lock (its .lock file) for the block."""
    with open(root / ".lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_checked(argv: list[str], what: str, timeout: float, **kwargs: Any) -> None:
    """Run `argv` (no stdin, output kept); a non-zero exit raises with the output's tail."""
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-TAIL_LINES:])
        raise RuntimeError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n{tail}")
