"""A real S3 endpoint on loopback: moto's server mode, as a child process.

Input: files to put in buckets. Output: `MotoS3` (a LoggedProcess; `.url` inside its `with`
block), `s3_env` (the environment a client of it needs) and `upload`.
Rule: the server speaks the S3 REST API over HTTP on 127.0.0.1 (`moto_server -H 127.0.0.1
-p PORT`); nothing is mocked in-process. Any access key and secret are accepted; with
`auth=True` (moto's INITIAL_NO_AUTH_ACTION_COUNT=0) unknown keys are refused, as AWS does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

import pyarrow.fs as pafs

from tests.support.peers import LOOPBACK, LoggedProcess, free_port

#: The secret every test client uses: tests check that it is printed nowhere.
SECRET = "s3cr3t-DO-NOT-PRINT-4f9c2b7e1a"
ACCESS_KEY = "AKIATESTKEYFORMOTO01"


def s3_env(endpoint: str | None = None) -> dict[str, str]:
    """This process's environment with test credentials (and the endpoint, if given), no
    instance-metadata lookups and no other endpoint variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_EC2_METADATA_DISABLED="true",
        AWS_REGION="us-east-1",
    )
    if endpoint is not None:
        env["AWS_ENDPOINT_URL"] = endpoint
    return env


def _moto_server() -> str:
    beside = Path(sys.executable).parent / "moto_server"
    found = str(beside) if beside.exists() else shutil.which("moto_server")
    if found is None:
        raise RuntimeError("moto_server not found: install the dev extra (moto[server])")
    return found


class MotoS3(LoggedProcess):
    """`moto_server` on 127.0.0.1 and a free port."""

    name = "moto_server"

    def __init__(self, auth: bool = False) -> None:
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.auth = auth
        self._dir = Path(tempfile.mkdtemp(prefix="moto-"))

    def start(self) -> Self:
        argv = [_moto_server(), "-H", LOOPBACK, "-p", str(self.port)]
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0") if self.auth else None
        with open(self._dir / "moto.log", "wb") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        try:
            self._wait_for(self._dir / "moto.log", b"Running on", 30.0)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._end_process()
        shutil.rmtree(self._dir, ignore_errors=True)

    def filesystem(self) -> pafs.S3FileSystem:
        """A client of this server that may create buckets (for filling it)."""
        deadline = time.monotonic() + 10
        fs = pafs.S3FileSystem(
            endpoint_override=f"{LOOPBACK}:{self.port}",
            scheme="http",
            access_key=ACCESS_KEY,
            secret_key=SECRET,
            region="us-east-1",
            allow_bucket_creation=True,
        )
        while time.monotonic() < deadline:  # the log line comes just before it listens
            try:
                fs.get_file_info("probe")
                return fs
            except OSError:
                time.sleep(0.1)
        return fs


def upload(fs: pafs.S3FileSystem, local: Path, bucket: str) -> None:
    """Put every file under folder `local` into `bucket`, under the same relative names
    (bytes as they are: no compression added for `.gz` names)."""
    fs.create_dir(bucket)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            key = f"{bucket}/{path.relative_to(local).as_posix()}"
            with fs.open_output_stream(key, compression=None) as out:
                out.write(path.read_bytes())


def sample_tree(folder: Path, samples: Path) -> Path:
    """Bundled samples laid out as a fleet keeps them, under `folder`/tree: plain captures,
    gzip'd ones (one bundled, one compressed here), a tcpdump -C rotated series cut from
    produce_consume.pcap, and a file that is not a capture (directories skip it)."""
    import gzip

    from tests.support.samples import split_pcap

    tree = folder / "tree"
    (tree / "samples" / "gz").mkdir(parents=True)
    (tree / "rotated").mkdir()
    for name in ("produce_consume.pcap", "batching.pcap", "keepalive.pcap"):
        shutil.copy(samples / name, tree / "samples" / name)
    shutil.copy(samples / "chunked.pcap.gz", tree / "samples" / "gz" / "chunked.pcap.gz")
    (tree / "samples" / "gz" / "acks.pcap.gz").write_bytes(
        gzip.compress((samples / "acks.pcap").read_bytes())
    )
    parts = [tree / "rotated" / n for n in ("cap.pcap", "cap.pcap1", "cap.pcap2")]
    split_pcap(samples / "produce_consume.pcap", parts, [30, 61])
    (tree / "samples" / "notes.txt").write_text("not a capture\n")
    return tree
