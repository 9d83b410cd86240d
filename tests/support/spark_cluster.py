"""A Spark standalone cluster on loopback: one master and its workers, from pyspark's jars.

Input: how many workers, and the cores and memory of each.
Output: a context manager whose `.url` (spark://127.0.0.1:PORT) takes applications once
every worker has registered with the master.
Rule: the daemons are the pip `pyspark` package's own (`spark-class ...Master` / `...Worker`,
no `start-master.sh` there), bound to 127.0.0.1 with SPARK_LOCAL_IP (the driver needs it
too: `env()`); all start at once (workers retry until the master answers); readiness is the
master's JSON status page listing every worker ALIVE, not a sleep. Leaving the block
stops the workers, then the master, also when starting failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Self

import pyspark

from tests.support.peers import LoggedProcess, free_port

LOOPBACK = "127.0.0.1"
SPARK_HOME = str(Path(pyspark.__file__).parent)


def env(**extra: str) -> dict[str, str]:
    """The environment of the daemons and of a driver talking to them: loopback only."""
    return {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": LOOPBACK, **extra}


def _spark_class(main: str, *args: str) -> list[str]:
    return [os.path.join(SPARK_HOME, "bin", "spark-class"), main, *args]


class _Daemon(LoggedProcess):
    """One daemon JVM (spark-class execs java: the process signalled is the JVM)."""

    stop_timeout = 15.0

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name, self.argv, self.log_path = name, argv, log_path

    def start(self) -> Self:
        """Start without waiting: the cluster waits for the master to list its workers."""
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env()
            )
        return self

    def exited(self) -> int | None:
        return None if self._proc is None else self._proc.poll()


class SparkCluster:
    """A standalone master and `workers` workers on 127.0.0.1; see the module docstring."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workdir, self.workers, self.cores, self.memory = workdir, workers, cores, memory
        port, ui = free_port(), free_port()
        self.url = f"spark://{LOOPBACK}:{port}"
        self.ui = f"http://{LOOPBACK}:{ui}"
        self._daemons: list[_Daemon] = []

    def start(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        port, ui = self.url.rsplit(":", 1)[1], self.ui.rsplit(":", 1)[1]
        master = _spark_class(
            "org.apache.spark.deploy.master.Master",
            *("--host", LOOPBACK, "--port", port, "--webui-port", ui),
        )
        # all at once (JVM start-up is the slow part): workers retry until the master is up
        self._daemons.append(_Daemon("spark-master", master, self.workdir / "master.log"))
        for i in range(self.workers):
            work = self.workdir / f"worker{i}"
            work.mkdir(exist_ok=True)
            worker = _spark_class(
                "org.apache.spark.deploy.worker.Worker",
                *("--host", LOOPBACK, "--port", "0", "--webui-port", "0"),
                *("--cores", str(self.cores), "--memory", self.memory),
                *("--work-dir", str(work), self.url),
            )
            self._daemons.append(_Daemon(f"spark-worker{i}", worker, self.workdir / f"w{i}.log"))
        for daemon in self._daemons:
            daemon.start()
        self._wait_for_workers(180.0)

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as page:
            status: dict[str, Any] = json.load(page)
        return status

    def _wait_for_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        alive: list[Any] = []
        while len(alive) < self.workers:
            dead = [d.name for d in self._daemons if d.exited() is not None]
            if dead or time.monotonic() > deadline:
                logs = {p.name: p.read_text(errors="replace")[-1500:] for p in self._logs()}
                why = f"{dead} exited" if dead else f"{len(alive)} workers within {timeout}s"
                raise RuntimeError(f"Spark cluster not ready ({why}): {logs}")
            time.sleep(0.25)
            try:
                workers = self.status().get("workers", [])
            except OSError:  # the master's web UI is not up yet
                continue
            alive = [w for w in workers if w.get("state") == "ALIVE"]

    def _logs(self) -> list[Path]:
        return sorted(self.workdir.glob("*.log"))

    def stop(self) -> None:
        for daemon in reversed(self._daemons):  # workers first, then the master
            daemon.stop()
        self._daemons = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
