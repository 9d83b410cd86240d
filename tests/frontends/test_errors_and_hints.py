"""What a user is told when an output cannot be written or a capture holds no Pulsar.

Every failure is one line naming the path asked for and the reason in words (no errno
number, no temporary name), exit 2, and nothing left on disk. A capture without Pulsar
frames still succeeds, but says so, and names the port to try when TCP conversations were
seen elsewhere. The captures are crafted with scapy here; the expected words come from the
situation made (the ports put in, the file size limit set), not from our output.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from tests.support.cli import cli

SAMPLE = Path(__file__).resolve().parents[2] / "pcaps" / "produce_consume.pcap"


def one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Errno" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def http_capture(path: Path, port: int, conversations: int) -> None:
    """TCP conversations (handshake, a request, a response) to `port`: not Pulsar."""
    pkts = []
    for i in range(conversations):
        client = 40000 + i
        c2s = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=client, dport=port)
        s2c = Ether() / IP(src="10.0.0.2", dst="10.0.0.1") / TCP(sport=port, dport=client)
        pkts += [
            c2s.copy() / TCP(flags="S", seq=100),
            s2c.copy() / TCP(flags="SA", seq=500, ack=101),
            c2s.copy() / TCP(flags="PA", seq=101, ack=501) / Raw(b"GET / HTTP/1.1\r\n\r\n"),
            s2c.copy() / TCP(flags="PA", seq=501, ack=119) / Raw(b"HTTP/1.1 200 OK\r\n\r\n"),
        ]
    for n, p in enumerate(pkts):
        p.time = 1_700_000_000 + n / 1000
    wrpcap(str(path), pkts)


def test_no_pulsar_but_tcp_elsewhere_suggests_the_port(tmp_path: Path) -> None:
    cap = tmp_path / "http.pcap"
    http_capture(cap, 8080, 3)
    for args in (
        ["read", str(cap)],
        ["summary", str(cap)],
        ["read", str(cap), "--table", "frames"],
    ):
        res = cli(*args)
        assert res.returncode == 0, res.stderr
        assert res.stderr.strip().splitlines() == [
            "pulsar-dissect: no Pulsar frame found on the broker ports (6650, 6651); TCP "
            "conversations on other ports: 8080 (3); if Pulsar listens there, try --port 8080"
        ], (args, res.stderr)


def test_no_tcp_at_all_says_no_pulsar_frame(tmp_path: Path) -> None:
    cap = tmp_path / "udp.pcap"
    pkt = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5353, dport=5353) / b"x"
    pkt.time = 1_700_000_000
    wrpcap(str(cap), [pkt])
    res = cli("read", str(cap), "--port", "7000")
    assert res.returncode == 0 and res.stdout == ""
    assert (
        res.stderr
        == "pulsar-dissect: no Pulsar frame found on the broker ports (6650, 6651, 7000)\n"
    )


def test_a_capture_with_pulsar_gives_no_hint() -> None:
    res = cli("read", str(SAMPLE))
    assert res.returncode == 0 and res.stdout and res.stderr == ""


def test_missing_output_folder_is_named(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "f.parquet"
    line = one_line(cli("read", str(SAMPLE), "--table", "frames", "-o", str(out)))
    assert line == f"pulsar-dissect: {out}: cannot write: no folder {out.parent}"
    assert not (tmp_path / "no").exists()


def test_unwritable_folder_names_the_path_not_a_temporary_name(tmp_path: Path) -> None:
    out = tmp_path / "file-not-folder"
    out.write_text("x")
    line = one_line(cli("read", str(SAMPLE), "-o", str(out / "tables") + "/"))
    assert line.startswith(f"pulsar-dissect: {out}/tables/: cannot make this folder: ")
    assert line.endswith("not a directory")


def _limited(limit: int) -> None:
    """In the child: files may not grow past `limit` bytes (as on a full disk), and going
    past it is an error (EFBIG), not the SIGXFSZ signal."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def limited_read(*args: str, limit: int = 4096) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "read", str(SAMPLE), *args],
        capture_output=True, text=True, check=False, preexec_fn=lambda: _limited(limit),
    )  # fmt: skip


