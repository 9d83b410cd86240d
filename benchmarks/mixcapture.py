"""The "mix" benchmark capture: batches, LZ4 and ZSTD payloads, chunked messages, consumers.

Input: a path and a scale (1.0: 6 connections x 4,000 rounds, about 100,000 packets).
Output: a classic pcap and its CaptureInfo (packets, frames, messages, commands written).
Rule: each connection is a client that produces to its topic and consumes it back. Per
round the client sends a SEND (a batch of 2-16 messages in SingleMessageMetadata entries, or
a single message), compressed NONE / LZ4 / ZSTD in turn, with the ACK of the previous
delivery and a FLOW now and then; the broker answers with its SEND_RECEIPT and delivers the
same payload as a MESSAGE. Every 40th round is a chunked message (3 chunks, ZSTD over the
whole message). Both directions are byte streams cut into 1448-byte segments, so small
frames share packets and large ones span them. Messages count application messages (a
batch's entries, a chunked message once), produced plus delivered.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import cramjam

from benchmarks.captures import CaptureInfo, close_session, finish_capture, open_session
from benchmarks.synthetic import Conn, PcapWriter
from benchmarks.traffic import Session
from dissector.pulsar.wire import COMPRESSION_TYPES, KeyValue, SingleMessageMetadata

MIX_ROUNDS = 4_000  # per connection at scale 1.0
CHUNK_EVERY = 40  # rounds between chunked messages
CHUNKED_SIZE = 64_000  # bytes of a chunked message before compression (hex text)
CHUNKS = 3
FLOW_EVERY = 50  # rounds between FLOW permits

_CODECS = ("NONE", "LZ4", "ZSTD", "LZ4", "ZSTD")


def _lz4(data: bytes) -> bytes:
    return bytes(cramjam.lz4.compress_block(data, store_size=False))  # the block, no size


def _zstd(data: bytes) -> bytes:
    return bytes(cramjam.zstd.compress(data))


_COMPRESS: dict[str, Callable[[bytes], bytes]] = {"NONE": bytes, "LZ4": _lz4, "ZSTD": _zstd}


def _text(rng: random.Random, n: int) -> bytes:
    """A compressible JSON-like application payload."""
    fields = ",".join(f'"f{j}":{rng.randrange(1000)}' for j in range(rng.randrange(4, 30)))
    return f'{{"id":{n},"user":"user-{n % 977}",{fields}}}'.encode()


def _batch(rng: random.Random, first: int, count: int) -> bytes:
    """`count` messages as a batch payload: [u32 size][SingleMessageMetadata][payload]..."""
    parts = []
    for n in range(first, first + count):
        payload = _text(rng, n)
        single = SingleMessageMetadata(
            payload_size=len(payload),
            partition_key=f"key-{n % 50}",
            sequence_id=n,
            properties=[KeyValue(key="origin", value="bench")],
        ).SerializeToString()
        parts += [len(single).to_bytes(4, "big"), single, payload]
    return b"".join(parts)


class _Client:
    """One connection's two byte streams and its counters."""

    def __init__(self, index: int, commands: Counter[str]) -> None:
        self.conn = Conn(index)
        self.s = Session(index, commands)
        self.to_broker: list[bytes] = []
        self.to_client: list[bytes] = []
        self.seq = 0  # producer sequence id: one per SEND (a chunked message keeps one)
        self.entry = 0  # broker entry id: one per SEND frame stored
        self.messages = 0

    def publish(self, payload: bytes, count: int | None, codec: str) -> None:
        """One SEND of `payload` (a batch of `count` or a single message), its receipt and
        its delivery."""
        meta = self.s.meta
        for name in ("num_messages_in_batch", "uuid", "num_chunks_from_msg", "chunk_id"):
            meta.ClearField(name)
        meta.ClearField("total_chunk_msg_size")
        meta.compression = COMPRESSION_TYPES[codec]  # type: ignore[assignment]  # an int
        meta.uncompressed_size = len(payload)
        if count is not None:
            meta.num_messages_in_batch = count
        self._entry(_COMPRESS[codec](payload), count or 1)
        self.messages += 2 * (count or 1)
        self.seq += 1

    def publish_chunked(self, payload: bytes) -> None:
        """A ZSTD message cut into CHUNKS SEND frames of one sequence id."""
        meta = self.s.meta
        meta.ClearField("num_messages_in_batch")
        meta.compression = COMPRESSION_TYPES["ZSTD"]  # type: ignore[assignment]  # an int
        meta.uncompressed_size = len(payload)
        data = _COMPRESS["ZSTD"](payload)
        meta.uuid = f"bench-{self.conn.cport}-{self.seq}"
        meta.num_chunks_from_msg = CHUNKS
        meta.total_chunk_msg_size = len(data)
        step = -(-len(data) // CHUNKS)
        for chunk_id in range(CHUNKS):
            meta.chunk_id = chunk_id
            self._entry(data[chunk_id * step : (chunk_id + 1) * step], 1)
        self.messages += 2
        self.seq += 1

    def _entry(self, data: bytes, count: int) -> None:
        self.to_broker.append(self.s.send(self.seq, data, count))
        self.to_client.append(self.s.receipt(self.seq, self.entry))
        self.to_client.append(self.s.message(self.entry, data))
        self.to_broker.append(self.s.ack(self.entry))
        self.entry += 1

    def flush(self, w: PcapWriter) -> None:
        for to_broker, pending in ((True, self.to_broker), (False, self.to_client)):
            if pending:
                w.send(self.conn, to_broker, b"".join(pending))
                pending.clear()


def mix(path: Path, scale: float = 1.0, connections: int = 6) -> CaptureInfo:
    rounds = max(CHUNK_EVERY, round(MIX_ROUNDS * scale))
    info = CaptureInfo(
        "mix",
        str(path),
        f"{connections} connections each producing and consuming {rounds:,} SENDs: batches of "
        "2-16 messages or single messages, NONE/LZ4/ZSTD, a 3-chunk ZSTD message every "
        f"{CHUNK_EVERY} rounds; MESSAGE deliveries, ACKs, FLOWs; 1448-byte segments",
        connections,
    )
    commands: Counter[str] = Counter()
    rng = random.Random(3)
    w = PcapWriter(path)
    clients = [_Client(i, commands) for i in range(connections)]
    for c in clients:
        open_session(w, c.conn, c.s)
        request, response = c.s.subscribe()
        w.packet(c.conn, True, request)
        w.packet(c.conn, False, response)
    first = 0
    for r in range(rounds):
        for c in clients:
            if r % FLOW_EVERY == 0:
                c.to_broker.append(c.s.make("FLOW", consumer_id=c.s.index, messagePermits=1000))
            if r % CHUNK_EVERY == CHUNK_EVERY - 1:
                c.publish_chunked(rng.randbytes(CHUNKED_SIZE // 2).hex().encode())
            elif r % 4 == 3:
                c.publish(_text(rng, first), None, _CODECS[r % len(_CODECS)])
                first += 1
            else:
                count = rng.randrange(2, 17)
                c.publish(_batch(rng, first, count), count, _CODECS[r % len(_CODECS)])
                first += count
            c.flush(w)
    for c in clients:
        close_session(w, c.conn, c.s)
    info.messages = sum(c.messages for c in clients)
    return finish_capture(info, w, commands)
