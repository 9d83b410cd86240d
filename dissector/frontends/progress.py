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
    """Context manager: `counter` is what the read adds to.

    Two ways to draw, so that no thread runs when worker processes are forked (a lock held
    by a thread at fork time stays held in the child: it would hang there):
    - `threaded=True`: a background thread redraws (the read runs in this process);
    - `threaded=False`: the caller calls `draw()` while it waits (for its workers).
    """

    def __init__(self, total: int, *, threaded: bool, enabled: bool | None = None) -> None:
        self.total = total
        self.counter: Any = multiprocessing.RawValue("q", 0)  # shared with forked workers
        self.enabled = (sys.stderr.isatty() if enabled is None else enabled) and total > 0
        self.threaded = threaded
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._shown = 0

    def __enter__(self) -> ReadProgress:
        if self.enabled and self.threaded:
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
        if self._bar is not None:
            self._bar.close()

    def draw(self) -> None:
        """Redraw the bar from the counter (made on first use)."""
        if not self.enabled:
            return
        if self._bar is None:
            from tqdm import tqdm  # only when a bar is drawn

            tqdm.monitor_interval = 0  # no monitor thread either
            self._bar = tqdm(
                total=self.total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                delay=float(os.environ.get("PULSAR_DISSECT_PROGRESS_DELAY", DELAY)),
                file=sys.stderr,
                leave=False,
                dynamic_ncols=True,
            )
        done = min(self.counter.value, self.total)
        self._bar.update(done - self._shown)
        self._shown = done

    def _run(self) -> None:
        self.draw()
        while not self._stop.wait(INTERVAL):
            self.draw()
