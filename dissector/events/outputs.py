"""The records made once per connection, diagnosis or message: conversations, findings,
journeys.

Input: nothing. Output: `ConversationOpened`, `DirectionStats`, `TlsInfo`, `Conversation`
(the pipeline's own), `Finding` (dissector.diagnose), `Journey` (dissector.journeys).
Rule: not made per frame (a few per connection, one per message and subscription).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from dissector.anomalies import Severity
from dissector.events.facts import ConnectionInfo
from dissector.events.packets import FlowKey
from dissector.events.vocabulary import CloseReason, Direction, TraceFormat


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
    #: who ended it: the side whose FIN or RST came first (None: neither seen), that packet
    #: and its time (µs; 0 when None)
    closed_by: Direction | None = None
    close_packet: int = 0
    close_ts: int = 0

    @property
    def summary(self) -> ConnectionInfo:
        """`info` by its former name (kept for scripts written before it was renamed)."""
        return self.info


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
