"""Captures in object storage: a real S3 endpoint on loopback (moto_server) holding the
bundled samples (gzip'd ones and a rotated series too); every table read from s3:// equals
the table of the same files read from the local disk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.capture import _source, open_capture
from dissector.capture.listing import expand_captures
from dissector.capture.locations import filesystem_for
from dissector.capture.series import group
from dissector.errors import InputError
from dissector.tables.schema import TABLES
from tests.support.peers import free_port
from tests.support.s3 import SECRET, MotoS3, s3_env, sample_tree, upload

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
REMOTE = "s3://captures/tree"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(endpoint URL, local folder whose `tree` is also s3://captures/tree)."""
    local = tmp_path_factory.mktemp("fleet")
    sample_tree(local, PCAPS)
    with MotoS3() as server:
        fs = server.filesystem()
        upload(fs, local, "captures")
        fs.create_dir("bucket2")
        with fs.open_output_stream("bucket2/big/large.pcap", compression=None) as out:
            out.write((PCAPS / "large_1mib.pcap").read_bytes())
        yield server.url, local


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test credentials in this process; no endpoint variable."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in s3_env().items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )


def assert_same(remote: dict[str, pa.Table], local: dict[str, pa.Table], root: Path) -> None:
    """Tables equal, the `capture` column naming the s3:// object of each local file."""
    assert remote.keys() == local.keys()
    for name, table in remote.items():
        want = local[name]
        if "capture" in table.column_names:
            captures = [c.replace(REMOTE, str(root)) for c in table["capture"].to_pylist()]
            assert captures == want["capture"].to_pylist(), name
            table = table.drop_columns(["capture"])
            want = want.drop_columns(["capture"])
        assert table.num_rows == want.num_rows, name
        assert table.equals(want), name


def test_cli_directories_and_globs_from_s3_equal_local(store, tmp_path: Path) -> None:
    """Endpoint from AWS_ENDPOINT_URL, as the AWS CLI reads it."""
    url, local = store
    env = s3_env(url)
    for source, out in ((f"{REMOTE}/", "remote"), (f"{local}/tree/", "local")):
        # --no-merge: the rotated series is produce_consume.pcap again, taken at its time
        args = ("read", source, "-o", str(tmp_path / out) + "/", "-j", "1", "--no-merge")
        res = cli(*args, env=env)
        assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert names == sorted(f"{t}.parquet" for t in TABLES)
    read = {
        d: {n[:-8]: pq.read_table(tmp_path / d / n) for n in names} for d in ("remote", "local")
    }
    assert_same(read["remote"], read["local"], local / "tree")
    captures = set(read["remote"]["conversations"]["capture"].to_pylist())
    assert captures == {  # the rotated series is one capture; notes.txt is not one
        f"{REMOTE}/rotated/cap.pcap",
        *(f"{REMOTE}/samples/{n}" for n in ("batching.pcap", "keepalive.pcap")),
        f"{REMOTE}/samples/produce_consume.pcap",
        *(f"{REMOTE}/samples/gz/{n}" for n in ("acks.pcap.gz", "chunked.pcap.gz")),
    }
    for pattern in ("samples/**/*.gz", "samples/*.pcap"):
        for source, out in ((f"{REMOTE}/{pattern}", "r"), (f"{local}/tree/{pattern}", "l")):
            target = str(tmp_path / f"{out}.parquet")
            res = cli("read", source, "--table", "messages", "-o", target, "-j", "1", env=env)
            assert res.returncode == 0, res.stderr
        got, want = pq.read_table(tmp_path / "r.parquet"), pq.read_table(tmp_path / "l.parquet")
        assert got.num_rows > 0
        assert_same({"m": got}, {"m": want}, local / "tree")


