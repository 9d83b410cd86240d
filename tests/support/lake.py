"""A table the fleet job wrote, read back as a multiset of rows to compare row for row.

Input: the job's output folder and a table name, or an Arrow table; the journeys, frames and
conversations tables of the fleet and of a local read of the same captures.
Output: the rows as sorted reprs (hive partition columns dropped from the written ones); the
fleet's journeys with the local read's connection ids and packet numbers
(`journeys_as_local`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads

from dissector.frontends.partitioned import PARTITIONS
from dissector.tables.schema import SCHEMAS


def lake_table(out: Path, name: str) -> pa.Table:
    """A written table, read back with pyarrow.dataset (hive partitions dropped)."""
    hive = pads.partitioning(PARTITIONS, flavor="hive")
    table = pads.dataset(out / name, format="parquet", partitioning=hive).to_table()
    return table.select(SCHEMAS[name].names)


def lake_rows(out: Path, name: str) -> list[str]:
    """The rows of a written table as sorted reprs: a multiset to compare row for row."""
    return sorted(map(repr, lake_table(out, name).to_pylist()))


def table_rows(table: pa.Table) -> list[str]:
    return sorted(map(repr, table.to_pylist()))


#: A connection as both numberings name it: its capture, addresses and first time.
_CONN_KEY = ("capture", "client_ip", "client_port", "broker_ip", "broker_port", "ts")
#: A journey's connection ids, and its hops' (time, packet number) columns.
_JOURNEY_CONNS = ("conn_id", "producer_conn_id", "consumer_conn_id")
_HOPS = (("send_ts", "send_packet"), ("receipt_ts", "receipt_packet"),
         ("delivered_ts", "delivered_packet"), ("acked_ts", "acked_packet"))  # fmt: skip


def _conn_ids(conversations: pa.Table) -> dict[tuple[Any, ...], int]:
    return {
        tuple(row[k] for k in _CONN_KEY): row["conn_id"]
        for row in conversations.select([*_CONN_KEY, "conn_id"]).to_pylist()
    }


def journeys_as_local(fleet: dict[str, pa.Table], local: dict[str, pa.Table]) -> list[str]:
    """The fleet's journeys rows with the connection ids and packet numbers a local read
    of the same captures gives (`fleet` and `local`: journeys, frames and conversations
    tables): connections matched by capture, addresses and first time (conversations),
    packets by the frames both read (connection, direction, stream offset). Sorted reprs,
    to compare with `table_rows(local["journeys"])`."""
    mine, theirs = _conn_ids(fleet["conversations"]), _conn_ids(local["conversations"])
    assert len(mine) == fleet["conversations"].num_rows
    conns = {mine[key]: theirs[key] for key in mine}
    cols = ["conn_id", "direction", "stream_offset", "ts", "last_packet"]
    local_frames = {
        (r["conn_id"], r["direction"], r["stream_offset"]): r["last_packet"]
        for r in local["frames"].select(cols).to_pylist()
    }
    packets: dict[tuple[Any, int], int] = {}
    for r in fleet["frames"].select(cols).to_pylist():
        at = (r["ts"], r["last_packet"])
        theirs_packet = local_frames[(conns[r["conn_id"]], r["direction"], r["stream_offset"])]
        assert packets.setdefault(at, theirs_packet) == theirs_packet  # one packet, one number
        packets[at] = theirs_packet
    rows = []
    for row in fleet["journeys"].to_pylist():
        for name in _JOURNEY_CONNS:
            if row[name] is not None:
                row[name] = conns[row[name]]
        for ts, packet in _HOPS:
            if row[packet] is not None:
                row[packet] = packets[(row[ts], row[packet])]
        rows.append(repr(row))
    return sorted(rows)
