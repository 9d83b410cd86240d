"""The Pulsar framing's records: frames, frame runs, anomalies, application messages.

Input: nothing. Output: `Frame`, `FrameRun`, `Anomaly` (and the `Event`, `Decoded` unions),
`AppMessage`: what the framing and the decoders hand on, one per frame or message.
Rule: NamedTuples (the hot path makes one per frame), each with its provenance (connection,
direction, stream offset, first/last packet and timestamp).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from dissector.anomalies import REGISTRY, Severity
from dissector.events.vocabulary import Checksum, Direction, MessageKind, TraceFormat


class Frame(NamedTuple):
    """One Pulsar frame, decoded as far as its bytes allow."""

    conn_id: int
    direction: Direction
    stream_offset: int  # offset of the totalSize field in this direction's byte stream
    total_size: int  # value of the totalSize field (frame length on the wire is 4 + this)
    command_size: int
    command_type: int  # BaseCommand.type as on the wire (may be unknown to our schema)
    command_name: str  # type name from the schema's enum, or UNKNOWN_<n>
    command: Any  # the decoded BaseCommand (protobuf)
    body: Any  # the sub-message named by the type (a protobuf Message); None if absent
    checksum: Checksum | None  # None for simple commands
    checksum_expected: int | None = None  # CRC32C carried by the frame
    checksum_computed: int | None = None  # CRC32C we computed (only when both are known)
    broker_entry: Any = None  # BrokerEntryMetadata (protobuf) or None
    metadata_size: int | None = None
    metadata: Any = None  # MessageMetadata (protobuf) or None
    payload: memoryview | None = None  # zero-copy view of the application payload section
    complete: bool = True  # False when bytes of the frame are missing from the capture
    first_packet: int = 0
    last_packet: int = 0
    first_ts: int = 0
    last_ts: int = 0
    raw: bytes | None = None  # the frame's bytes as on the wire: only when asked for (-x)
    topic: str | None = None  # the frame's topic: named by it, or of its producer/consumer

    @property
    def wire_size(self) -> int:
        """Bytes the frame occupies on the wire, size field included."""
        return 4 + self.total_size

    def anomaly(self, code: str, detail: str) -> Anomaly:
        """An anomaly row at this frame: its connection, direction and offset, the packet
        and time completing it."""
        return Anomaly.of(
            code,
            conn_id=self.conn_id,
            direction=self.direction,
            stream_offset=self.stream_offset,
            detail=detail,
            packet=self.last_packet,
            ts=self.last_ts,
        )


class FrameRun(NamedTuple):
    """Whole frames of one direction that the compiled scan took in a row, as columns: what
    reads of the frames and entities tables get instead of a `Frame` per frame
    (dissector.pulsar.frame_runs says which frames and why)."""

    conn_id: int
    direction: Direction
    size: int  # frames in the run
    rows: bytes  # count rows of frame_runs.NCOLS native int64 (row-major), as C scanned them
    base: int  # stream offset of the scanned buffer's first byte (row offsets are from it)
    first_packets: list[int]  # per frame, as Frame.first_packet
    last_packets: list[int]  # per frame, as Frame.last_packet
    last_ts: list[int]  # per frame, as Frame.last_ts
    topics: list[str | None] | None = None  # per frame, as Frame.topic: set by the pipeline


class Anomaly(NamedTuple):
    """A fault found in the data: reported as a row, never raised."""

    code: str
    severity: Severity
    conn_id: int
    direction: Direction | None
    stream_offset: int | None
    detail: str
    length: int = 0  # bytes concerned (skipped, truncated, ...), 0 when not applicable
    packet: int = 0
    ts: int = 0

    @classmethod
    def of(cls, code: str, **kw: Any) -> Anomaly:
        """Build an anomaly whose severity comes from the registry."""
        return cls(code=code, severity=REGISTRY[code].severity, **kw)


Event = Frame | Anomaly
#: What a frame decoder gives: events, and frame runs when it was asked for them.
Decoded = Frame | FrameRun | Anomaly


class AppMessage(NamedTuple):
    ts: int
    conn_id: int
    direction: Direction
    kind: MessageKind
    topic: str | None
    producer_id: int | None
    consumer_id: int | None
    producer_name: str | None
    sequence_id: int | None
    batch_index: int | None
    batch_size: int
    publish_time: int | None  # ms since epoch
    event_time: int | None  # ms since epoch, None when unset (0 on the wire)
    key: str | None
    key_base64: bool
    ordering_key: bytes | None
    properties: list[tuple[str, str]]
    compression: str
    compressed_size: int | None  # bytes of the (whole, joined) payload as sent
    payload_size: int | None  # bytes of this application message after decoding
    payload_sha256: str | None
    chunked: bool
    num_chunks: int | None
    encrypted: bool
    encryption_keys: list[str]
    schema_version: bytes | None
    ledger_id: int | None
    entry_id: int | None
    partition: int | None
    redelivery_count: int | None
    broker_entry_timestamp: int | None  # ms
    broker_entry_index: int | None
    null_value: bool
    null_key: bool
    compacted_out: bool
    complete: bool  # False when the payload could not be decoded (see anomalies)
    first_packet: int
    last_packet: int
    stream_offset: int
    preview: str | None
    problem: str | None = None  # why the payload was not decoded: an anomaly code
    #: trace context from its properties (dissector.pulsar.trace_context), None if none
    trace_id: str | None = None
    span_id: str | None = None
    trace_format: TraceFormat | None = None
    trace_state: str | None = None  # W3C tracestate, with a w3c trace context only
    # --values only (docs/values.md): the payload decoded by its schema, as JSON text; the
    # schema used ("AVRO v3"); why there is no value. None without --values.
    value: str | None = None
    value_schema: str | None = None
    value_error: str | None = None
