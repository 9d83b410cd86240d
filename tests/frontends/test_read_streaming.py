"""`read` and `summary` as streams: tables written batch by batch, in one or several processes.

- `-j 2` gives the rows of `-j 1` for every table in the same order, conn_ids included,
  across several captures and a capture with many connections.
- `-o FOLDER` writes every table from one read, equal to `read_capture`'s tables.
- A read that fails half way leaves no output file behind, and names the failing file.
- The format follows the output's suffix; several --table need a folder.
- `summary --top N` lists the N busiest connections and counts all of them.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dissector.read import read_tables
from dissector.tables.schema import TABLES
from tests.support.cli import cli
from tests.support.crafted import Conn, baseline_session, write_pcap
from tests.support.samples import CAPTURES


def _rows(table_path: Path) -> pd.DataFrame:
    return pq.read_table(table_path).to_pandas()


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A capture with 40 interleaved connections (every third left open), so that each
    worker has several."""
    path = tmp_path_factory.mktemp("many") / "many.pcap"
    sessions = [
        baseline_session(
            Conn(client_ip=f"10.0.{i % 3}.{i + 1}", client_port=40000 + i), close=i % 3 != 0
        )
        for i in range(40)
    ]
    longest = max(len(s.segs) for s in sessions)
    items = [s.segs[k] for k in range(longest) for s in sessions if k < len(s.segs)]
    write_pcap(path, items)
    return path


def test_two_workers_give_the_rows_of_one(tmp_path: Path, many: Path) -> None:
    captures = [str(p) for p in CAPTURES] + [str(many)]
    one, two = tmp_path / "one", tmp_path / "two"
    assert cli("read", *captures, "-o", str(one), "-j", "1").returncode == 0
    done = cli("read", *captures, "-o", str(two), "-j", "2")
    assert done.returncode == 0, done.stderr
    conns = pq.read_table(one / "conversations.parquet").column("conn_id").to_pylist()
    assert len(conns) > 40 and len(set(conns)) == len(conns)
    assert max(conns) < 2 * len(conns)  # small ids, on from one capture to the next
    for name in TABLES:
        a, b = _rows(one / f"{name}.parquet"), _rows(two / f"{name}.parquet")
        assert len(a) == len(b), name
        pd.testing.assert_frame_equal(a, b, obj=name)


def test_a_folder_gets_every_table_of_one_read(tmp_path: Path) -> None:
    capture = next(p for p in CAPTURES if p.name.startswith("produce_consume"))
    done = cli("read", str(capture), "-o", str(tmp_path / "out"), "-j", "1")
    assert done.returncode == 0, done.stderr
    expected = read_tables(capture)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f"{n}.parquet" for n in TABLES
    )
    for name in TABLES:
        written = pq.read_table(tmp_path / "out" / f"{name}.parquet")
        assert written.schema.equals(TABLES[name].schema), name
        assert written.equals(expected[name]), name


