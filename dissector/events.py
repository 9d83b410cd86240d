"""Every record passed between the stages, and the closed vocabularies they use.

Input: nothing. Output: the records capture, flow, pulsar and the pipeline hand on (packets,
segments, stream bytes, frames, anomalies, messages, request/response pairs, entities,
conversations) and enums for every closed vocabulary.
Rule: records are defined here and nowhere else, so that no stage imports another just for
its types. Every event carries provenance (connection id, direction, stream offset, first/last
packet number and timestamp) so that every table row traces back to captured bytes.
Records made per packet or per frame are NamedTuples: immutable, slotted, and about ten
times cheaper to create than frozen dataclasses (the hot path makes one per frame).
Timestamps are integer microseconds since the Unix epoch; packet numbers count from 1
(0 means "not from a capture", e.g. a raw stream file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from dissector.anomalies import REGISTRY, AnomalyCode, Severity


class Direction(StrEnum):
    CLIENT_TO_BROKER = "client_to_broker"
    BROKER_TO_CLIENT = "broker_to_client"


class Checksum(StrEnum):
    """CRC32C status of a payload frame (None on simple commands)."""

    VALID = "valid"
    INVALID = "invalid"
    ABSENT = "absent"  # no magic 0x0e01: brokers' MESSAGE frames, clients before protocol v6
    UNKNOWN = "unknown"  # bytes of the frame are missing from the capture


class CloseReason(StrEnum):
    """How a connection ended."""

    FIN = "fin"
    RST = "rst"
    CAPTURE_END = "capture_end"  # still open when the capture ended
    PORT_REUSE = "port_reuse"  # a new SYN on the same ports started another connection
    EVICTED = "evicted"  # too many open connections: the least recently active was closed
    TIMEOUT = "timeout"  # no packet for longer than the idle timeout


class PreambleKind(StrEnum):
    """What a client stream starts with."""

    PULSAR = "pulsar"
    TLS = "tls"
    PROXY = "proxy"  # an HAProxy PROXY header (v1 or v2), then Pulsar
    PROXY_INVALID = "proxy_invalid"


class MessageKind(StrEnum):
    PRODUCED = "produced"  # SEND
    DELIVERED = "delivered"  # MESSAGE


class TraceFormat(StrEnum):
    """Where a message's trace context came from (dissector.pulsar.trace_context), in the
    order of precedence when a message carries several."""

    W3C = "w3c"  # traceparent (and tracestate)
    B3 = "b3"  # the b3 single header
    B3_MULTI = "b3multi"  # X-B3-TraceId, X-B3-SpanId, ...
    JAEGER = "jaeger"  # uber-trace-id
    SW8 = "sw8"  # SkyWalking


class Outcome(StrEnum):
    """How a request/response pair ended."""

    SUCCESS = "success"
    ERROR = "error"
    UNANSWERED = "unanswered"
    UNMATCHED = "unmatched"  # a response whose request is not in the capture
    REDELIVERED = "redelivered"


class EntityKind(StrEnum):
    PRODUCER = "producer"
    CONSUMER = "consumer"


class SchemaStep(StrEnum):
    """What a schema fact says (dissector.facts.schemas)."""

    DECLARED = "declared"  # a client's PRODUCER / SUBSCRIBE / GET_OR_CREATE_SCHEMA (schema or none)
    ACCEPTED = "accepted"  # the broker took the declared schema: its version, when told
    FETCHED = "fetched"  # GET_SCHEMA answered with a schema
    REFUSED = "refused"  # a schema request failed, or an entity declaring one (error_code)


class EntityState(StrEnum):
    PENDING = "pending"
    CREATED = "created"
    FAILED = "failed"
    CLOSED_BY_CLIENT = "closed_by_client"
    CLOSED_BY_BROKER = "closed_by_broker"


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


class RawPacket(NamedTuple):
    """One record of a capture file or live source, before any header is parsed.

    A NamedTuple rather than a dataclass: one is made per packet, so creation cost matters.
    """

    number: int  # 1-based packet number within its capture source
    ts: int  # microseconds since the Unix epoch
    linktype: int  # pcap LINKTYPE_* of the interface that captured it
    data: bytes  # the captured bytes (may be shorter than orig_len: snaplen)
    orig_len: int  # length of the packet on the wire
    interface: int = 0  # pcapng interface index (0 for pcap)


class Segment(NamedTuple):
    """A TCP segment with its addresses, as parsed from a RawPacket (one per packet)."""

    number: int  # packet number (provenance)
    ts: int  # microseconds since the Unix epoch
    src_ip: str  # dotted IPv4 or compressed IPv6 text
    dst_ip: str
    src_port: int
    dst_port: int
    seq: int  # sequence number of the first payload byte (or of the SYN/FIN)
    ack: int  # acknowledgement number (valid when the ACK flag is set)
    flags: int  # TCP flags byte (FIN=0x01 SYN=0x02 RST=0x04 PSH=0x08 ACK=0x10 URG=0x20)
    window: int  # window field as on the wire (unscaled)
    payload: bytes  # TCP payload bytes present in the capture
    missing: int = 0  # payload bytes cut off by the snaplen (on the wire, not captured)


# ------------------------------------------------------------ flow: packets -> segments and streams


class NetIssue(NamedTuple):
    """A packet whose headers could not be taken to a TCP segment."""

    code: str  # net.ip_fragment, net.truncated_header, net.bad_header, net.unsupported_linktype
    detail: str
    number: int  # packet number (provenance)
    ts: int  # microseconds since the Unix epoch
    src_ip: str | None = None
    dst_ip: str | None = None
    src_port: int | None = None
    dst_port: int | None = None

    def anomaly(self) -> Anomaly:
        """This issue as an anomaly row (conn_id 0: it belongs to no connection)."""
        where = ""
        if self.src_ip is not None:
            where = f" ({self.src_ip}:{self.src_port} -> {self.dst_ip}:{self.dst_port})"
        return Anomaly.of(
            self.code,
            conn_id=0,
            direction=None,
            stream_offset=None,
            detail=self.detail + where,
            packet=self.number,
            ts=self.ts,
        )


class Preamble(NamedTuple):
    kind: PreambleKind
    length: int = 0  # header bytes before the first Pulsar frame
    source: tuple[str, int] | None = None  # original client (PROXY header)
    destination: tuple[str, int] | None = None
    detail: str = ""

    def anomaly(self, conn_id: int, packet: int, ts: int) -> Anomaly:
        """A `proxy_invalid` preamble as an anomaly row (at the start of the client stream)."""
        return Anomaly.of(
            AnomalyCode.PROXY_HEADER_INVALID,
            conn_id=conn_id,
            direction=Direction.CLIENT_TO_BROKER,
            stream_offset=0,
            detail=self.detail,
            length=self.length,
            packet=packet,
            ts=ts,
        )


class FlowKey(NamedTuple):
    client_ip: str
    client_port: int
    broker_ip: str
    broker_port: int


class ConnOpened(NamedTuple):
    conn_id: int
    key: FlowKey
    ts: int
    packet: int
    syn_seen: bool  # the capture holds the connection's SYN
    guessed: bool  # neither a broker port nor a SYN told which side is the broker


class ConnClosed(NamedTuple):
    conn_id: int
    reason: CloseReason
    ts: int
    packet: int
    packets_c2b: int = 0  # packets seen per direction (retransmissions included)
    packets_b2c: int = 0
    bytes_c2b: int = 0  # TCP payload bytes on the wire per direction (retransmissions included)
    bytes_b2c: int = 0


class StreamData(NamedTuple):
    conn_id: int
    direction: Direction
    offset: int  # stream offset of data[0] (0 = first byte after the SYN or first seen)
    data: bytes
    packet: int
    ts: int


class StreamGap(NamedTuple):
    conn_id: int
    direction: Direction
    offset: int
    length: int
    packet: int
    ts: int


TcpEvent = ConnOpened | StreamData | StreamGap | ConnClosed | Anomaly


# ------------------------------------------- pulsar: frames -> messages, pairs, entities


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


class Pair(NamedTuple):
    """One timeline row: a request and its response (either may be missing)."""

    conn_id: int
    request: Frame | None
    response: Frame | None
    outcome: Outcome
    request_id: int | None
    producer_id: int | None
    consumer_id: int | None
    sequence_id: int | None
    ledger_id: int | None
    entry_id: int | None
    topic: str | None
    error_code: str | None
    error_message: str | None
    #: An ack of a message already acknowledged (unmatched, yet no fault: a cumulative ack
    #: covering individually acked messages, an ack sent twice): the packet of its first ack.
    first_ack_packet: int | None = None
    #: A SEND receipted or failed: whether it was its producer's oldest SEND waiting (the
    #: first sequence id still unanswered), and the producer's oldest SEND still waiting
    #: after it (None: none). The diagnoses' send timeout and receipt order read them.
    in_order: bool | None = None
    next_waiting: Frame | None = None


class RequestIdReused(NamedTuple):
    """A fact of dissector.facts: a request sent while an earlier one of the same
    (direction, request_id) still waits for its answer (both keep waiting). Made once per such
    request, right after its Frame; no table row of its own (the findings read it)."""

    conn_id: int
    request: Frame


class SchemaFact(NamedTuple):
    """A fact of dissector.facts: a schema declared, accepted, fetched or refused on a
    connection, per topic and version. Made only when a consumer wants them (the values'
    schema tracker), one per schema-bearing command (rare: no hot-path cost)."""

    conn_id: int
    step: SchemaStep
    command: str  # the command saying it: PRODUCER, PRODUCER_SUCCESS, GET_SCHEMA_RESPONSE, ...
    topic: str  # as the client named it (a partition's name included)
    kind: EntityKind | None  # the producer or consumer it concerns (PRODUCER, SUBSCRIBE)
    entity_id: int | None
    schema: Any  # the wire's Schema (protobuf) declared or fetched; None: none
    version: bytes | None  # the version the broker told (or the one GET_SCHEMA asked for)
    error_code: str | None  # REFUSED: the broker's code (IncompatibleSchema, TopicNotFound)
    error_message: str | None
    frame: Frame  # the frame that says it


class Delivered:
    """A fact of dissector.facts: one message delivered to a consumer and not acknowledged
    yet, as its first delivery made it (a redelivery keeps its place, time and number):
    `frame` is its latest MESSAGE as it waits (`facts.acks.held`), `waiting` whether a
    completion fact still waits for it (False once a REDELIVER_UNACKNOWLEDGED_MESSAGES asked
    for it again: still unacknowledged, its pair made)."""

    __slots__ = ("first_packet", "first_ts", "frame", "number", "waiting")

    def __init__(self, frame: Frame, number: int) -> None:
        self.frame = frame
        self.first_ts, self.first_packet = frame.last_ts, frame.last_packet
        self.number = number  # first deliveries of its consumer are numbered in order
        self.waiting = True


class Acked(NamedTuple):
    """A fact of dissector.facts, made once per ACK right after its Frame and Pairs (no table
    row of its own; the findings read it): what the ACK did to its consumer's
    unacknowledged deliveries (`Delivered`)."""

    conn_id: int
    ack: Frame
    consumer_id: int
    #: the consumer's oldest unacknowledged delivery before the ACK, and after it
    oldest: Delivered | None
    left: Delivered | None
    #: the deliveries it acknowledged: (ledger, entry), record
    done: tuple[tuple[tuple[int, int], Delivered], ...]
    #: with a validation_error: the unacknowledged deliveries of the ids it names, in order
    discarded: tuple[Delivered, ...] = ()
    #: a cumulative ACK: the highest id it acknowledges everything up to (a batch it names in
    #: part, an ack_set with bits still set: the entry before it); None: individual
    upto: tuple[int, int] | None = None


class Permits(NamedTuple):
    """A fact of dissector.facts (no table row of its own; the findings read it), made right
    after its Frame: a consumer's FLOW permits after a FLOW, or after a MESSAGE that left it
    none (or delivered its largest batch yet): what the flow rules read, with no permit
    count of their own (dissector.facts.permits)."""

    conn_id: int
    frame: Frame  # the FLOW or MESSAGE
    consumer_id: int
    #: FLOWs its consumer sent so far, this one included (0: a consumer not created on this
    #: connection, its permits unknown)
    flows: int
    #: permits left: its FLOWs' messagePermits minus the entries delivered to it
    left: int
    #: the largest batch delivered to it so far (1 before any)
    max_batch: int


class Delivering(NamedTuple):
    """A fact of dissector.facts, made right after a MESSAGE's Frame and Pairs when the
    journeys read deliveries (`ConversationState(consumed=True)`; no table row of its own):
    the message delivered and to which consumer, as the protocol means it
    (dissector.facts.consumed)."""

    conn_id: int
    consumer_id: int
    #: its consumer as the connection's SUBSCRIBE made it (topic, subscription, sub_type,
    #: name); None: the capture missed that SUBSCRIBE
    consumer: Entity | None
    ledger: int
    entry: int
    partition: int
    #: the batch indexes it delivers, as its ack_set's words (set bits delivered:
    #: dissector.facts.consumed.has); (): every entry of it
    ack_set: tuple[int, ...]
    redelivery_count: int


class AckedId(NamedTuple):
    """One message id an ACK names, as the protocol means it (`AckedIds`)."""

    ledger: int
    entry: int
    partition: int
    #: a chunked message's: its first chunk's (ledger, entry) (the id names its last
    #: chunk's); None: not said
    first_chunk: tuple[int, int] | None
    #: a batch-index ack: its ack_set's words (clear bits acknowledged, set bits left:
    #: dissector.facts.consumed.has); (): the whole entry
    ack_set: tuple[int, ...]
    #: its batch's size as the ack says it, at most facts.batches.MAX_BATCH; None: not said
    batch_size: int | None


class AckedIds(NamedTuple):
    """A fact of dissector.facts, made right after an ACK's Frame, Pairs and `Acked` fact
    when the journeys read deliveries (no table row of its own): the message ids it
    acknowledges and whose consumer, as the protocol means them (dissector.facts.consumed)."""

    conn_id: int
    consumer_id: int
    #: as in `Delivering`
    consumer: Entity | None
    #: ack_type Cumulative: every message of its subscription before each id is acknowledged
    cumulative: bool
    ids: tuple[AckedId, ...]


@dataclass(slots=True)
class Entity:
    """A producer or consumer of the connection."""

    kind: EntityKind
    entity_id: int
    topic: str | None
    created_ts: int
    name: str | None = None
    subscription: str | None = None
    sub_type: str | None = None
    access_mode: str | None = None
    state: EntityState = EntityState.PENDING
    closed_ts: int | None = None
    permits: int = 0  # consumers: FLOW permits granted
    delivered: int = 0  # consumers: messages delivered (batch entries counted)
    sent: int = 0  # producers: messages sent (batch entries counted)
    # consumers, counted with facts only (dissector.facts.permits): FLOWs sent, permits
    # used (entries delivered, an ack_set applied), the largest batch delivered (1 before)
    flows: int = 0
    used: int = 0
    max_batch: int = 1


@dataclass(slots=True)
class ConnectionInfo:
    """What the connection said about itself (for the conversations table): its handshake
    (CONNECT, CONNECTED: versions, features), its producers and consumers, and how many auth
    exchanges and keep-alives it made (facts the diagnoses may read)."""

    client_version: str | None = None
    server_version: str | None = None
    client_protocol: int | None = None
    server_protocol: int | None = None
    auth_method: str | None = None
    proxy_to_broker_url: str | None = None
    original_principal: str | None = None
    max_message_size: int | None = None
    feature_flags: list[str] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)
    # auth exchanges and keep-alives, counted (their pairs, when made, are timeline rows)
    auth_challenges: int = 0  # the broker's AUTH_CHALLENGE
    auth_responses: int = 0  # the client's AUTH_RESPONSE
    pings: int = 0  # PING, either side
    pongs: int = 0  # PONG, either side

    def supports(self, feature: str) -> bool:
        """Whether the client's CONNECT declared `feature` ("supports_auth_refresh")."""
        return feature in self.feature_flags


