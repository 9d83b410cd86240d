"""ValuesClient.java (the official Java client with each of its schemas), built and run.

Input:  values.pom.xml (pulsar-client, protobuf-java-util, protoc from Maven Central),
        values.proto and ValuesClient.java beside this module; a broker's service URL and a
        topic prefix.
Output: `values_classes()`, the folder of the classes protoc and javac made;
        `run_values(url, prefix)`, the client's own JSON record (ValuesClient.java says its
        fields).
Rule:   as maven.client_classes, but the program needs the Java classes of values.proto:
        protoc (the pom's, the version of the protobuf-java that pulsar-client brings) writes
        them, javac compiles them with the program; the cache folder is named by the sha256
        of the sources (Json.java, the record writer, is compiled beside it), the proto and the
        pom, built once under maven's lock. The run is client.run_class's:
        bounded, a non-zero exit raises with its output's tail. Nothing here reads our
        dissector's output.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path
from typing import Any

from tests.support.apache import maven
from tests.support.apache.client import run_class

VALUES_POM = maven.HERE / "values.pom.xml"
VALUES_PROTO = maven.HERE / "values.proto"
VALUES_SOURCE = maven.HERE / "ValuesClient.java"


def values_classes() -> Path:
    """The folder of ValuesClient and the classes of values.proto, compiled if missing."""
    lib = maven.jars(VALUES_POM)
    protocs = sorted(lib.glob("protoc-*.exe"))
    assert protocs, f"values.pom.xml brought no protoc into {lib}"

    def compile_(folder: Path) -> None:
        protoc = folder / "protoc"
        shutil.copyfile(protocs[0], protoc)
        protoc.chmod(protoc.stat().st_mode | stat.S_IXUSR)
        generated = folder / "generated"
        generated.mkdir()
        argv = [str(protoc), f"--proto_path={maven.HERE}", f"--java_out={generated}"]
        maven._run([*argv, str(VALUES_PROTO)], maven.COMPILE_TIMEOUT, "protoc values.proto")
        sources = [str(p) for p in sorted(generated.rglob("*.java"))]
        argv = [maven._tool("javac"), "-d", str(folder), "-cp", f"{lib}/*"]
        programs = [str(VALUES_SOURCE), str(maven.JSON_SOURCE)]
        maven._run([*argv, *sources, *programs], maven.COMPILE_TIMEOUT, "javac")
        shutil.rmtree(generated)
        protoc.unlink()

    digest = maven._digest(VALUES_SOURCE, maven.JSON_SOURCE, VALUES_PROTO, VALUES_POM)
    return maven._build(f"{VALUES_SOURCE.stem}-classes-{digest}", compile_)


def run_values(url: str, prefix: str) -> dict[str, Any]:
    """Run ValuesClient against `url`, its topics named `prefix`-CASE; its record."""
    classpath = f"{values_classes()}:{maven.jars(VALUES_POM)}/*"
    return run_class(classpath, VALUES_SOURCE.stem, [url, prefix])