def test_several_tables_in_csv_to_a_folder(tmp_path: Path) -> None:
    capture = next(p for p in CAPTURES if p.name.startswith("acks"))
    out = tmp_path / "csv"
    done = cli(
        "read", str(capture), "--table", "frames", "--table", "timeline", "--format", "csv",
        "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["frames.csv", "timeline.csv"]
    expected = read_tables(capture)
    for name in ("frames", "timeline"):
        got = pacsv.read_csv(out / f"{name}.csv")
        assert got.column_names == TABLES[name].names
        assert got.num_rows == expected[name].num_rows


def test_a_failed_read_leaves_no_file(tmp_path: Path) -> None:
    good = next(p for p in CAPTURES if p.name.startswith("produce_consume"))
    bad = tmp_path / "not_a_capture.pcap"
    bad.write_bytes(b"this is not a capture file at all")
    targets = ("frames.parquet", "frames.csv", "frames.jsonl", "folder")
    for target, jobs in [(t, "1") for t in targets] + [("folder", "2")]:
        out = tmp_path / "out" / target
        out.parent.mkdir(exist_ok=True)
        done = cli("read", str(good), str(bad), "-o", str(out), "-j", jobs)
        assert done.returncode == 2
        assert str(bad) in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        leftovers = [p.name for p in out.parent.rglob("*") if p.is_file()]
        assert leftovers == [], leftovers


@pytest.mark.slow  # many command runs: left out of `make check`
def test_the_format_follows_the_suffix(tmp_path: Path) -> None:
    capture = next(p for p in CAPTURES if p.name.startswith("keepalive"))
    frames = read_tables(capture)["frames"]
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"f{suffix}"
        assert cli("read", str(capture), "--table", "frames", "-o", str(out)).returncode == 0
        if suffix == ".parquet":
            assert pq.read_table(out).num_rows == frames.num_rows
        elif suffix == ".csv":
            assert out.read_text().splitlines()[0].startswith('"ts","conn_id"')
        else:
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            assert [r["command"] for r in rows] == frames.column("command").to_pylist()
    done = cli("read", str(capture), "--table", "frames", "-o", str(tmp_path / "f.txt"))
    assert done.returncode == 2 and "--format" in done.stderr
    done = cli("read", str(capture), "--table", "frames", "--table", "anomalies")
    assert done.returncode == 2 and "-o FOLDER" in done.stderr


@pytest.mark.slow  # many command runs: left out of `make check`
def test_summary_lists_the_busiest_connections(many: Path) -> None:
    done = cli("summary", str(many), "--format", "json", "--top", "5")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    conversations = read_tables(many)["conversations"].to_pandas()
    assert summary["connection_count"] == len(conversations) == 40
    busiest = conversations.assign(frames=conversations.frames_c2b + conversations.frames_b2c)
    busiest = busiest.sort_values(["frames", "conn_id"], ascending=[False, True]).head(5)
    assert sorted(c["conn_id"] for c in summary["connections"]) == sorted(busiest.conn_id)
    text = cli("summary", str(many), "--top", "5").stdout
    assert "40 connections" in text and "the 5 busiest" in text


def _interrupt_once_begun(proc: subprocess.Popen[bytes], out: Path, stderr: Path) -> str:
    """SIGINT once the read has begun its output (a hidden file in `out`); its stderr, from
    a file (a pipe would also wait for any process that inherited it). The read cannot end
    before: its input is held open by the caller."""
    deadline = time.monotonic() + 60
    while not any(out.iterdir()):
        assert proc.poll() is None, stderr.read_text()
        assert time.monotonic() < deadline, "the read never began its output"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    return stderr.read_text()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_stops_with_one_line_and_no_file(tmp_path: Path, jobs: str) -> None:
    """SIGINT in the middle of a read: exit 130, one line on stderr, nothing left on disk.
    The capture comes on standard input (`-`: one process, whatever -j says) from this
    test, which keeps the pipe open: the read waits for more, so it is still running when
    it is interrupted, however fast the machine."""
    big = next(p for p in CAPTURES if p.name.startswith("large_1mib"))
    out, stderr = tmp_path / "out", tmp_path / "stderr.txt"
    out.mkdir()
    with stderr.open("wb") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dissector.frontends.cli", "read", "-", "--table",
             "messages", "-o", str(out / "m.parquet"), "-j", jobs],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err_file,
        )  # fmt: skip
    assert proc.stdin is not None
    try:
        # A write into a pipe returns once the reader took all but what the pipe holds
        # (64 KiB): the read is under way. No end of file follows.
        proc.stdin.write(big.read_bytes())
        proc.stdin.flush()
        err = _interrupt_once_begun(proc, out, stderr)
    finally:
        proc.kill()
        proc.stdin.close()
    assert proc.returncode == 130, err
    assert err.strip() == "pulsar-dissect: interrupted", err
    assert list(out.iterdir()) == []


