"""Connection numbering, decided in dissector.read.numbering for every kind of read.

Expected values follow the documented rule, computed by hand: one process numbers
connections 1, 2, ... by the packet that opened them, on from group to group; a group in its
own range starts at index * 2**32 + 1 (Spark's and the fleet's executors, -j workers,
`per_series_ids`).
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from dissector import ReaderOptions, read_tables
from dissector.events import ConversationOpened
from dissector.read.inputs import no_pulsar_hint
from dissector.read.numbering import Numbering, renumber, renumbering
from dissector.read.runs import iter_series
from dissector.read.tables import ReadCounts
from tests.support.samples import PCAPS

G1 = 2**32 + 1  # the first id of group 1's own range


def test_one_process_numbers_on_from_group_to_group() -> None:
    numbering = Numbering(ReaderOptions())
    assert numbering.first(0) == 1
    numbering.ended(4)  # group 0 opened 1, 2, 3
    assert numbering.first(1) == 4


def test_workers_and_per_series_reads_number_in_each_groups_range() -> None:
    for options in (ReaderOptions(shard=(1, 2)), ReaderOptions(per_series_ids=True)):
        numbering = Numbering(options)
        numbering.ended(4)
        firsts = [numbering.first(g) for g in (0, 1, 3)]
        assert firsts == [1, G1, 3 * 2**32 + 1]


def test_workers_ids_become_those_of_one_process() -> None:
    # group 0: worker 0 opened at packets 5 and 9, worker 1 at packet 7; group 1: worker 1
    # opened at packet 3. One process: 5 -> 1, 7 -> 2, 9 -> 3, then group 1's -> 4.
    opened = [{0: [(5, 1), (9, 2)]}, {0: [(7, 1)], 1: [(3, G1)]}]
    luts = renumbering(opened)
    ids = pa.record_batch({"conn_id": pa.array([0, 1, 2], pa.int64())})
    assert renumber(ids, luts[0]).column(0).to_pylist() == [0, 1, 3]
    ids = pa.record_batch({"conn_id": pa.array([1, G1, 0], pa.int64())})
    assert renumber(ids, luts[1]).column(0).to_pylist() == [2, 4, 0]
    # per series: group 1 keeps its own range
    assert renumber(ids, renumbering(opened, per_series=True)[1]).column(0).to_pylist() == [
        2,
        G1,
        0,
    ]


def test_an_executors_series_is_numbered_as_a_local_per_series_read() -> None:
    """Spark and the fleet read series 1 alone; a local read with per_series_ids reads both:
    the same connections get the same ids, series 1's from 2**32 + 1."""
    files = [str(PCAPS / "acks.pcap"), str(PCAPS / "seek.pcap")]  # series 0 and 1, in order
    local = read_tables(files, ReaderOptions(per_series_ids=True), ["conversations"])
    ids = local["conversations"].column("conn_id").to_pylist()
    alone = [
        ev.conn_id
        for ev in iter_series(files[1:], ReaderOptions(), 1)
        if isinstance(ev, ConversationOpened)
    ]
    assert alone and alone == list(range(G1, G1 + len(alone)))
    assert sorted(i for i in ids if i >= G1) == alone
    assert sorted(i for i in ids if i < G1) == list(range(1, len(ids) - len(alone) + 1))


def test_the_hint_names_the_busiest_other_port() -> None:
    counts = ReadCounts(Counter({"frames": 0}), Counter({8080: 3, 9000: 5}))
    assert no_pulsar_hint(counts, [6651, 6650]) == (
        "no Pulsar frame found on the broker ports (6650, 6651); TCP conversations on other "
        "ports: 9000 (5), 8080 (3); if Pulsar listens there, try --port 9000"
    )
    assert no_pulsar_hint(ReadCounts(Counter({"frames": 1})), [6650]) is None
    summed = ReadCounts(other_ports=Counter({8080: 1})) + ReadCounts(
        Counter({"frames": 2}), Counter({8080: 2})
    )
    assert summed == ReadCounts(Counter({"frames": 2}), Counter({8080: 3}))
