"""EDGE: read capture files through the pipeline into events or tables.

Input: one or more capture paths (files, globs, directories, local or remote) and reader
settings (`ReaderOptions`: broker ports, TLS ports, frame limit, tables wanted...).
Output: `iter_events` streams pipeline events (memory stays flat for captures of any size);
`read_tables` returns Arrow tables; `read_capture` returns a `Capture` whose attributes are
pandas DataFrames.
Rule: every read (local, merged groups, -j workers, Spark and fleet executors) goes through
one run driver (`driver`), the stages it runs are decided once (`plan`, from the tables
asked for), and connection ids in one place (`numbering`). The modules: options (settings,
paths), plan (which stages a read runs), driver (the run driver, its GC setting), runs (what
each front end hands the driver), numbering (conn_id ranges, -j renumbering), tables (events
-> record batches), parallel (-j worker processes), inputs (checks and hints around a read),
dataframes (pandas); each is imported on first use of its name here. Damage that ends a
file's reading becomes an anomaly row, never an exception; a file that is not a capture
raises InputError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissector._lazy import lazy_names

if TYPE_CHECKING:
    from dissector.read.dataframes import Capture, read_capture
    from dissector.read.options import ReaderOptions
    from dissector.read.runs import iter_events
    from dissector.read.tables import read_tables

#: Public name -> its module, imported on first use (the modules below bring pyarrow: a
#: submodule import such as `dissector.read.runs` must not pay for them).
_LAZY = {
    "Capture": "dissector.read.dataframes",
    "read_capture": "dissector.read.dataframes",
    "ReaderOptions": "dissector.read.options",
    "iter_events": "dissector.read.runs",
    "read_tables": "dissector.read.tables",
}

if not TYPE_CHECKING:  # type checkers see the imports above
    __getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)

__all__ = ["Capture", "ReaderOptions", "iter_events", "read_capture", "read_tables"]