# ------------------------------------------------------------ the pipeline's own: conversations


class ConversationOpened(NamedTuple):
    conn_id: int
    key: FlowKey
    ts: int
    packet: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectionStats:
    packets: int  # packets seen (retransmissions included)
    wire_bytes: int  # TCP payload bytes on the wire (retransmissions included)
    stream_bytes: int  # length of the reassembled stream
    preamble_bytes: int  # PROXY protocol header
    frames: int
    frame_bytes: int
    skipped_bytes: int  # seen but not part of any frame (resync)
    gap_bytes: int  # missing from the capture


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsInfo:
    """What a TLS conversation's handshake showed (None where it did not show it)."""

    version: str | None = None  # negotiated: "TLS 1.3", "TLS 1.2", ...
    cipher: str | None = None  # IANA cipher suite name
    sni: str | None = None  # server_name the client asked for
    alpn: str | None = None  # negotiated ALPN protocol, else the client's offer (a,b)
    cert_subject: str | None = None  # server certificate (RFC 4514)
    cert_issuer: str | None = None
    cert_not_after: int | None = None  # µs since the epoch, UTC
    decrypted: bool = False  # application data was decrypted with a key log


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversation:
    """One TCP connection that carried Pulsar (or TLS on a Pulsar port), when it ended."""

    conn_id: int
    key: FlowKey
    start_ts: int
    end_ts: int
    first_packet: int
    last_packet: int
    ended: CloseReason
    syn_seen: bool
    encrypted: bool
    proxied_client: tuple[str, int] | None  # original client from a PROXY header
    c2b: DirectionStats
    b2c: DirectionStats
    info: ConnectionInfo  # handshake and entities
    anomalies: int  # anomaly rows of this connection
    tls: TlsInfo | None = None  # TLS conversations: what the handshake showed

    @property
    def summary(self) -> ConnectionInfo:
        """`info` by its former name (kept for scripts written before it was renamed)."""
        return self.info


