"""EDGE: `read -w OUT.pcap`: the packets of the chosen connections, for Wireshark.

Input: the captures and the reader options; the frames filter (topic, command, conn,
time, -Y) that chooses connections.
Output: one capture file holding every packet of the chosen connections (all their TCP
segments, handshake and pure ACKs included), in capture order, with their original
timestamps, lengths and link types; written under a hidden name and renamed when complete.
Rules:
- A connection is chosen when at least one of its frames passes the filter (every Pulsar
  connection when there is no filter).
- A packet belongs to a connection when it is in the connection's series of files (its
  `capture`), its addresses and ports are the connection's (either direction), and its
  number lies from the connection's first packet (the conversations table's numbering, the
  tables' own: captures of the same time merge as in dissector.capture.merge) to just
  before the next connection on the same endpoints: the last ACK after the FINs and late
  retransmissions belong to it. Packets are written in the read's order.
- The file is a classic pcap (what most tools read) when every packet written has one link
  type; pcapng (one interface per link type, microsecond timestamps) when they have several,
  since pcap holds one, or when OUT ends in .pcapng. Wireshark and tshark tell the two apart
  by their first bytes, whatever the name. Several link types are found while writing: the
  file is then written again as pcapng (a second pass over the captures, only then); an
  output written in place (a FIFO, a device) cannot be rewritten, so for one the link types
  are read first (a pass over the packets without dissecting them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa

from dissector.capture import series
from dissector.capture.merge import merged
from dissector.capture.pcap_writer import (
    write_enhanced,
    write_header,
    write_interface,
    write_packet,
    write_section,
)
from dissector.events import RawPacket, Segment
from dissector.net.headers import parse_packet
from dissector.read.options import ReaderOptions, as_paths
from dissector.read.plan import SPANS
from dissector.read.tables import stream_tables
from dissector.tables.columns import path_text
from dissector.tables.output import hidden_file, in_place

Endpoints = tuple[str, int, str, int]


def chosen_connections(
    paths: Iterable[str],
    options: ReaderOptions,
    keep_frames: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
) -> dict[str, dict[Endpoints, list[tuple[int, int]]]]:
    """Per capture (a series' first file): endpoints (both directions) -> packet ranges of
    the connections chosen (those with a frame `keep_frames` keeps; every one when None)."""
    conversations: list[dict[str, object]] = []
    with_frames: set[int] = set()

    def sink(name: str, batch: pa.RecordBatch) -> None:
        if name == "conversations":
            conversations.extend(
                batch.select(
                    ["conn_id", "capture", "client_ip", "client_port", "broker_ip",
                     "broker_port", "first_packet"]
                ).to_pylist()
            )  # fmt: skip
        elif keep_frames is not None:
            with_frames.update(keep_frames(batch).column("conn_id").to_pylist())

    names = ["conversations"] if keep_frames is None else ["frames", "conversations"]
    stream_tables(paths, options, names, sink, front=SPANS)  # no payload, no pairs
    # Every connection's packets run from its first packet to just before the next
    # connection on the same endpoints: the last ACK after a FIN, late retransmissions.
    spans: dict[tuple[str, Endpoints], list[tuple[int, int]]] = {}
    for c in conversations:
        conn_id = int(c["conn_id"])  # type: ignore[call-overload]
        key = (
            str(c["client_ip"]), int(c["client_port"]),  # type: ignore[call-overload]
            str(c["broker_ip"]), int(c["broker_port"]),  # type: ignore[call-overload]
        )  # fmt: skip
        first = int(c["first_packet"])  # type: ignore[call-overload]
        spans.setdefault((str(c["capture"]), key), []).append((first, conn_id))
    chosen: dict[str, dict[Endpoints, list[tuple[int, int]]]] = {}
    for (index, key), starts in spans.items():
        starts.sort()
        for k, (first, conn_id) in enumerate(starts):
            if keep_frames is not None and conn_id not in with_frames:
                continue
            last = starts[k + 1][0] - 1 if k + 1 < len(starts) else UNTIL_THE_END
            table = chosen.setdefault(index, {})
            client_ip, client_port, broker_ip, broker_port = key
            table.setdefault(key, []).append((first, last))
            table.setdefault((broker_ip, broker_port, client_ip, client_port), []).append(
                (first, last)
            )
    return chosen


UNTIL_THE_END = 1 << 62


def write_packets(
    path: str,
    paths: Iterable[str],
    options: ReaderOptions,
    chosen: dict[str, dict[Endpoints, list[tuple[int, int]]]],
) -> int:
    """Write the chosen connections' packets to `path` (see the module docstring); the
    number of packets written."""
    groups = series.group(as_paths(paths), options.series)  # once: each pass reads them
    ng = path.lower().endswith(".pcapng")
    if not ng and in_place(path):
        ng = len(_link_types(groups, options)) > 1
    try:
        with hidden_file(path) as out:
            return _write(out, groups, options, chosen, ng)
    except _SeveralLinkTypes:  # found while writing a pcap: again, as pcapng
        with hidden_file(path) as out:
            return _write(out, groups, options, chosen, True)


class _SeveralLinkTypes(Exception):
    """A pcap being written met a second link type (internal: it is written again)."""


def _link_types(groups: list[list[str]], options: ReaderOptions) -> set[int]:
    found = merged(groups, None, options.s3_endpoint, options.merge)
    return {pkt.linktype for _, _, _, pkt in found if type(pkt) is RawPacket}


def _write(
    out: object,
    groups: list[list[str]],
    options: ReaderOptions,
    chosen: dict[str, dict[Endpoints, list[tuple[int, int]]]],
    ng: bool,
) -> int:
    write = out.write  # type: ignore[attr-defined]
    linktype: int | None = None
    interfaces: dict[int, int] = {}  # pcapng: link type -> interface number
    written = 0
    if ng:
        write_section(write)
    names = [path_text(files[0]) for files in groups]  # as the capture column holds them
    for _, index, _file, pkt in merged(groups, None, options.s3_endpoint, options.merge):
        if type(pkt) is not RawPacket:
            continue  # damage that ended a file: its packets before it were written
        table = chosen.get(names[index])
        if not table:
            continue
        seg = parse_packet(pkt)
        if type(seg) is not Segment:
            continue
        spans = table.get((seg.src_ip, seg.src_port, seg.dst_ip, seg.dst_port))
        number = pkt.number  # numbered in its group, as the tables number packets
        if spans is None or not any(a <= number <= b for a, b in spans):
            continue
        ts, data = pkt.ts, pkt.data
        if ng:
            ifid = interfaces.get(pkt.linktype)
            if ifid is None:
                ifid = interfaces[pkt.linktype] = len(interfaces)
                write_interface(write, pkt.linktype)
            write_enhanced(write, ifid, ts, data, pkt.orig_len)
        else:
            if linktype is None:
                linktype = pkt.linktype
                write_header(write, linktype)
            elif pkt.linktype != linktype:
                raise _SeveralLinkTypes
            write_packet(write, ts, data, pkt.orig_len)
        written += 1
    if linktype is None and not ng:  # no packet at all: still a valid (empty) capture
        write_header(write, 1)
    return written
