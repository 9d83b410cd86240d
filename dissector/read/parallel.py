"""EDGE: dissect captures in several processes, each one shard of the connections.

Input: capture paths, reader options, table names, a job count and a sink for record batches.
Output: the tables' record batches, handed to the sink table after table, each table's
rows in the order one process makes them.
Rules:
- Every worker reads every packet record and dissects only the connections of its shard
  (dissector.flow.shard; the compiled walk skips other shards' packets without making
  them, the Python path tells them from their bytes, unparsed where the link and IP headers
  are plain): a connection is whole in one worker, so its rows are the rows one process
  makes. Capture damage is reported by worker 0 only.
- conn_id is renumbered as one process numbers connections (dissector.read.numbering: each
  worker lists what it opened), and each worker keys its rows with where they came from
  (dissector.read.row_order): the parent merges the workers' rows by key, so `-j N` gives
  the rows of `-j 1` in the same order. The flow table's bound on open connections applies
  per worker.
- Workers are forked and write Arrow IPC files to a scratch folder that is removed at the
  end; memory per process stays that of a one-process read. A worker's error is raised in
  the parent; workers ignore Ctrl-C (SIGINT), and the parent, interrupted, stops them all.
- Inputs that are not regular files (standard input, pipes) are read by one process, and
  so are reads with values (--values): a topic's schemas, taught by its producers'
  connections, decode its consumers' messages on other connections (docs/values.md).
- The findings, checks and journeys tables span connections (reconnects, redirects, migrations; a
  message's producer and its consumers): no shard sees them all, so one more worker reads
  every connection for them alone (its stages those of its tables: dissector.read.plan) and
  numbers connections as one process does: their rows are those of `-j 1` by
  construction, and the other tables' workers do not make them.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

import numpy as np
import pyarrow as pa

from dissector.capture.merge import Progress
from dissector.errors import DissectorError, OutputError, os_reason
from dissector.read.driver import fewer_collections
from dissector.read.numbering import Opened, renumber, renumbering
from dissector.read.options import PathLike, ReaderOptions, as_paths
from dissector.read.row_order import RowKeys, keyed_schema, merge
from dissector.read.tables import ReadCounts, stream_tables
from dissector.tables.builders import Sink
from dissector.tables.schema import TABLES

#: Tables that need every connection: made by one more worker that reads them all.
WHOLE = frozenset({"findings", "checks", "journeys"})
#: Seconds between two calls of `waiting` while the workers run.
WAIT_TICK = 0.25
#: What a worker reports: the connections it opened, and what it counted.
WorkerReport = tuple[Opened, ReadCounts]


def default_jobs() -> int:
    """The number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def workers(paths: PathLike | Iterable[PathLike], jobs: int) -> int:
    """The processes a read of `paths` with `jobs` uses: one unless they are regular files."""
    if jobs <= 1 or not all(os.path.isfile(f) for f in as_paths(paths)):
        return 1
    return jobs


def stream_tables_parallel(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions,
    tables: Iterable[str],
    sink: Sink,
    jobs: int,
    progress: Progress | None = None,
    waiting: Callable[[], None] | None = None,
) -> ReadCounts:
    """As dissector.read.tables.stream_tables, with `jobs` worker processes (see the module
    docstring).

    waiting: called about every WAIT_TICK seconds while the workers run (to redraw a
    progress bar from this thread: no thread may run here when the workers are forked).

    progress: counts bytes of capture read, by every worker: up to `jobs` times their size
    (a shared value such as multiprocessing.RawValue("q"), inherited by the workers).
    """
    names = list(tables)
    files = as_paths(paths)
    jobs = workers(files, jobs)
    sharded = [n for n in names if n not in WHOLE]
    if jobs == 1 or not sharded or options.values:
        return stream_tables(files, options, names, sink, progress)
    whole = [n for n in names if n in WHOLE]
    with tempfile.TemporaryDirectory(prefix="pulsar-dissect-") as scratch:
        reports = _run_workers(files, options, sharded, jobs, scratch, progress, waiting, whole)
        tables_of = renumbering([o for o, _ in reports[:jobs]], options.per_series_ids)
        with fewer_collections():  # as a one-process read writes them
            _gather([n for n in TABLES if n in names], jobs, scratch, tables_of, sink)
    counts = sum((counts for _, counts in reports[:jobs]), ReadCounts())
    for _, extra in reports[jobs:]:  # its frames were counted by the shards
        counts.rows.update({n: extra.rows[n] for n in whole})
    return counts


def _gather(
    names: list[str],
    jobs: int,
    scratch: str,
    tables_of: list[dict[int, np.ndarray]],
    sink: Sink,
) -> None:
    """The workers' tables to `sink`, each table's rows merged in order (module rules)."""
    for name in names:
        with ExitStack() as opened_files:
            if name in WHOLE:
                for batch in _batches(opened_files, scratch, jobs, name):
                    sink(name, batch)
                continue
            parts = [
                _renumbered(_batches(opened_files, scratch, k, name), tables_of[k])
                for k in range(jobs)
            ]
            for batch in merge(parts):
                sink(name, batch)