PipelineEvent = (
    ConversationOpened
    | Frame
    | FrameRun
    | Anomaly
    | Conversation
    | AppMessage
    | Pair
    | RequestIdReused
    | Acked
    | Permits
    | Delivering
    | AckedIds
)


# ------------------------------------------------------------ diagnoses: frames -> findings


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """A diagnosis made from many frames (dissector.diagnose): one `findings` table row.

    Not made per frame: only when the findings table is asked for, a few per connection."""

    code: str  # a dissector.findings code
    severity: Severity
    ts: int  # when it was established (the threshold passed, or the proof arrived)
    first_ts: int  # first frame of the evidence
    last_ts: int  # last frame of the evidence
    conn_id: int  # the connection (of the last evidence when it spans several)
    key: FlowKey | None  # that connection's endpoints (for its Community ID)
    topic: str | None
    entity: str | None  # "producer 1 (name)", "consumer 3 (sub orders)", ...
    summary: str  # one sentence with the numbers
    hint: str  # what usually causes it, what to check
    count: int  # how many times it happened (frames, messages, requests...)
    value: float | None  # the measured quantity (seconds, permits, redeliveries...)
    unit: str | None  # of value: "s", "permits", "messages", "bytes", ...
    evidence: tuple[int, ...]  # packet numbers that prove it (first ones and the last)


