"""Our Java program (ApacheClient.java) driving the official Java client against a broker.

Input:  a service URL, a topic, a subscription and the shape of the run (messages sent one
        by one, batches and their size).
Output: the client's own JSON record (ApacheClient.java says its fields): what it sent, with
        the message ids the broker gave back, and what it received and acknowledged, with the
        broker entry metadata it saw.
Rule:   the program is compiled by maven.client_classes() (once per source); it runs to its
        end (bounded by RUN_TIMEOUT, generous) and a non-zero exit raises with its output's
        tail. Nothing here reads our dissector's output.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.support.apache.maven import CLIENT_POM, CLIENT_SOURCE, client_classes, jars
from tests.support.build_cache import run_checked

RUN_TIMEOUT = 300.0


def run_java(
    source: Path, args: list[str], *, pom: Path = CLIENT_POM, timeout: float = RUN_TIMEOUT
) -> dict[str, Any]:
    """Run the Java program `source` (its class is the file's stem) with `args` and the path
    of its record appended as the last argument; its record (a dict from its JSON)."""
    classpath = f"{client_classes(source, pom)}:{jars(pom)}/*"
    return run_class(classpath, source.stem, args, timeout=timeout)


def run_class(
    classpath: str, main: str, args: list[str], *, timeout: float = RUN_TIMEOUT
) -> dict[str, Any]:
    """Run the Java class `main` on `classpath` as run_java does; its record."""
    java = shutil.which("java") or "java"
    with tempfile.TemporaryDirectory(prefix=f"{main}-") as tmp:
        out = Path(tmp) / "record.json"
        argv = [java, "-Xmx256m", "-cp", classpath, main, *args, str(out)]
        run_checked(argv, main, timeout)
        if not out.exists():
            raise RuntimeError(f"{main} ended without writing its record {out}")
        record: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return record


def run_client(
    url: str, topic: str, subscription: str, *, singles: int, batches: int, batch_size: int
) -> dict[str, Any]:
    """Run ApacheClient against `url`; its record (a dict from its JSON)."""
    args = [url, topic, subscription, str(singles), str(batches), str(batch_size)]
    return run_java(CLIENT_SOURCE, args)