#: `pulsar-dissect` taking a FIFO for a regular file, so that `-j N` forks N workers that
#: each open it (dissector.read.parallel.workers decides; nothing else is changed).
SHARDED_CLI = (
    "import sys\n"
    "from dissector.read import parallel\n"
    "from dissector.frontends import cli\n"
    "from dissector.frontends.cli import options\n"
    "options.workers = parallel.workers = lambda paths, jobs: jobs\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def test_ctrl_c_stops_every_worker_of_a_sharded_read(tmp_path: Path) -> None:
    """SIGINT to a read in two worker processes: exit 130, one line, and the parent stops
    both workers and removes their scratch folder and the output. The workers read a FIFO
    that this test holds open and writes nothing to: the read is running by construction;
    once the command is gone, no process has the FIFO open for reading any more."""
    fifo, out, scratch = tmp_path / "held.pcap", tmp_path / "out", tmp_path / "tmp"
    stderr = tmp_path / "stderr.txt"
    os.mkfifo(fifo)
    out.mkdir()
    scratch.mkdir()
    with stderr.open("wb") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", SHARDED_CLI, "read", str(fifo), "--table", "messages",
             "-o", str(out / "m.parquet"), "-j", "2"],
            stdout=subprocess.DEVNULL, stderr=err_file,
            env={**os.environ, "TMPDIR": str(scratch)},
        )  # fmt: skip
    deadline = time.monotonic() + 60
    writer = None
    try:
        while (writer := _writer_if_read(fifo)) is None:  # a reader waits for a writer
            assert proc.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        while len(_opened_by_children(proc.pid, fifo)) < 2:  # both workers read it
            assert proc.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        assert any(scratch.iterdir()), "not a sharded read (only that one has scratch files)"
        err = _interrupt_once_begun(proc, out, stderr)
    finally:
        if writer is not None:
            os.close(writer)  # a worker left running would read the end of the capture
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "pulsar-dissect: interrupted", err
    assert list(out.iterdir()) == [] and list(scratch.iterdir()) == []
    assert _writer_if_read(fifo) is None  # every worker stopped


def _writer_if_read(fifo: Path) -> int | None:
    """A write end of the FIFO if some process has it open for reading, else None."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
        return None


def _opened_by_children(pid: int, path: Path) -> list[int]:
    """The child processes of `pid` that have `path` open (Linux /proc)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in children:
        with contextlib.suppress(OSError):  # it may end meanwhile
            fds = Path(f"/proc/{child}/fd").iterdir()
            if any(os.readlink(fd) == str(path) for fd in fds):
                found.append(int(child))
    return found


@pytest.mark.slow  # many command runs: left out of `make check`
def test_idle_timeout_when_reading_follows_capture_time(tmp_path: Path) -> None:
    """`read --idle-timeout T`: with T above the capture's longest silence nothing changes;
    with T under it, a connection ends with `timeout`. Silences come from the packet
    timestamps, read here with scapy."""
    from scapy.utils import RawPcapReader

    capture = next(p for p in CAPTURES if p.name.startswith("keepalive"))
    stamps = [sec + usec / 1e6 for _, (sec, usec, *_rest) in RawPcapReader(str(capture))]
    longest = max(b - a for a, b in itertools.pairwise(stamps))
    assert longest > 0.5

    def ended(*extra: str) -> list[str]:
        out = tmp_path / "c.parquet"
        done = cli("read", str(capture), "--table", "conversations", "-o", str(out), *extra)
        assert done.returncode == 0, done.stderr
        values: list[str] = pq.read_table(out).column("ended").to_pylist()
        return values

    plain = ended()
    assert "timeout" not in plain
    assert ended("--idle-timeout", str(longest + 1)) == plain
    assert "timeout" in ended("--idle-timeout", str(longest / 2))
    bad = cli("read", str(capture), "--idle-timeout", "-1")
    assert bad.returncode == 2 and "not a number of seconds" in bad.stderr