def _run_workers(
    files: list[str],
    options: ReaderOptions,
    names: list[str],
    jobs: int,
    scratch: str,
    progress: Progress | None,
    waiting: Callable[[], None] | None = None,
    whole: list[str] | None = None,
) -> list[WorkerReport]:
    """Fork the workers and gather their reports. A worker's error is raised here; on any
    error or interruption (Ctrl-C reaches the parent: workers ignore SIGINT) every worker
    still running is stopped. whole: tables made by one more worker, unsharded (its report
    last)."""
    context = multiprocessing.get_context("fork")
    running: list[tuple[BaseProcess, Connection]] = []
    try:
        # Ctrl-C waits while the workers start: one arriving between a fork and the
        # worker's registration would leave that worker running with no parent to stop it
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            assigned: list[tuple[list[str], tuple[int, int] | None, Progress | None]] = [
                (names, (k, jobs), progress) for k in range(jobs)
            ]
            if whole:
                assigned.append((whole, None, None))
            for k, (made, shard, counter) in enumerate(assigned):
                receive, send = context.Pipe(duplex=False)
                args = (send, files, options, made, shard, scratch, counter, k)
                worker = context.Process(target=_worker, args=args, name=f"shard-{k}")
                worker.start()
                send.close()
                running.append((worker, receive))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a pending Ctrl-C fires now
        reports: dict[int, WorkerReport] = {}
        pending = {receive: k for k, (_, receive) in enumerate(running)}
        while pending:
            if waiting is not None:
                waiting()
            for ready in wait(list(pending), WAIT_TICK):
                assert isinstance(ready, Connection)
                k = pending.pop(ready)
                try:
                    kind, value = ready.recv()
                except EOFError:
                    code = running[k][0].exitcode
                    raise DissectorError(f"worker {k} of {jobs} died (exit code {code})") from None
                if kind == "error":
                    raise value
                reports[k] = value
        return [reports[k] for k in range(len(running))]
    finally:
        for process, receive in running:
            if process.is_alive():
                process.terminate()
            process.join()
            receive.close()


def _worker(
    send: Connection,
    files: list[str],
    options: ReaderOptions,
    names: list[str],
    shard: tuple[int, int] | None,
    scratch: str,
    progress: Progress | None,
    index: int,
) -> None:
    """A worker process: its report, or the error that stopped it, goes to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the workers
    try:
        send.send(("report", _work(files, options, names, shard, scratch, progress, index)))
    except Exception as exc:  # handed over, raised by the parent
        try:
            send.send(("error", exc))
        except Exception:  # not picklable
            send.send(("error", DissectorError(f"worker {index}: {exc!r}")))
    finally:
        send.close()


def _part(scratch: str, worker: int, table: str) -> str:
    return os.path.join(scratch, f"{worker}-{table}.arrow")


def _renumbered(
    batches: Iterator[pa.RecordBatch], luts: dict[int, np.ndarray]
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield renumber(batch, luts)


def _batches(files: ExitStack, scratch: str, worker: int, table: str) -> Iterator[pa.RecordBatch]:
    """A worker's batches of a table, its file closed with `files`."""
    # read, not memory-mapped: mapped pages would count in the parent's memory
    source = files.enter_context(pa.OSFile(_part(scratch, worker, table)))
    reader = pa.ipc.open_file(source)
    for i in range(reader.num_record_batches):
        yield reader.get_batch(i)


def _work(
    files: list[str],
    options: ReaderOptions,
    names: list[str],
    shard: tuple[int, int] | None,
    scratch: str,
    progress: Progress | None = None,
    index: int = 0,
) -> WorkerReport:
    """Dissect one shard of the captures (every connection when shard is None: the tables of
    WHOLE) into IPC files; list what it opened. A scratch file that cannot be written (a full
    disk) is our OutputError naming the scratch folder."""
    mine = dataclasses.replace(options, shard=shard)  # its stages: its tables' (read.plan)
    keys = None if shard is None else RowKeys()  # the rows of the WHOLE tables: in order
    try:
        sinks = {name: pa.OSFile(_part(scratch, index, name), "wb") for name in names}
        writers = {
            name: pa.ipc.new_file(
                sinks[name],
                TABLES[name].schema if keys is None else keyed_schema(TABLES[name].schema),
            )
            for name in names
        }
        opened: Opened = {}

        def write(name: str, batch: pa.RecordBatch) -> None:
            writers[name].write_batch(batch if keys is None else keys.keyed(name, batch))

        try:
            counts = stream_tables(files, mine, names, write, progress, opened, keys=keys)
        finally:
            for name in names:
                writers[name].close()
                sinks[name].close()
    except OSError as exc:
        raise OutputError(
            f"{os.path.dirname(scratch)}: cannot write the workers' scratch files: "
            f"{os_reason(exc)} "
            "(free space there, set TMPDIR to another folder, or read with -j 1)"
        ) from None
    return opened, counts
