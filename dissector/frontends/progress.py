"""EDGE: a progress bar on stderr for reads that take a while, when stderr is a terminal.

Input: the bytes a read will go through, and a shared counter the read (and its worker
processes) add the bytes they have read to.
Output: a tqdm bar on stderr, redrawn from a background thread; nothing when stderr is not
a terminal (piped or redirected), and nothing for reads shorter than the delay (`DELAY`
seconds, or PULSAR_DISSECT_PROGRESS_DELAY from the environment).
Rule: the bar only reads the counter: the read itself never waits for it.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from types import TracebackType
from typing import Any

#: Seconds before a bar appears (tqdm's delay): short reads stay silent.
DELAY = 2.0
#: Seconds between redraws.
INTERVAL = 0.25


class ReadProgress:
    """Context manager: `counter` is what the read adds to; the bar runs while inside."""

    def __init__(self, total: int, *, enabled: bool | None = None) -> None:
        self.total = total
        self.counter: Any = multiprocessing.RawValue("q", 0)  # shared with forked workers
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ReadProgress:
        if self.enabled and self.total > 0:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        from tqdm import tqdm  # only when a bar is drawn

        with tqdm(
            total=self.total,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            delay=float(os.environ.get("PULSAR_DISSECT_PROGRESS_DELAY", DELAY)),
            file=sys.stderr,
            leave=False,
            dynamic_ncols=True,
        ) as bar:
            shown = 0
            while not self._stop.wait(INTERVAL):
                done = min(self.counter.value, self.total)
                bar.update(done - shown)
                shown = done
