"""Issue 31 F7, F8, F9, F16: odd arguments give a usage error or work, never a traceback.

F7 an idle timeout too large for whole microseconds; F16 key log paths as bytes or None;
F8 capture file names that are not UTF-8 (Linux allows any bytes); F9 an S3 URL without a
bucket. Expected values: the same read with the plain equivalent (no timeout, a str path, a
UTF-8 name), and the bytes of the name written as \\xNN by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import dissector
from dissector.errors import UsageError
from dissector.read import ReaderOptions, read_tables
from tests.support.cli import cli
from tests.support.samples import PCAPS

SAMPLE = PCAPS / "produce_consume.pcap"
KEYLOG = "CLIENT_RANDOM " + "00" * 32 + " " + "11" * 48 + "\n"


@pytest.mark.parametrize("seconds", [1e303, 1e308, float("inf"), 2.0**62])
def test_an_idle_timeout_past_any_capture_is_none(seconds: float) -> None:
    never = read_tables(SAMPLE, ReaderOptions(idle_timeout=None), ["conversations"])
    huge = read_tables(SAMPLE, ReaderOptions(idle_timeout=seconds), ["conversations"])
    assert huge["conversations"].equals(never["conversations"])


@pytest.mark.parametrize("seconds", [float("nan"), -1.0, "5", True and "x"])
def test_an_idle_timeout_that_is_no_duration(seconds: object) -> None:
    with pytest.raises(UsageError, match="idle_timeout"):
        ReaderOptions(idle_timeout=seconds)  # type: ignore[arg-type]


def test_the_command_line_takes_a_huge_idle_timeout() -> None:
    done = cli("read", str(SAMPLE), "--idle-timeout", "1e303", "-c", "1")
    assert done.returncode == 0, done.stderr
    assert "CONNECT" in done.stdout


def test_key_logs_as_bytes_paths(tmp_path: Path) -> None:
    keylog = tmp_path / "kl.txt"
    keylog.write_text(KEYLOG)
    as_str = dissector.read_capture(SAMPLE, tls_keylog=str(keylog))
    as_bytes = dissector.read_capture(SAMPLE, tls_keylog=os.fsencode(keylog))
    assert as_bytes.arrow["frames"].equals(as_str.arrow["frames"])
    both = dissector.read_capture(SAMPLE, tls_keylog=[os.fsencode(keylog), keylog])
    assert both.arrow["frames"].equals(as_str.arrow["frames"])


@pytest.mark.parametrize("keylog", [[None], 5, [b"ok", 3.5]])
def test_key_logs_that_are_no_paths(keylog: object) -> None:
    with pytest.raises(UsageError, match="tls_keylog"):
        dissector.read_capture(SAMPLE, tls_keylog=keylog)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        ReaderOptions(tls_keylog=(None,))  # type: ignore[arg-type]


@pytest.fixture
def odd_name(tmp_path: Path) -> bytes:
    name = os.path.join(os.fsencode(tmp_path), b"\xff\xfe-cap.pcap")
    shutil.copy(os.fsencode(SAMPLE), name)
    return name


@pytest.mark.slow  # many command runs: left out of `make check`
def test_a_capture_name_that_is_not_utf8(odd_name: bytes, tmp_path: Path) -> None:
    shown = os.fsdecode(os.path.dirname(odd_name)) + "/\\xff\\xfe-cap.pcap"  # by hand
    plain = tmp_path / "plain.pcap"
    shutil.copy(SAMPLE, plain)
    text = os.fsdecode(odd_name)
    for args in (
        ["summary", text, "-j", "1"],
        ["summary", text, "-j", "2"],
        ["report", text, "-o", str(tmp_path / "r.html")],
        ["read", text, "-w", str(tmp_path / "out.pcap")],
        ["read", text, "--table", "conversations", "-o", str(tmp_path / "c.parquet")],
    ):
        done = subprocess_cli(args)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    capture = pq.read_table(tmp_path / "c.parquet").column("capture").to_pylist()
    assert capture == [shown]
    assert (tmp_path / "out.pcap").read_bytes() == _written(plain, tmp_path)
    assert "\\xff\\xfe-cap.pcap" in (tmp_path / "r.html").read_text()
    api = dissector.read_capture(os.fsdecode(odd_name))  # as os.listdir names it
    assert api.arrow["conversations"].column("capture").to_pylist() == [shown]


def _written(plain: Path, tmp_path: Path) -> bytes:
    """What -w writes for the same capture under a plain name."""
    out = tmp_path / "plain-out.pcap"
    done = cli("read", str(plain), "-w", str(out))
    assert done.returncode == 0, done.stderr
    return out.read_bytes()


def subprocess_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    """cli() with arguments that may hold surrogate-escaped bytes (passed as bytes)."""
    argv = [sys.executable.encode(), b"-m", b"dissector.frontends.cli"]
    argv += [os.fsencode(a) for a in args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("url", ["s3:///x", "s3://", "gs:///a/b.pcap", "s3a:///k"])
def test_an_object_store_url_without_a_bucket(url: str) -> None:
    done = cli("read", url, "--s3-endpoint", "http://127.0.0.1:9")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"pulsar-dissect: {url}: no bucket name "
                                        f"({url.split(':')[0]}://BUCKET/PATH)"]  # fmt: skip


@pytest.mark.slow  # several seconds: in make test, not in make check's quick tier
@pytest.mark.parametrize(
    ("bound", "value", "rows"),
    [("--since", "1e20", 0), ("--since", "-1e30", None), ("--until", "inf", None),
     ("--until", "-1e300", 0)],
)  # fmt: skip
def test_time_bounds_past_any_timestamp(bound: str, value: str, rows: int | None) -> None:
    """Campaign rerun (cli level): `--since 1e20` ended in a TypeError inside pyarrow (a
    bound past int64 microseconds); a bound past every timestamp keeps all rows or none."""
    done = cli("read", str(SAMPLE), f"{bound}={value}", "--table", "frames", "--format", "csv")
    assert done.returncode == 0, done.stderr
    everything = cli("read", str(SAMPLE), "--table", "frames", "--format", "csv").stdout
    expected = everything.count("\n") - 1 if rows is None else rows
    assert done.stdout.count("\n") - 1 == expected


def test_a_time_that_is_not_a_number() -> None:
    done = cli("read", str(SAMPLE), "--since=nan")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "pulsar-dissect: not a time: 'nan' (ISO 8601 or Unix seconds)"
    ]
