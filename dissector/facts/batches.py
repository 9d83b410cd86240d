"""A batch's messages as the protocol counts them: the claim, bounded by the bytes.

Input: a SEND's or MESSAGE's frame and its MessageMetadata (`claimed`, `plain_bound`), or
a batch-index ack's `batch_size` (`bounded`).
Output: the messages a batched entry stands for (`claimed`: num_messages_in_batch, at most
MAX_BATCH; None when the entry is not a batch), the plain bytes its payload may stand for
(`plain_bound`) and the entries those bytes can carry (`carried`).
Rules (the one rule of a batch's count, issue 38; docs/journeys.md rule 5):
- The broker never opens a batch: it counts its messages and gives them batch indexes
  0 .. n-1 from the metadata's num_messages_in_batch (the spec: "the number of messages in
  the batch"), and a consumer acknowledges them by those indexes (an ack_set of n bits). So
  the messages of a batch, as the journeys count them (one per batch index that may be
  delivered and acknowledged), are the claim, never more than MAX_BATCH.
- What a payload really holds is the messages extractor's to say (the messages table: one
  row per entry split out of it, with a `payload.batch_invalid` anomaly when the entries do
  not add up to the claim). Where it split entries, the journeys take those; where it split
  none (encrypted, an undecodable codec, bytes that are not a batch), the claim stands,
  bounded by the bytes that could carry it: one entry per MIN_ENTRY plain bytes, the plain
  size being the payload's, or for a compressed payload its `uncompressed_size` up to
  MAX_RATIO times its size.
"""

from __future__ import annotations

from typing import Any

from dissector.events import Frame

__all__ = ["MAX_BATCH", "MAX_RATIO", "MIN_ENTRY", "bounded", "carried", "claimed", "plain_bound"]

#: Messages one batch may stand for: clients batch 1,000 messages at most by default
#: (batchingMaxMessages); a batch claiming more (a damaged or hostile count) stands for this
#: many at most, and never more than its bytes can carry (`carried`).
MAX_BATCH = 10_000
#: Bytes of the smallest batch entry: its 4-byte metadata size, then a SingleMessageMetadata
#: holding only its required `payload_size` (a tag byte and a one-byte varint), and an
#: empty payload (the binary protocol's batch format, proto/pulsar_api.proto).
MIN_ENTRY = 6
#: Plain bytes a compressed payload the dissector could not decode is taken to stand for,
#: per compressed byte, at most (its claimed `uncompressed_size` when smaller): batches of
#: like messages compress well, a claim of more is not backed by bytes.
MAX_RATIO = 16


def bounded(count: int) -> int:
    """A claimed count of batch messages, at most MAX_BATCH."""
    return min(count, MAX_BATCH)


def claimed(meta: Any) -> int | None:
    """Messages of a batch (at most MAX_BATCH), None when the entry is not a batch (or
    claims no message: it is one message still, as the messages extractor's row says)."""
    if meta is None or not meta.HasField("num_messages_in_batch"):
        return None
    count: int = meta.num_messages_in_batch
    return None if count < 1 else bounded(count)


def plain_bound(frame: Frame, meta: Any) -> int:
    """Plain bytes the frame's payload may stand for (module rule); the frame's size past its
    command and metadata when it carries no payload view (a recorded frame)."""
    if frame.payload is not None:
        size = len(frame.payload)
    else:
        size = max(0, frame.total_size - frame.command_size - (frame.metadata_size or 0))
    if meta is None or meta.compression == 0:
        return size
    claim = meta.uncompressed_size if meta.HasField("uncompressed_size") else size
    return min(claim, size * MAX_RATIO)


def carried(count: int, plain: int) -> int:
    """Entries of a batch claiming `count` whose payload was not split: the claim, as many
    as `plain` bytes can carry (module rule)."""
    return min(bounded(count), plain // MIN_ENTRY)
