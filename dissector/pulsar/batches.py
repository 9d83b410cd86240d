"""Batch splitting: the messages of one batched Pulsar payload.

Input: a (decompressed) batch payload and its MessageMetadata's num_messages_in_batch.
Output: the batch's entries (index, SingleMessageMetadata, payload) and problems as
(anomaly code, detail) pairs.
Rule: a batch is a run of [u32 size][SingleMessageMetadata][payload]; entries that do not
add up (to the count or to the data) are reported, the good ones still returned.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from dissector.anomalies import AnomalyCode
from dissector.pulsar.decompression import Payload, Problem
from dissector.pulsar.sections import parse
from dissector.pulsar.wire import SingleMessageMetadata

_U32 = struct.Struct(">I")


class BatchEntry(NamedTuple):
    position: int  # batch index
    meta: Any  # SingleMessageMetadata
    payload: Payload  # a view when the batch is one


def split_batch(data: Payload, count: int) -> tuple[list[BatchEntry], list[Problem]]:
    """Entries of a batch payload; problems when they do not add up to `count` and the data."""
    entries: list[BatchEntry] = []
    problems: list[Problem] = []
    pos, n = 0, len(data)
    while pos < n and len(entries) < count:
        if n - pos < 4:
            problems.append(
                (
                    AnomalyCode.PAYLOAD_BATCH_INVALID,
                    f"{n - pos} stray bytes after entry {len(entries)}",
                )
            )
            return entries, problems
        size = _U32.unpack_from(data, pos)[0]
        if pos + 4 + size > n:
            detail = (
                f"entry {len(entries)}: metadata size {size} beyond the batch ({n - pos - 4} left)"
            )
            problems.append((AnomalyCode.PAYLOAD_BATCH_INVALID, detail))
            return entries, problems
        try:
            meta = parse(SingleMessageMetadata, memoryview(data)[pos + 4 : pos + 4 + size])
        except Exception as exc:  # protobuf DecodeError
            problems.append((AnomalyCode.PAYLOAD_BATCH_INVALID, f"entry {len(entries)}: {exc}"))
            return entries, problems
        start = pos + 4 + size
        end = start + meta.payload_size
        if meta.payload_size < 0 or end > n:
            detail = f"entry {len(entries)}: payload_size {meta.payload_size} beyond the batch"
            problems.append((AnomalyCode.PAYLOAD_BATCH_INVALID, detail))
            return entries, problems
        entries.append(BatchEntry(len(entries), meta, data[start:end]))
        pos = end
    if len(entries) < count:
        problems.append(
            (
                AnomalyCode.PAYLOAD_BATCH_INVALID,
                f"{len(entries)} entries, num_messages_in_batch {count}",
            )
        )
    elif pos < n:
        problems.append(
            (
                AnomalyCode.PAYLOAD_BATCH_INVALID,
                f"{n - pos} bytes after the last of {count} entries",
            )
        )
    return entries, problems