# ------------------------------------------------------------ journeys: frames -> joined messages


class Journey(NamedTuple):
    """One message's way from its producer to one subscription (dissector.journeys): one
    `journeys` table row, or the message's only row when no delivery of it was seen.

    Made only when the journeys table is asked for, at the capture's end (or when the
    joiner's bound pushes the message out): one per message and subscription, so a
    NamedTuple, as the per-frame records. Times in µs, packet numbers from 1; None where the
    capture did not show that hop."""

    ts: int  # the first hop seen: send, receipt, delivery or ack
    conn_id: int  # the producer's connection, else the consumer's
    topic: str | None
    ledger_id: int | None
    entry_id: int | None
    partition: int  # -1: not partitioned
    batch_index: int | None  # None: not batched
    batch_size: int | None
    chunks: int | None  # chunked: its chunks
    producer_name: str | None
    sequence_id: int | None
    publish_time: int | None  # ms since the epoch (the producer's clock)
    producer_conn_id: int | None
    producer_id: int | None
    send_ts: int | None
    send_packet: int | None
    receipt_ts: int | None
    receipt_packet: int | None
    error: str | None  # SEND_ERROR's ServerError
    subscription: str | None
    sub_type: str | None
    consumer_conn_id: int | None
    consumer_id: int | None
    consumer_name: str | None
    delivered_ts: int | None
    delivered_packet: int | None
    acked_ts: int | None
    acked_packet: int | None
    deliveries: int
    redeliveries: int
    broker_entry_ts: int | None  # ms since the epoch (the broker's clock)
    trace_id: str | None = None
    span_id: str | None = None
    trace_format: TraceFormat | None = None
    evicted: bool = False  # made before the capture's end: the joiner's bound pushed it out
    value: str | None = None  # --values only: the message's AppMessage.value
    value_schema: str | None = None
    value_error: str | None = None
