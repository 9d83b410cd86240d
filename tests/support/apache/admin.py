"""The Apache broker's admin REST API (its web service port), for the tests' own set-up.

Input:  an ApacheBroker (its `web_url`), an HTTP method, an admin path and an optional JSON
        body (e.g. ``PUT /admin/v2/persistent/public/default/t/partitions`` with ``3``).
Output: the answer's decoded JSON (None for an empty body); an HTTP error raises AdminError
        with the status and the broker's reason.
Rule:   loopback only (the broker's own web port); plain urllib, no client library: the
        admin calls are set-up (create, terminate, unload), never the thing under test.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Protocol

TIMEOUT = 120.0


class _HasWebUrl(Protocol):
    web_url: str


class AdminError(RuntimeError):
    """The broker refused an admin call."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"admin call refused: HTTP {status}: {reason}")
        self.status = status


def admin(
    broker: _HasWebUrl, method: str, path: str, body: Any = None, *, token: str | None = None
) -> Any:
    """Call the broker's admin API (as `token`'s role when given: a broker with token
    authentication); the answer's JSON (None when empty)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{broker.web_url}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as refused:
        raise AdminError(refused.code, refused.read().decode(errors="replace")) from None
    return json.loads(raw) if raw.strip() else None


def topic_path(topic: str) -> str:
    """``persistent://tenant/ns/name`` -> ``/admin/v2/persistent/tenant/ns/name``."""
    domain, rest = topic.split("://", 1)
    return f"/admin/v2/{domain}/{rest}"
