"""Facts about the machine and the code a benchmark ran on.

Input: the running system (/proc, the interpreter, tshark, git).
Output: a dict: Python, OS, CPU model and count, memory, load average, tshark, scapy and
pulsar-dissector versions, git commit and how many tracked files differ from it.
Rule: read-only: git is asked without taking locks, nothing is installed or changed.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from benchmarks import tshark

ROOT = Path(__file__).resolve().parent.parent


def _first(path: str, prefix: str) -> str:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", "--no-optional-locks", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def load() -> float:
    return os.getloadavg()[0]


def code_state() -> dict[str, Any]:
    """The git commit, and how many tracked files differ from it."""
    changed = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_changed_files": len(changed.splitlines()) if changed else 0,
    }


def collect() -> dict[str, Any]:
    mem_kib = _first("/proc/meminfo", "MemTotal").split()[0]
    return {
        "python": platform.python_version(),
        "os": platform.platform(),
        "cpu": _first("/proc/cpuinfo", "model name"),
        "cpus": os.cpu_count(),
        "memory_gib": round(int(mem_kib) / 2**20, 1) if mem_kib.isdigit() else None,
        "tshark": tshark.version(),
        "scapy": _version("scapy"),
        "pulsar_dissector": _version("pulsar-dissector"),
        **code_state(),
        "load_at_start": load(),
    }
