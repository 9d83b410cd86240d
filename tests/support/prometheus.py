"""A real Prometheus server for the tests, and a static metrics endpoint to scrape.

Input: scrape targets (HOST:PORT of a `/metrics` endpoint); PromQL.
Output: `PrometheusServer` (Debian's `prometheus` on a free loopback port, scraping the targets
every second with its data in a temporary folder, started once it says it is ready and
`/-/ready` answers 200; `query`, `label_values`, `wait_for` over its HTTP API; stopped
with SIGTERM), `StaticMetrics` (an HTTP thread answering `/metrics` with fixed text),
`PromQLError`, and the Grafana board's variables as Grafana evaluates them (`substitute`,
`variable_values`).
Rule: no time-based waits: readiness is the server's own line on its log pipe, then its
ready endpoint; a condition on the data is polled over the HTTP API until it holds, with a
generous deadline only as a safety net (Prometheus has no push notification of a scrape).
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import pytest

from tests.support.peers import free_port

PROMETHEUS = shutil.which("prometheus")
#: Its log line once the TSDB is open and the web API answers.
READY_LINE = "Server is ready to receive web requests."
#: Seconds a start or a condition may take before the test fails (a hang, not the speed).
DEADLINE = 60.0
#: Loopback only: no proxy of the environment.
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
#: Pause between two polls of a condition (the HTTP API offers no change notification).
POLL = 0.2


class PromQLError(AssertionError):
    """Prometheus refused a query (its errorType and error)."""


def require_prometheus() -> str:
    """The `prometheus` program (`make testdeps` installs Debian's package): fail when
    missing, as the other tools of the `tools` tier do."""
    if PROMETHEUS is None:
        pytest.fail("prometheus not found: `make testdeps` installs it (Debian: prometheus)")
    return PROMETHEUS


def scrape_config(targets: list[str], job: str = "pulsar-dissector") -> str:
    """prometheus.yml: one job scraping `targets` every second (JSON is YAML)."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
    }
    return json.dumps(config, indent=2) + "\n"


class PrometheusServer:
    """`prometheus` on 127.0.0.1:<free port>, scraping `targets` (module docstring)."""

    def __init__(self, targets: list[str], tmp: Path) -> None:
        self.program = require_prometheus()
        self.tmp = tmp
        self.targets = targets
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log: list[str] = []
        self._logged = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Self:
        config = self.tmp / "prometheus.yml"
        config.write_text(scrape_config(self.targets), encoding="utf-8")
        self.proc = subprocess.Popen(
            [
                self.program,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        with self._logged:  # each log line, and the log's end, is an event
            self._logged.wait_for(self._ready_or_gone, DEADLINE)
        if not any(READY_LINE in line for line in self.log):
            self.stop()
            raise AssertionError(f"prometheus did not start: {self.log_tail()}")
        with NO_PROXY.open(f"{self.url}/-/ready", timeout=10) as answer:
            assert answer.status == 200, answer.status
        return self

    def _ready_or_gone(self) -> bool:
        gone = self.proc is None or self.proc.poll() is not None
        return gone or any(READY_LINE in line for line in self.log)

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._logged:
                self.log.append(line)
                self._logged.notify_all()
        with self._logged:
            self._logged.notify_all()

    def log_tail(self, n: int = 30) -> str:
        return "".join(self.log[-n:])

    def stop(self) -> None:
        """SIGTERM, and wait for the exit (it closes its TSDB cleanly)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the HTTP API

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH?params: its `data` (PromQLError when Prometheus says error)."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with NO_PROXY.open(url, timeout=30) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as exc:  # 400/422: a bad query, said in JSON
            body = json.load(exc)
        if body.get("status") != "success":
            raise PromQLError(f"{body.get('errorType')}: {body.get('error')} ({params})")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query at now: the vector's samples ({metric, value: [t, "v"]})."""
        data = self.api("query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def values(self, expr: str, label: str | None = None) -> dict[str, float]:
        """An instant query's values by one label's value ("" when unlabelled)."""
        return {
            (s["metric"].get(label, "") if label else ""): float(s["value"][1])
            for s in self.query(expr)
        }

    def label_values(self, label: str, match: str) -> list[str]:
        """The values of `label` in the series `match` selects (Grafana's label_values)."""
        return sorted(self.api(f"label/{label}/values", **{"match[]": match}))

    def scrapes(self) -> int:
        """Scrapes made so far (of every target: `up` gets a sample at each)."""
        return int(sum(self.values("count_over_time(up[1h])").values()))

    def wait_for_scrapes(self, more: int = 1) -> None:
        """Wait until `more` scrapes were made after this call: every series present now
        then has one sample more (a rate needs two)."""
        start = self.scrapes()
        self.wait_for(lambda: self.scrapes() >= start + more, f"{more} scrape(s) more")

    def targets_up(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def wait_for(
        self, done: Callable[[], bool | str], what: str, deadline: float = DEADLINE
    ) -> None:
        """Poll `done()` (a query's answer) until it holds; fail after `deadline` seconds.
        `done` may return what is still missing (a non-empty string) instead of False."""
        end = time.monotonic() + deadline
        while (missing := done()) is not True and missing != "":
            if time.monotonic() > end:
                raise AssertionError(
                    f"{what}: not true after {deadline:.0f} s ({missing})\n{self.log_tail(5)}"
                )
            time.sleep(POLL)


class StaticMetrics:
    """An HTTP server on 127.0.0.1:<free port> answering GET /metrics with `body`."""

    def __init__(self, body: bytes, content_type: str) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                outer.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.scrapes = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()


_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<match>.+),\s*)?(?P<label>\w+)\)$")


def substitute(expr: str, chosen: dict[str, str], rate_interval: str = "1m") -> str:
    """A board's query with Grafana's variables replaced: `$__rate_interval` and each
    `$name` by its chosen value (a regex for `=~`; `.*` is Grafana's "All")."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name in sorted(chosen, key=len, reverse=True):  # $topic before a $t
        expr = expr.replace(f"${name}", chosen[name])
    assert "$" not in expr, expr
    return expr


def variable_values(prom: PrometheusServer, query: str, chosen: dict[str, str]) -> list[str]:
    """A query variable's values as Grafana gets them: `label_values(MATCH, LABEL)` is
    Prometheus' /api/v1/label/LABEL/values?match[]=MATCH."""
    found = _LABEL_VALUES.match(substitute(query, chosen))
    assert found, query
    return prom.label_values(found["label"], found["match"] or "{__name__=~'.+'}")
