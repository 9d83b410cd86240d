"""`-j 2` gives the rows of `-j 1` in the same order, for every table, byte for byte.

Each table of a read in two workers (dissector.read.parallel: rows keyed by where they came
from, merged by the parent, dissector.read.row_order) is compared, as one Arrow IPC stream,
with the table of a one-process read (the reference): on the bundled samples read together,
on captures of many interleaved connections, some left open (closed at the capture's end in
order of their last packet), on TCP scenarios with idle pauses read with an idle timeout
(connections of both workers ending at the same packet, oldest first), also cut into a series
of two rotated files (packets numbered on), on several captures read one after the other
(groups), with the compiled stage on and off.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dissector import _core
from dissector.read import ReaderOptions, read_tables, row_order
from dissector.read.parallel import stream_tables_parallel
from dissector.tables import builders
from dissector.tables.schema import TABLES
from tests.support.core_captures import tcp_scenarios
from tests.support.crafted import Conn, baseline_session, write_pcap

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "pcaps").glob("*.pcap*"))


def ipc(table: pa.Table) -> bytes:
    """The table as an Arrow IPC stream, batch by batch as made (cut as one process cuts)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def two_ways(paths: list[Path], **options: Any) -> dict[str, tuple[bytes, bytes]]:
    """Per table, (the bytes of -j 1's table, those of -j 2's)."""
    opts = ReaderOptions(**options)
    one = read_tables([str(p) for p in paths], opts)
    got: dict[str, list[pa.RecordBatch]] = defaultdict(list)
    stream_tables_parallel(
        [str(p) for p in paths], opts, list(TABLES), lambda n, b: got[n].append(b), 2
    )
    return {
        name: (ipc(one[name]), ipc(pa.Table.from_batches(got[name], schema=TABLES[name].schema)))
        for name in TABLES
    }


def same_order(paths: list[Path], **options: Any) -> dict[str, int]:
    """Assert every table equal in bytes both ways; rows per table."""
    rows = {}
    for name, (one, two) in two_ways(paths, **options).items():
        assert two == one, (name, [p.name for p in paths], options)
        rows[name] = pa.ipc.open_stream(one).read_all().num_rows
    return rows


def interleaved(path: Path, count: int, v6_every: int = 0) -> Path:
    """`count` baseline sessions whose segments take turns (every third left open)."""
    sessions = []
    for i in range(count):
        v6 = v6_every and i % v6_every == 0
        conn = Conn(
            client_ip=f"fd00::{i + 1}" if v6 else f"10.0.{i % 3}.{i + 1}",
            broker_ip="fd00::ff" if v6 else "10.0.0.254",
            client_port=40000 + i,
        )
        sessions.append(baseline_session(conn, close=i % 3 != 0))
    longest = max(len(s.segs) for s in sessions)
    items = [s.segs[k] for k in range(longest) for s in sessions if k < len(s.segs)]
    return write_pcap(path, items).path


def rotated(path: Path, folder: Path) -> list[Path]:
    """A pcap cut in two halves named as tcpdump -C names them (one series)."""
    data = path.read_bytes()
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    starts, pos = [], 24
    while pos < len(data):
        starts.append(pos)
        pos += 16 + struct.unpack_from(order + "I", data, pos + 8)[0]
    cut = starts[len(starts) // 2]
    folder.mkdir()
    first, second = folder / "cap.pcap", folder / "cap.pcap1"
    first.write_bytes(data[:cut])
    second.write_bytes(data[:24] + data[cut:])
    return [first, second]


@pytest.fixture(params=["compiled", "python"])
def stage(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled" and not _core.COMPILED:
        pytest.skip("pure-Python build")
    monkeypatch.setenv(_core.SWITCH, "1" if request.param == "compiled" else "0")
    return str(request.param)


def test_many_connections_and_the_samples(tmp_path: Path, stage: str) -> None:
    many = interleaved(tmp_path / "many.pcap", 24, v6_every=4)
    rows = same_order([many])
    assert rows["conversations"] == 24 and rows["frames"] > 24 * 10
    assert rows["timeline"] > 0 and rows["messages"] > 0 and rows["entities"] > 0
    # several captures, one group each (no time overlap), numbered on
    same_order([*SAMPLES[:4], many], merge=False)


def test_batches_are_cut_as_one_process_cuts_them(
    tmp_path: Path, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of 50 rows (a group's last one shorter), over several groups."""
    monkeypatch.setattr(builders, "BATCH_ROWS", 50)
    monkeypatch.setattr(row_order, "BATCH_ROWS", 50)
    many = interleaved(tmp_path / "many.pcap", 9)
    rows = same_order([many, *SAMPLES[:2]], merge=False)
    assert rows["frames"] > 3 * 50


def test_idle_timeout_ends_connections_of_both_workers_in_order(tmp_path: Path, stage: str) -> None:
    ended = rotations = 0
    for n, path in enumerate(tcp_scenarios(tmp_path, 12, seed=39)):
        rows = same_order([path], idle_timeout=1.0)
        ended += rows["conversations"]
        same_order([path])
        if path.suffix == ".pcap":
            rotations += 1
            same_order(rotated(path, tmp_path / f"series{n}"), idle_timeout=1.0)
    assert ended > 12 and rotations > 3
