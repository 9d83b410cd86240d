"""Growth families of the journeys (issue 42, items 6 and 7).

Input: a size n and a folder.
Output: `FAMILIES`: inputs whose cost must grow with their bytes, not with what they claim,
and whose peak memory stays bounded.
Rules: `batch_claims`: n MESSAGEs each claiming a batch of 10,000 entries in a one-entry
payload: rows and time linear in n (the claim made 10,000 rows each). `ack_claims`: n
batch-index ACKs of entries never seen, `ack_set` [1] and batch_size 10,000 (at most 63
rows each). `deliver_noack`: n messages sent, receipted and delivered, never acked, up to
beyond the joiner's MAX_HELD (and pairing's MAX_PENDING), read as a user reads them: the
CLI's streamed read to a file, in one process (`-j 1`: the measuring process is the whole
read), of the journeys table (`deliver_noack`) and of every table (`deliver_noack_all`):
peak memory under 300 MiB.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from fuzz.growth_model import Family, Input, write
from fuzz.packets import B2C, C2B, Conn, Pkt, stamp

TOPIC = "persistent://public/default/g"
CLAIM = 10_000


def _meta(seq: int, **kw: Any) -> MessageMetadata:
    return MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, **kw)


def _consumer(conn: Conn) -> list[Pkt]:
    sub = command("SUBSCRIBE", topic=TOPIC, subscription="s", subType=0, consumer_id=1,
                  request_id=1)  # fmt: skip
    return [*conn.handshake(), *conn.send(C2B, encode_frame(sub))]


def _frames(conn: Conn, frames: Iterator[tuple[int, bytes]], per: int = 64) -> list[Pkt]:
    """Frames sent `per` to a segment (same direction in a row)."""
    out: list[Pkt] = []
    run: list[bytes] = []
    last = C2B
    for direction, data in frames:
        if run and (direction != last or len(run) >= per):
            out += conn.send(last, b"".join(run), mss=60_000)
            run = []
        run.append(data)
        last = direction
    if run:
        out += conn.send(last, b"".join(run), mss=60_000)
    return out


def batch_claims(n: int) -> Iterator[tuple[int, bytes]]:
    """n MESSAGEs, each a batch claiming CLAIM entries whose payload holds one."""
    single = SingleMessageMetadata(payload_size=1).SerializeToString()
    entry = struct.pack(">I", len(single)) + single + b"x"
    for i in range(n):
        mid = {"ledgerId": 1, "entryId": i}
        cmd = command("MESSAGE", consumer_id=1, message_id=mid)
        meta = _meta(i, num_messages_in_batch=CLAIM)
        yield B2C, encode_frame(cmd, metadata=meta, payload=entry)


def ack_claims(n: int) -> Iterator[tuple[int, bytes]]:
    """n batch-index ACKs of entries never seen: ack_set [1], batch_size CLAIM."""
    for i in range(n):
        mid = {"ledgerId": 1, "entryId": i, "ack_set": [1], "batch_size": CLAIM}
        yield C2B, encode_frame(command("ACK", consumer_id=1, ack_type=0, message_id=[mid]))


def deliver_noack(n: int) -> Iterator[tuple[int, bytes]]:
    """n messages sent, receipted and delivered, never acknowledged (one connection)."""
    yield C2B, encode_frame(command("PRODUCER", topic=TOPIC, producer_id=1, request_id=2))
    yield B2C, encode_frame(command("PRODUCER_SUCCESS", request_id=2, producer_name="p"))
    for i in range(n):
        mid = {"ledgerId": 1, "entryId": i}
        yield (
            C2B,
            encode_frame(
                command("SEND", producer_id=1, sequence_id=i), metadata=_meta(i), payload=b"v"
            ),
        )
        yield (
            B2C,
            encode_frame(command("SEND_RECEIPT", producer_id=1, sequence_id=i, message_id=mid)),
        )
        yield (
            B2C,
            encode_frame(
                command("MESSAGE", consumer_id=1, message_id=mid), metadata=_meta(i), payload=b"v"
            ),
        )


def _capture(name: str, frames: Iterator[tuple[int, bytes]], folder: Path) -> Input:
    conn = Conn()
    pkts = [*_consumer(conn), *_frames(conn, frames), *conn.close()]
    return write(folder, name, stamp(pkts))


def make_batch_claims(n: int, folder: Path) -> Input:
    out = _capture("batch_claims", batch_claims(n), folder)
    out.tables = ["journeys"]
    return out


def make_ack_claims(n: int, folder: Path) -> Input:
    out = _capture("ack_claims", ack_claims(n), folder)
    out.tables = ["journeys"]
    return out


def make_deliver_noack(n: int, folder: Path) -> Input:
    out = _capture("deliver_noack", deliver_noack(n), folder)
    out.argv = ["read", "--table", "journeys", "--format", "parquet", "-j", "1", "-o",
                str(folder / "journeys.parquet")]  # fmt: skip
    return out


def make_deliver_noack_all(n: int, folder: Path) -> Input:
    out = _capture("deliver_noack", deliver_noack(n), folder)
    out.argv = ["read", "--format", "parquet", "-j", "1", "-o", str(folder / "tables")]
    return out


FAMILIES = (
    Family("batch_claims", "42.6", make_batch_claims, 2_000, "claimed batches"),
    Family("ack_claims", "42.6", make_ack_claims, 2_000, "batch acks of unseen entries"),
    Family("deliver_noack", "42.7", make_deliver_noack, 30_000, "messages", max_peak_mib=300),
    Family(
        "deliver_noack_all", "42.7", make_deliver_noack_all, 30_000, "messages", max_peak_mib=300
    ),
)
