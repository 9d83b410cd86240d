"""One Apache Pulsar broker in standalone mode on loopback, for a whole test session.

Input:  the broker's jars (maven.py), a JDK's `java`, free ports on 127.0.0.1.
Output: `ApacheBroker`, a context manager whose `.url` (pulsar://127.0.0.1:PORT), `.web_url`,
        `.port`, `.pid` and `.log_text()` are valid inside it; `config_text()` is the
        standalone.conf it was given; `startup_seconds` how long the start took.
Rule:   the broker runs `org.apache.pulsar.PulsarStandaloneStarter` (broker, one bookie, RocksDB
        metadata; the functions worker and stream storage off) in a fresh folder, in a process
        group of its own; every listening port is on 127.0.0.1 (bindAddress for the broker and
        web service, listeningInterface=lo with advertisedAddress for the bookie). It is ready
        when its log shows the messaging service ready and then the last namespace the starter
        creates (pulsar/system): an event read from the log, bounded by STARTUP_TIMEOUT, after
        which the start fails with the log's tail. The system topics and topic policies are
        off so that only the tests' own clients talk on the broker port. Broker entry metadata
        (timestamp and index) is on and exposed to clients. Stopping sends SIGTERM to its PID
        and waits; a broker that does not end, or a failed start, has its group killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from tests.support.apache.maven import BROKER_POM, jars, pulsar_version
from tests.support.peers import LOOPBACK, LoggedProcess, free_port

#: Generous: about 10-20 s on an idle 2-core machine, far more under load or a first JIT.
STARTUP_TIMEOUT = 300.0
#: The log lines that say it is ready, in order (PulsarService, then PulsarStandalone's last
#: namespace: before it the client may find public/default missing).
READY = (b"messaging service is ready", b"Created namespace pulsar/system")
JVM_OPTIONS = ("-Xms128m", "-Xmx1g", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true")
ENTRY_INTERCEPTORS = (
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor",
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
)


class ApacheBroker(LoggedProcess):
    """An Apache Pulsar standalone broker on 127.0.0.1; `extra` adds standalone.conf keys."""

    name = "apache-pulsar"
    stop_timeout = 60.0

    def __init__(self, *, extra: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.web_port = free_port()
        self.bookie_port = free_port()
        self.url = f"pulsar://{LOOPBACK}:{self.port}"
        self.web_url = f"http://{LOOPBACK}:{self.web_port}"
        self.version = pulsar_version()
        self.extra = dict(extra or {})
        self.workdir: Path | None = None
        self.log_path: Path | None = None
        self.startup_seconds: float | None = None
        self._final_log = ""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def config_text(self) -> str:
        """The standalone.conf handed to the starter (also read as the bookie's settings)."""
        settings = {
            "clusterName": "standalone",
            "bindAddress": LOOPBACK,
            "advertisedAddress": LOOPBACK,
            "listeningInterface": "lo",
            "brokerServicePort": str(self.port),
            "webServicePort": str(self.web_port),
            "managedLedgerDefaultEnsembleSize": "1",
            "managedLedgerDefaultWriteQuorum": "1",
            "managedLedgerDefaultAckQuorum": "1",
            # the bookie reads this file too: the distribution's bookkeeper.conf gives its
            # frames 10 KiB above maxMessageSize (5 MiB), else an entry of a full-size
            # message or chunk plus its broker entry metadata is refused by the bookie
            "nettyMaxFrameSizeBytes": "5253120",
            "brokerEntryMetadataInterceptors": ",".join(ENTRY_INTERCEPTORS),
            "exposingBrokerEntryMetadataToClientEnabled": "true",
            "functionsWorkerEnabled": "false",
            "systemTopicEnabled": "false",
            "topicLevelPoliciesEnabled": "false",
            **self.extra,
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def argv(self, workdir: Path, lib: Path) -> list[str]:
        """The command that starts it (docs/development.md gives it for a start by hand)."""
        java = shutil.which("java") or "java"
        return [
            java,
            *JVM_OPTIONS,
            "-cp",
            f"{lib}/*",
            "org.apache.pulsar.PulsarStandaloneStarter",
            "--config",
            str(workdir / "standalone.conf"),
            "--no-functions-worker",
            "--no-stream-storage",
            "--metadata-dir",
            str(workdir / "metadata"),
            "--bookkeeper-dir",
            str(workdir / "bookkeeper"),
            "--bookkeeper-port",
            str(self.bookie_port),
            "--wipe-data",
        ]

    def log_text(self) -> str:
        """The broker's log so far (kept after `stop`)."""
        if self.log_path is not None and self.log_path.exists():
            return self.log_path.read_text(errors="replace")
        return self._final_log

    def start(self) -> Self:
        lib = jars(BROKER_POM)
        self.workdir = Path(tempfile.mkdtemp(prefix="apache-pulsar-"))
        (self.workdir / "standalone.conf").write_text(self.config_text(), encoding="utf-8")
        self.log_path = self.workdir / "broker.log"
        began = time.monotonic()
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                self.argv(self.workdir, lib),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # its own process group, killed on failure
            )
        try:
            for line in READY:
                self._wait_for(self.log_path, line, STARTUP_TIMEOUT)
        except BaseException:
            self._kill_group()
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _kill_group(self) -> None:
        """SIGKILL to its process group, while its leader (the broker) is alive: the group is
        then surely the one it made."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM to its PID and wait; kill its group if it does not end; remove its folder."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
        self._proc = None
        if self.workdir is not None:
            self._final_log = self.log_text()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = self.log_path = None
