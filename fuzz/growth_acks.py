"""Growth families of issue 42's acks and sweep: inputs whose cost grew with n².

Input: a size n and a folder (fuzz.growth calls `make`).
Output: `FAMILIES`, made of plain pcap captures of one client and broker (fuzz.packets),
Pulsar frames encoded with dissector.pulsar.encoder:
- cumulative_ack (item 1, f9): n MESSAGEs to one consumer, then n cumulative ACKs of one id
  each, below every id delivered (each covers nothing): read into the timeline (pairing)
  and the findings (the consumer rules); a cumulative ACK used to compare its id with
  every pending delivery;
- sweep_consumers (item 2, f11): n consumers subscribed with permits on one connection, then
  n PINGs answered, one a second: `diagnose`; the once-a-second sweep used to visit every
  consumer;
- sweep_conns (item 2, f11): n connections opened, then n PINGs answered on the first, one a
  second: `read --table findings`; the sweep used to visit every connection.
Rule: nothing here reads the dissector; n is what the file holds (tests/test_fuzz_levels.py
counts it back with a frame decoder).
"""

from __future__ import annotations

import os
from pathlib import Path

from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from fuzz.growth_model import Family, Input
from fuzz.mutators import ETHER, Rec
from fuzz.packets import B2C, C2B, Conn, Pkt, pcap

T0 = 1_700_000_000_000_000
TOPIC = "persistent://public/default/growth"


def frame(name: str, **fields: object) -> bytes:
    return encode_frame(command(name, **fields))


def message(consumer_id: int, ledger: int, entry: int) -> bytes:
    meta = MessageMetadata(producer_name="growth", sequence_id=entry, publish_time=1)
    mid = {"ledgerId": ledger, "entryId": entry}
    return encode_frame(
        command("MESSAGE", consumer_id=consumer_id, message_id=mid), metadata=meta, payload=b"m"
    )


def subscribed(consumer_id: int) -> tuple[bytes, bytes]:
    """(client's SUBSCRIBE and FLOW, broker's SUCCESS) of a consumer."""
    rid = 1000 + consumer_id
    asked = frame(
        "SUBSCRIBE", topic=TOPIC, subscription="growth", subType=1,
        consumer_id=consumer_id, request_id=rid,
    )  # fmt: skip
    flow = frame("FLOW", consumer_id=consumer_id, messagePermits=1000)
    return asked + flow, frame("SUCCESS", request_id=rid)


class _Timed:
    """Packets with their times: `at` appends what a connection sends at a time (µs)."""

    def __init__(self) -> None:
        self.recs: list[Rec] = []

    def at(self, ts: int, pkts: list[Pkt]) -> None:
        self.recs += [Rec(ts, ETHER, p.data, len(p.data)) for p in pkts]

    def opened(self, conn: Conn, ts: int) -> None:
        self.at(ts, conn.handshake())
        self.at(ts, conn.send(C2B, frame("CONNECT", client_version="growth", protocol_version=21)))
        self.at(
            ts, conn.send(B2C, frame("CONNECTED", server_version="growth", protocol_version=21))
        )

    def pings(self, conn: Conn, n: int, start: int) -> None:
        """n PINGs answered, one a second from `start`."""
        for i in range(n):
            ts = start + i * 1_000_000
            self.at(ts, conn.send(C2B, frame("PING")))
            self.at(ts, conn.send(B2C, frame("PONG")))

    def write(self, folder: Path, name: str) -> Input:
        path = folder / f"{name}.pcap"
        path.write_bytes(pcap(self.recs))
        return Input([str(path)])


def make_cumulative_ack(n: int, folder: Path) -> Input:
    conn, out = Conn(), _Timed()
    out.opened(conn, T0)
    asked, success = subscribed(1)
    out.at(T0 + 10, conn.send(C2B, asked))
    out.at(T0 + 20, conn.send(B2C, success))
    out.at(T0 + 30, conn.send(B2C, b"".join(message(1, 5, 10 + i) for i in range(n))))
    acks = b"".join(
        frame("ACK", consumer_id=1, ack_type=1, message_id=[{"ledgerId": 5, "entryId": i % 10}])
        for i in range(n)
    )
    out.at(T0 + 40, conn.send(C2B, acks))
    out.at(T0 + 50, conn.close())
    made = out.write(folder, f"cumulative_ack{n}")
    made.tables = ["timeline", "findings"]
    return made


def make_sweep_consumers(n: int, folder: Path) -> Input:
    conn, out = Conn(), _Timed()
    out.opened(conn, T0)
    pairs = [subscribed(cid) for cid in range(1, n + 1)]
    out.at(T0 + 10, conn.send(C2B, b"".join(asked for asked, _ in pairs)))
    out.at(T0 + 20, conn.send(B2C, b"".join(success for _, success in pairs)))
    out.pings(conn, n, T0 + 1_000_000)
    made = out.write(folder, f"sweep_consumers{n}")
    made.argv = ["diagnose", "-j", "1"]
    return made


def make_sweep_conns(n: int, folder: Path) -> Input:
    out = _Timed()
    conns = [Conn(f"10.3.{k // 250}.{k % 250 + 1}", client_port=30000 + k) for k in range(n)]
    for k, conn in enumerate(conns):
        out.opened(conn, T0 + 10 * k)
    out.pings(conns[0], n, T0 + 1_000_000)
    made = out.write(folder, f"sweep_conns{n}")
    made.argv = ["read", "--table", "findings", "--format", "jsonl", "-o", os.devnull, "-j", "1"]
    return made


FAMILIES = (
    Family("cumulative_ack", "42.1", make_cumulative_ack, 8_000, "cumulative ACKs"),
    Family("sweep_consumers", "42.2", make_sweep_consumers, 10_000, "consumers and seconds"),
    Family("sweep_conns", "42.2", make_sweep_conns, 2_500, "connections and seconds"),
)