def test_read_capture_and_cli_with_explicit_endpoint(store, env, tmp_path: Path) -> None:
    """Endpoint from the option alone: no AWS_ENDPOINT_URL in the environment."""
    url, local = store
    remote = dissector.read_capture(f"{REMOTE}/", s3_endpoint=url)
    want = dissector.read_capture(str(local / "tree"))
    assert_same(remote.arrow, want.arrow, local / "tree")
    assert len(remote.paths) == 8  # 5 samples, 3 rotated files
    res = cli(
        "read",
        f"{REMOTE}/rotated/cap.pcap*",
        "--s3-endpoint",
        url,
        "--table",
        "timeline",
        "-o",
        str(tmp_path / "t.parquet"),
        env=s3_env(),
    )
    assert res.returncode == 0, res.stderr
    whole = dissector.read_capture(PCAPS / "produce_consume.pcap", tables=["timeline"])
    assert pq.read_table(tmp_path / "t.parquet").equals(whole.arrow["timeline"])


def test_rotated_series_in_object_storage_is_one_capture(store, env) -> None:
    url, _ = store
    files = expand_captures([f"{REMOTE}/rotated/"], url)
    series = [f"{REMOTE}/rotated/cap.pcap{n}" for n in ("", "1", "2")]
    assert group(list(reversed(files))) == [series]
    remote = dissector.read_capture(files, s3_endpoint=url)
    whole = dissector.read_capture(PCAPS / "produce_consume.pcap")
    for name in ("frames", "messages", "timeline", "entities"):
        assert remote.arrow[name].equals(whole.arrow[name]), name
    assert remote.conversations.capture.tolist() == [f"{REMOTE}/rotated/cap.pcap"]


def test_remote_capture_is_streamed_not_downloaded(store, env, monkeypatch) -> None:
    """The first packet of a 2 MB object comes after a few KiB were fetched."""
    url, _ = store
    monkeypatch.setattr(_source, "CHUNK_SIZE", 4096)
    fs, path = filesystem_for("s3://bucket2/big/large.pcap", url)
    size = fs.get_file_info(path).size
    with open_capture("s3://bucket2/big/large.pcap", url) as reader:
        packets = iter(reader)
        next(packets)
        assert reader.position < 64 << 10 < size
        count = 1 + sum(1 for _ in packets)
    with open_capture(PCAPS / "large_1mib.pcap") as local:
        assert count == sum(1 for _ in local)


def test_errors_are_one_line_naming_the_location_without_secrets(store, tmp_path) -> None:
    url, _ = store
    closed = f"http://127.0.0.1:{free_port()}"
    nobucket = "s3://no-such-bucket/x.pcap"
    unreachable = f"cannot reach the endpoint {closed[len('http://') :]}"
    cases: list[tuple[list[str], str]] = [
        ([nobucket], f"{nobucket}: no such bucket 'no-such-bucket'"),
        ([f"{REMOTE}/missing.pcap"], f"{REMOTE}/missing.pcap: no such file"),
        ([f"{REMOTE}/*.nothing"], f"{REMOTE}/*.nothing: no file matches"),
        ([f"{REMOTE}/samples/", "--s3-endpoint", closed], f"{REMOTE}/samples/: {unreachable}"),
        ([f"{REMOTE}/samples/batching.pcap", "--s3-endpoint", closed], unreachable),
    ]
    outputs: list[str] = []
    for args, message in cases:
        res = cli("read", *args, env=s3_env(url))
        outputs += [res.stdout, res.stderr]
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
        assert message in res.stderr
    with MotoS3(auth=True) as strict:  # refuses unknown keys, as AWS does
        strict.filesystem()
        res = cli("read", "s3://captures/x.pcap", env=s3_env(strict.url))
        outputs += [res.stdout, res.stderr]
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert "s3://captures/x.pcap:" in res.stderr and "credentials" in res.stderr
    good = cli("read", "-V", f"{REMOTE}/samples/keepalive.pcap", env=s3_env(url))
    assert good.returncode == 0 and "CONNECT" in good.stdout
    outputs += [good.stdout, good.stderr]
    assert all(SECRET not in text for text in outputs)


def test_missing_object_from_the_python_api(store, env) -> None:
    url, _ = store
    with pytest.raises(InputError, match=r"^s3://captures/nope\.pcap: no such file$") as info:
        dissector.read_capture("s3://captures/nope.pcap", s3_endpoint=url)
    assert SECRET not in str(info.value)
