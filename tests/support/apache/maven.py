"""The Apache Pulsar jars and our Java client program, fetched and built into a cache.

Input:  broker.pom.xml or client.pom.xml (beside this module), settings.xml, our Java
        programs (ApacheClient.java and the others) and Json.java, their shared record writer;
        `mvn` and `javac` on PATH (`make testdeps` installs them).
Output: `jars(pom)`, the folder holding the runtime jars of that pom's dependency;
        `client_classes(source)`, the folder of the compiled program (ApacheClient by
        default) with Json; `pulsar_version()`.
Rule:   the cache folder is $PULSAR_DISSECTOR_APACHE_CACHE, else /tmp/pulsar-dissector-apache;
        each product sits in a folder named by the sha256 of what made it (the pom, or the
        Java sources, Json.java included, and the client's pom), built in a temporary folder
        and renamed into place when complete, under an exclusive lock (fcntl) so that
        concurrent sessions build it once. Maven resolves through Maven Central only
        (settings.xml), with maven-dependency-plugin 3.8.1 (the default 2.8 resolves Pulsar's
        test-scope dependencies and repositories this machine cannot reach); ~/.m2 keeps the
        downloads.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.support import build_cache
from tests.support.build_cache import locked, run_checked

HERE = Path(__file__).resolve().parent
BROKER_POM = HERE / "broker.pom.xml"
CLIENT_POM = HERE / "client.pom.xml"
SETTINGS = HERE / "settings.xml"
CLIENT_SOURCE = HERE / "ApacheClient.java"
#: The record writer every program of ours is compiled with.
JSON_SOURCE = HERE / "Json.java"
CACHE_ENV = "PULSAR_DISSECTOR_APACHE_CACHE"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
#: Generous bounds: a first fetch downloads about 270 MB; a warm one takes seconds.
FETCH_TIMEOUT = 1800.0
COMPILE_TIMEOUT = 300.0
MISSING = (
    "{tool} is required by the Apache broker tests but was not found on PATH: "
    "`make testdeps` installs it (apt-get install -y maven default-jdk-headless)"
)


def cache_root() -> Path:
    """The cache folder of the Apache peers (created if missing)."""
    return build_cache.cache_root(CACHE_ENV, "/tmp/pulsar-dissector-apache")


def pulsar_version(pom: Path = BROKER_POM) -> str:
    """The Pulsar version a pom names (both poms name the same one)."""
    found = re.search(r"<version>(\d+\.\d+\.\d+)</version>", pom.read_text(encoding="utf-8"))
    assert found, f"no Pulsar version in {pom}"
    return found.group(1)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(MISSING.format(tool=name))
    return found


def _digest(*paths: Path) -> str:
    sha = hashlib.sha256()
    for path in paths:
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def _run(argv: list[str], timeout: float, what: str) -> None:
    run_checked(argv, what, timeout)


def _build(name: str, make: Callable[[Path], None]) -> Path:
    """The cache folder `name`, made by `make(folder)` in a temporary folder if missing."""
    with locked(cache_root()) as root:
        final = root / name
        if final.is_dir():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
        try:
            make(staging)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return final


def jars(pom: Path) -> Path:
    """The folder of the runtime jars of `pom`'s dependency, fetched with Maven if missing."""

    def fetch(folder: Path) -> None:
        argv = [_tool("mvn"), "-q", "-B", "-s", str(SETTINGS), "-f", str(pom)]
        argv += [f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={folder}"]
        argv += ["-DincludeScope=runtime"]
        _run(argv, FETCH_TIMEOUT, f"fetching the jars of {pom.name}")
        if not any(folder.glob("*.jar")):
            raise RuntimeError(f"Maven copied no jar for {pom.name}")

    return _build(f"{pom.stem}-{pulsar_version(pom)}-{_digest(pom)}", fetch)


def client_classes(source: Path = CLIENT_SOURCE, pom: Path = CLIENT_POM) -> Path:
    """The folder of the compiled `source` (a Java program beside this module, compiled
    with Json.java by javac against `pom`'s jars when either source or the pom changed)."""
    lib = jars(pom)

    def compile_(folder: Path) -> None:
        argv = [_tool("javac"), "-d", str(folder), "-cp", f"{lib}/*", str(source)]
        _run([*argv, str(JSON_SOURCE)], COMPILE_TIMEOUT, f"compiling {source.name}")

    return _build(f"{source.stem}-classes-{_digest(source, JSON_SOURCE, pom)}", compile_)
