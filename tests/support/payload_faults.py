"""Crafted captures holding each payload fault, with the anomaly codes the fault must give.

Input: a folder to write captures in.
Output: `crafted(folder)`: name -> (capture, the codes its fault must produce, any one of
them); `ERRORS`, the codes of a lying `uncompressed_size` (smaller or larger, every codec).
Rule: the faults are put in by hand (a size that lies, a decompression bomb, an invalid
batch, a missing chunk): what was put in is the independent expectation.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cramjam

from dissector.pulsar.wire import MessageMetadata
from tests.support.crafted import C2B, Msg, Session, baseline_msgs, msg, write_pcap

REAL = bytes(range(256)) * 4 + b"pulsar" * 50  # 1324 bytes that compress

LZ4, ZLIB, ZSTD, SNAPPY = 1, 2, 3, 4
COMPRESS: dict[int, Callable[[bytes], bytes]] = {
    LZ4: lambda b: bytes(cramjam.lz4.compress_block(b, store_size=False)),
    ZLIB: zlib.compress,
    ZSTD: lambda b: bytes(cramjam.zstd.compress(b)),
    SNAPPY: lambda b: bytes(cramjam.snappy.compress_raw(b)),
}
ERRORS = {"payload.size_mismatch", "payload.decompression_failed", "payload.decompression_bomb"}


def send(payload: bytes, seq: int = 0, **meta: Any) -> Msg:
    metadata = MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, **meta)
    return msg(C2B, "SEND", producer_id=1, sequence_id=seq, payload=payload, metadata=metadata)


def crafted(tmp: Path) -> dict[str, tuple[Path, set[str]]]:
    """name -> (capture, the anomaly codes its faults must produce, any one of them)."""
    cases: dict[str, tuple[list[Msg], set[str]]] = {}
    for codec, compress in COMPRESS.items():
        for lie, delta in (("smaller", -100), ("larger", 100)):
            size = len(REAL) + delta
            lying = send(compress(REAL), compression=codec, uncompressed_size=size)
            cases[f"codec{codec}_{lie}"] = ([lying], ERRORS)
    bomb = send(zlib.compress(bytes(1000)), compression=ZLIB, uncompressed_size=1 << 30)
    cases["bomb"] = ([bomb], {"payload.decompression_bomb"})
    batch = send(b"\x00\x00\x00\x05garbage-not-a-batch", num_messages_in_batch=3)
    cases["invalid_batch"] = ([batch], {"payload.batch_invalid"})
    chunk = {"uuid": "u-1", "num_chunks_from_msg": 3, "total_chunk_msg_size": 300}
    chunks = [send(bytes(100), seq=0, chunk_id=i, **chunk) for i in (0, 2)]
    cases["missing_chunk"] = (chunks, {"payload.chunk_missing"})
    out: dict[str, tuple[Path, set[str]]] = {}
    for name, (faulty, codes) in cases.items():
        s = Session()
        s.handshake()
        s.exchange(baseline_msgs()[:4] + faulty)
        s.close()
        out[name] = (write_pcap(tmp / f"{name}.pcap", s.segs).path, codes)
    return out
