"""EDGE: an offline read's metrics: the captures dissected with a metrics feed watching.

Input: capture paths, the read's settings, optionally other tables made beside the metrics
and a sink for their batches (`summary --format openmetrics` makes the summary's too).
Output: `metrics_of` -> the Snapshot of a whole read; `read_metrics` -> that Snapshot (its
clock: the first connection's opening to the last packet of the last one) and the read's
counts.
Rule: one process (the feed reads the lifecycle and permit facts, events that -j workers do
not hand back; the tables the metrics need, findings and journeys, are read by one worker
over every connection with -j anyway); the tables the feed needs are made beside those asked
(dissector.metrics.feed.MetricsFeed.TABLES) and handed to the feed, and to `sink` when asked;
the feed listens to the findings' engine (findings counted as they are established).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from dissector.capture.merge import Progress
from dissector.metrics.feed import MetricsFeed, metrics_feed_tables
from dissector.metrics.store import MetricStore, Snapshot
from dissector.read.options import PathLike, ReaderOptions
from dissector.read.tables import ReadCounts, stream_tables
from dissector.tables.builders import Sink


def read_metrics(
    paths: PathLike | Iterable[PathLike],
    options: ReaderOptions | None = None,
    tables: Iterable[str] = (),
    sink: Sink | None = None,
    progress: Progress | None = None,
    journeys: bool = True,
) -> tuple[Snapshot, ReadCounts]:
    """The metrics of a read of `paths` (module rule), `tables` made beside them for `sink`.
    journeys: False reads without the journeys table (no end-to-end latencies: its joiner
    reads every frame)."""
    asked = list(tables)
    made = [t for t in metrics_feed_tables(asked) if journeys or t != "journeys" or t in asked]
    store = MetricStore()
    feed = MetricsFeed(store)

    def both(name: str, batch: pa.RecordBatch) -> None:
        feed.batches(name, [batch])
        if sink is not None and name in asked:
            sink(name, batch)

    counts = stream_tables(
        paths,
        options or ReaderOptions(),
        made,
        both,
        progress,
        watch=feed.event,
        end_to_end=feed.end_to_end,
        listener=feed.established,
    )
    feed.finish()
    store.start_us = feed.first_us
    return store.snapshot(feed.last_us), counts


def metrics_of(
    paths: PathLike | Iterable[PathLike], reader_options: ReaderOptions | None = None
) -> Snapshot:
    """The metrics of a whole offline read of `paths`."""
    return read_metrics(paths, reader_options)[0]
