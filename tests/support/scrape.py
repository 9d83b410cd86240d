"""A metrics endpoint scraped as a Prometheus server would: a GET with an Accept header.

Input: a URL, an optional Accept header; an answer's body and Content-Type.
Output: `fetch` -> (status, Content-Type, body), HTTP errors included, never through a proxy
of the environment; `samples` -> every sample as {(name, labels): value}, parsed by
prometheus_client's own parser of the format (OpenMetrics or Prometheus text); `media` ->
a Content-Type's media type and parameters.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

TIMEOUT = 60.0  # bounds a hang, never the expected duration
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def fetch(url: str, accept: str | None = None) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of a GET, errors included; no proxy from the environment."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with NO_PROXY.open(request, timeout=TIMEOUT) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def samples(body: bytes, openmetrics: bool = False) -> Samples:
    """Every sample of an exposition, parsed by prometheus_client."""
    parse = openmetrics_families if openmetrics else text_families
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in parse(body.decode())
        for s in family.samples
    }


def media(content_type: str) -> tuple[str, dict[str, str]]:
    """'a/b; k=v; ...' as ('a/b', {k: v, ...})."""
    kind, *params = (p.strip() for p in content_type.split(";"))
    return kind, dict(p.split("=", 1) for p in params)