@pytest.mark.slow  # many command runs: left out of `make check`
def test_a_write_that_fails_midway_leaves_nothing(tmp_path: Path) -> None:
    for fmt, target in (("csv", "m.csv"), ("parquet", "m.parquet"), ("parquet", "all/")):
        out = tmp_path / fmt / target
        out.parent.mkdir(exist_ok=True)
        table = ["--table", "messages"] if not target.endswith("/") else []
        line = one_line(limited_read(*table, "--format", fmt, "-o", str(out), "-j", "1"))
        assert line.endswith(": cannot write: file too large"), line
        assert line.startswith(f"pulsar-dissect: {out}"), line
        assert os.listdir(out.parent) == [], (fmt, os.listdir(out.parent))  # nothing left


def test_workers_scratch_space_that_runs_out_is_named(tmp_path: Path) -> None:
    """-j 2 workers write their share to scratch files in TMPDIR first: when those cannot be
    written, the line names TMPDIR and the ways out, and the output is not left behind."""
    out = tmp_path / "m.parquet"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    res = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", "read", str(SAMPLE), "--table",
         "messages", "-o", str(out), "-j", "2"],
        capture_output=True, text=True, check=False, env=env, preexec_fn=lambda: _limited(4096),
    )  # fmt: skip
    line = one_line(res)
    assert line.startswith(f"pulsar-dissect: {scratch}: cannot write the workers' scratch files: ")
    assert "file too large" in line and "-j 1" in line and "TMPDIR" in line
    assert not out.exists() and os.listdir(scratch) == []


def test_options_are_not_abbreviated() -> None:
    """`read --top 3` (a summary option) must not quietly filter by topic '3' (--topic)."""
    line = one_line(cli("read", str(SAMPLE), "--top", "3"))
    assert line.startswith("pulsar-dissect: unrecognized arguments: --top 3")


def test_every_input_is_checked_before_any_output(tmp_path: Path) -> None:
    """`read good.pcap missing.pcap` prints nothing of good.pcap: one line, exit 2 (the
    good one sorts first, so it would be read first were the inputs not checked)."""
    good, missing = tmp_path / "a.pcap", tmp_path / "b.pcap"
    good.write_bytes(SAMPLE.read_bytes())
    res = cli("read", str(good), str(missing))
    assert res.stdout == ""
    assert one_line(res) == f"pulsar-dissect: {missing}: no such file"


#: a byte that is never UTF-8, as Python gives an argument holding it (surrogate-escaped)
NOT_UTF8 = os.fsdecode(b"\xff")


@pytest.mark.parametrize(
    "argv",
    [
        ["read", str(SAMPLE), "-Y", f"topic == '{NOT_UTF8}'"],
        ["read", str(SAMPLE), "--table", "messages", "--topic", f"a{NOT_UTF8}"],
        ["read", str(SAMPLE), "--topic", NOT_UTF8],
        ["read", str(SAMPLE), "--table", "frames", "--columns", f"ts,{NOT_UTF8}"],
        ["sql", str(SAMPLE), f"SELECT '{NOT_UTF8}' FROM frames"],
        ["summary", str(SAMPLE), "--values", "--redact-fields", NOT_UTF8],
    ],
)
def test_text_arguments_that_are_not_utf8_are_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 42 item 10: duckdb's and pyarrow's encoding errors ended in tracebacks."""
    from dissector.frontends.cli import main

    assert main(argv) == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err.count("\n") == 1, got.err
    assert "not UTF-8" in got.err and "\\xff" in got.err


def test_undecodable_bytes_from_the_real_argv(tmp_path: Path) -> None:
    """The same through a process's argv; a file name of such bytes is read as it is."""
    line = one_line(cli("read", str(SAMPLE), "-Y", f"topic == '{NOT_UTF8}'"))
    assert line.startswith("pulsar-dissect: --filter: ") and "not UTF-8" in line
    odd = tmp_path / os.fsdecode(b"caf\xe9.pcap")
    odd.write_bytes(SAMPLE.read_bytes())
    out = tmp_path / os.fsdecode(b"out\xe9.jsonl")
    res = cli("read", str(odd), "--table", "frames", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 0
