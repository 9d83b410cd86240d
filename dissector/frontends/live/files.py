"""EDGE: the files a live capture writes: pcap rotated like tcpdump, Parquet parts.

Input: packets (time, bytes, wire length) and Arrow record batches of the tables.
Output: pcap files PATH, PATH1, ... (written by dissector.capture.pcap_writer) rotated by
size (-C), time (-G) and count (-W); Parquet datasets ROOT/TABLE/part-NNNNNN.parquet.
Rule: every file on disk is valid at every moment: pcap records are written whole, Parquet
parts are written under a hidden name and renamed.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import deque
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from dissector.capture.pcap_writer import write_header, write_packet
from dissector.errors import InputError
from dissector.tables.schema import TABLES

PART_ROWS = 65536  # rows of one table held before a Parquet part is written early


class PcapFiles:
    """Raw packets into pcap files, rotated like tcpdump.

    -C: before a packet is written, a file larger than `rotate_bytes` is closed.
    -G: a packet `rotate_seconds` or more after its file was opened starts a new one.
    Names as tcpdump -C: PATH, PATH1, PATH2, ... (what `read` joins into one series). With -G
    and `%` codes in PATH, PATH is expanded by strftime (local time) for each new file and
    the numbers restart with each new name. -W N: only the newest N files are kept.
    """

    def __init__(
        self,
        path: str,
        linktype: int,
        *,
        rotate_bytes: int | None = None,
        rotate_seconds: float | None = None,
        max_files: int | None = None,
        start: float | None = None,
    ) -> None:
        self.path, self.linktype = path, linktype
        self.rotate_bytes, self.rotate_seconds = rotate_bytes, rotate_seconds
        self.max_files = max_files
        self.files: deque[str] = deque()  # files on disk, oldest first
        self.opened = 0
        self._base, self._number = "", 0
        self._fh: BinaryIO | None = None
        self._size = 0
        self._open(time.time() if start is None else start)

    def _name(self, now: float) -> str:
        base = self.path
        if self.rotate_seconds and "%" in base:
            base = time.strftime(base, time.localtime(now))
        self._number = self._number + 1 if base == self._base and self.opened else 0
        self._base = base
        return base + str(self._number) if self._number else base

    def _open(self, now: float) -> None:
        name = self._name(now)
        self._fh = open(name, "wb")  # noqa: SIM115  (closed by close() or the next rotation)
        self._size = write_header(self._fh.write, self.linktype)
        self._started = now
        self.opened += 1
        self.files.append(name)
        while self.max_files is not None and len(self.files) > self.max_files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.files.popleft())

    def write(self, ts: int, data: bytes, orig_len: int) -> None:
        """One packet: `ts` in µs since the epoch (its time also drives -G)."""
        now = ts / 1e6
        if (self.rotate_bytes is not None and self._size > self.rotate_bytes) or (
            self.rotate_seconds is not None and now - self._started >= self.rotate_seconds
        ):
            self.close()
            self._open(now)
        assert self._fh is not None
        self._size += write_packet(self._fh.write, ts, data, orig_len)

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()


class ParquetParts:
    """Tables as Parquet datasets: ROOT/TABLE/part-NNNNNN.parquet, one part per flush.

    A table that got no row still gets one empty part at close, so that every dataset can
    be read with its schema (`pandas.read_parquet("ROOT/frames")`).
    """

    def __init__(self, root: str, *, prefix: str = "", check: bool = True) -> None:
        """prefix: in the parts' names (several writers of one root, `live -j`); check:
        that the root holds no tables yet (the first of them only)."""
        self.root = Path(root)
        self.prefix = prefix
        if check:
            check_parquet_root(self.root)
        self.pending: dict[str, list[pa.RecordBatch]] = {name: [] for name in TABLES}
        self.rows = dict.fromkeys(TABLES, 0)
        self.parts = dict.fromkeys(TABLES, 0)

    def add(self, name: str, batches: list[pa.RecordBatch]) -> None:
        for batch in batches:
            self.pending[name].append(batch)
            self.rows[name] += batch.num_rows
        if self.rows[name] >= PART_ROWS:
            self._write(name)

    def flush(self) -> None:
        for name, rows in self.rows.items():
            if rows:
                self._write(name)

    def close(self) -> None:
        self.flush()
        for name, parts in self.parts.items():
            if not parts:
                self._write(name)

    def _write(self, name: str) -> None:
        table = pa.Table.from_batches(self.pending[name], schema=TABLES[name].schema)
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"part-{self.prefix}{self.parts[name]:06d}.parquet"
        hidden = directory / f".{final.name}.tmp"  # readers skip names starting with "."
        pq.write_table(table, hidden)
        os.replace(hidden, final)
        self.parts[name] += 1
        self.pending[name], self.rows[name] = [], 0


def check_parquet_root(root: Path) -> None:
    """-o must name a new or empty directory: parts of two runs would not join."""
    if root.exists() and not root.is_dir():
        raise InputError(f"{root}: exists and is not a directory (-o takes a directory)")
    if any(root.glob("*/*.parquet")):
        raise InputError(f"{root}: already holds tables; give a new directory")
