"""EDGE: OTLP/HTTP push of metrics: requests handed over, POSTed by a background thread.

Input: a collector's address (`endpoint_url`: http or https, `/v1/metrics` appended unless
the address ends so) and request bodies (OTLP JSON bytes, `otlp.export_line`).
Output: POSTs (Content-Type application/json; with `gzip`, Content-Encoding gzip, compressed
on the thread) with the headers asked for (authentication: their values are never printed)
to the collector; on stderr, one warning line per run of failures; `sent`, `failed`,
`dropped` counts.
Rules:
- `submit` never blocks: bodies wait in a queue of at most QUEUE requests; when it is
  full the oldest is dropped (counted): the metrics are cumulative, so a later request
  carries every count an earlier one had.
- One request at a time, each bounded by `timeout` seconds; no retries (the next
  interval's request is the retry). A refusal (not 2xx), an error or a timeout is a failure:
  the first of a run prints one line, the others are counted until a request succeeds again;
  a collector's partial success (points it rejected) is a failure too.
- `close` waits for the queue to drain at most `timeout` seconds (the request in flight
  included), then gives up (one line if requests were left unsent and no run of failures
  was reported yet): the dissector never waits longer for a slow or hanging collector.
- The thread starts with the first request and is a daemon: a collector that never answers
  cannot keep the process alive.
"""

from __future__ import annotations

import collections
import gzip as gzip_module
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import TextIO

from dissector.errors import UsageError, os_reason

#: Requests waiting to be sent, at most (then the oldest is dropped).
QUEUE = 8
#: Seconds a request may take, and `close` may wait (OpenTelemetry's exporters' default).
TIMEOUT = 10.0
METRICS_PATH = "/v1/metrics"
CONTENT_TYPE = "application/json"


def endpoint_url(text: str) -> str:
    """The URL metrics are POSTed to: `text` (an http or https URL with a host) with
    METRICS_PATH appended unless it ends so; a UsageError naming what is wrong else."""
    try:
        parts = urllib.parse.urlsplit(text.strip())
        parts.port  # noqa: B018 (a bad port raises ValueError)
    except ValueError as exc:
        raise UsageError(f"--otlp-endpoint {text!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--otlp-endpoint {text!r}: not an http:// or https:// URL with a host "
            "(e.g. http://127.0.0.1:4318)"
        )
    path = parts.path.rstrip("/")
    if not path.endswith(METRICS_PATH):
        path += METRICS_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def header(text: str) -> tuple[str, str]:
    """`NAME=VALUE` as a header (the value may hold `=`); a UsageError naming the name else."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name or any(c in name for c in " :\r\n") or any(c in value for c in "\r\n"):
        raise UsageError(f"not NAME=VALUE (a header name and its value): {name or text[:20]!r}")
    return name, value.strip()


class OtlpPush:
    """A background sender of OTLP JSON requests (module rules)."""

    def __init__(
        self,
        endpoint: str,
        err: TextIO,
        *,
        timeout: float = TIMEOUT,
        queue: int = QUEUE,
        prog: str = "pulsar-dissect",
        headers: Mapping[str, str] | None = None,
        gzip: bool = False,
    ) -> None:
        self.url = endpoint_url(endpoint)
        self.headers = {**(headers or {}), "Content-Type": CONTENT_TYPE}
        if gzip:
            self.headers["Content-Encoding"] = "gzip"
        self.gzip = gzip
        parts = urllib.parse.urlsplit(self.url)  # shown without any user:password@
        self.shown = self.url.replace(parts.netloc, parts.netloc.rpartition("@")[2], 1)
        self.err, self.timeout, self.prog = err, timeout, prog
        self.sent = self.failed = self.dropped = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._size = queue
        self._busy = False  # a request is in flight
        self._closing = False
        self._gave_up = False  # close returned: what the thread still does is not counted
        self._failing = False  # in a run of failures (its line printed)
        self._cond = threading.Condition()
        # started at the first request: a process that forks after making this one (live's
        # capturer) forks before any thread of it exists
        self._thread: threading.Thread | None = None

    def submit(self, body: bytes) -> None:
        """Queue a request body (module rules: never blocks)."""
        with self._cond:
            if self._closing:
                return
            if len(self._queue) >= self._size:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(body)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="otlp-push", daemon=True)
                self._thread.start()
            self._cond.notify()

    def close(self) -> None:
        """Send what is queued, waiting at most `timeout` seconds (module rules)."""
        deadline = time.monotonic() + self.timeout
        with self._cond:
            self._closing = True
            self._cond.notify()
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            unsent = len(self._queue) + self._busy
            self._queue.clear()
            self._gave_up = True
            if unsent:
                self.failed += unsent
                self._warn(f"{unsent} request(s) not sent: no answer within {self.timeout:g} s")

    def _warn(self, why: str) -> None:
        """One line per run of failures (called with the lock held)."""
        if not self._failing:
            self._failing = True
            self.err.write(f"{self.prog}: OTLP push to {self.shown} failed: {why}\n")
            self.err.flush()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                body = self._queue.popleft()
                self._busy = True
            problem = self._post(body)
            with self._cond:
                self._busy = False
                if self._gave_up:  # close counted it as unsent already
                    return
                if problem is None:
                    self.sent += 1
                    self._failing = False
                else:
                    self.failed += 1
                    self._warn(problem)
                self._cond.notify_all()

    def _post(self, body: bytes) -> str | None:
        """POST one request: None when the collector took it all, else what went wrong."""
        import urllib.error  # here: `read` and `summary` parse their options without it
        import urllib.request

        data = gzip_module.compress(body, 6) if self.gzip else body
        request = urllib.request.Request(self.url, data=data, method="POST", headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return _partial(answer.read(1 << 16))
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code} {exc.reason}"
        except (OSError, ValueError) as exc:  # refused, unreachable, timed out, TLS
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, OSError):
                return os_reason(reason)
            return str(reason) or type(reason).__name__


def _partial(answer: bytes) -> str | None:
    """What a 2xx answer says was rejected (OTLP's partial success), None when nothing."""
    try:
        partial = json.loads(answer or b"{}").get("partialSuccess") or {}
        rejected = int(partial.get("rejectedDataPoints") or 0)
    except (ValueError, TypeError, AttributeError):
        return None  # not OTLP's JSON answer: a 2xx is a success
    if not rejected:
        return None
    return f"{rejected} data points rejected: {partial.get('errorMessage') or 'no reason given'}"
