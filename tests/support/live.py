"""Whether this process may capture packets, for the tests that sniff an interface.

Input: nothing (the platform and this process's privileges).
Output: `capture_denied()` (why not, or None) and `require_capture()`, which skips a test
where capturing is impossible, except in CI (CI=true), where it fails: the live tests must
run there.
"""

from __future__ import annotations

import os
import socket
import sys

import pytest


def capture_denied() -> str | None:
    """Why this process cannot capture packets, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "live capture needs Linux"
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close()
    except PermissionError:
        return "capturing needs root or CAP_NET_RAW"
    return None


def require_capture() -> None:
    why = capture_denied()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true, but {why}: the live tests must run in CI")
    pytest.skip(why)
