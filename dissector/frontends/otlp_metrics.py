"""EDGE: where OpenTelemetry metrics go: a file of OTLP JSON lines and a collector.

Input: metric snapshots (`metrics.store.Snapshot`: one for an offline read, one per flush
interval for `live`), the resource's attributes, and where to send them: a file path
(`--otlp-out`), a collector's address (`--otlp-endpoint`, pushed by `metrics.push`).
Output: one ExportMetricsServiceRequest per snapshot (`metrics.otlp.export_line`): a line
appended to the file and flushed (a reader tailing it, or the Collector's `otlpjsonfile`
receiver, sees whole lines only), and the same bytes queued for the collector.
Rules: exporting never waits for the collector (`metrics.push.OtlpPush`); `close` waits at
most the push's timeout. A file that cannot be opened is an OutputError (one line) before
anything is read. `live` publishes snapshots more often than it exports them (`publish`:
one request per `interval` seconds, the newest; `close` exports the last one published).
"""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Mapping
from typing import BinaryIO, TextIO

from dissector.errors import OutputError, os_reason
from dissector.metrics.otlp import export_line
from dissector.metrics.push import TIMEOUT, OtlpPush
from dissector.metrics.store import Snapshot


def version() -> str | None:
    """This package's version (the metrics' instrumentation scope's)."""
    try:
        return importlib.metadata.version("pulsar-dissector")
    except importlib.metadata.PackageNotFoundError:
        return None


class OtlpMetricsOut:
    """The OTLP destinations of one run (module rules)."""

    def __init__(
        self,
        resource: Mapping[str, object],
        err: TextIO,
        *,
        path: str | None = None,
        endpoint: str | None = None,
        timeout: float = TIMEOUT,
        interval: float = 0.0,
        headers: Mapping[str, str] | None = None,
        gzip: bool = False,
    ) -> None:
        """interval: seconds between the requests `publish` makes (live's flush interval)."""
        self.resource = dict(resource)
        self.interval = interval
        self._due = time.monotonic() + interval
        self._unsent: Snapshot | None = None  # published, not exported yet
        self._version = version()
        self._file: BinaryIO | None = None
        if path is not None:
            try:
                self._file = open(path, "ab")  # noqa: SIM115 (closed by close())
            except OSError as exc:
                raise OutputError(f"{path}: cannot write OTLP metrics: {os_reason(exc)}") from None
        self.push = None
        if endpoint is not None:
            self.push = OtlpPush(endpoint, err, timeout=timeout, headers=headers, gzip=gzip)

    def export(self, snapshot: Snapshot) -> bytes:
        """One request of the snapshot, to the file and the collector; its bytes."""
        line = export_line(snapshot, self.resource, self._version)
        if self._file is not None:
            self._file.write(line)
            self._file.flush()
        if self.push is not None:
            self.push.submit(line)
        return line

    def due(self) -> bool:
        """Whether `publish` would export now (`interval` has passed since the last one)."""
        return time.monotonic() >= self._due

    def publish(self, snapshot: Snapshot) -> None:
        """The newest snapshot: exported when `due`, else kept for the next request (or
        `close`); one with no series yet (nothing seen) is not sent."""
        if not any(snapshot.series.values()):
            return
        if not self.due():
            self.keep(snapshot)
            return
        self._due = time.monotonic() + self.interval
        self._unsent = None
        self.export(snapshot)

    def keep(self, snapshot: Snapshot) -> None:
        """The newest snapshot, for `close` to export (unless a newer one is published)."""
        self._unsent = snapshot

    def close(self) -> None:
        """The last snapshot published exported, what waits sent (at most the push's
        timeout), and the file closed."""
        try:
            if self._unsent is not None:
                self.export(self._unsent)
                self._unsent = None
            if self.push is not None:
                self.push.close()
        finally:
            if self._file is not None:
                self._file.close()
