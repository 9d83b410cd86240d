"""Event records passed between the sans-IO stages.

Input: nothing. Output: frozen, slotted, keyword-only dataclasses.
Rule: every event carries provenance (connection id, direction, stream offset, first/last
packet number and timestamp) so that every table row traces back to captured bytes.
Records made per packet or per frame are NamedTuples: immutable, slotted, and about ten
times cheaper to create than frozen dataclasses (the hot path makes one per frame).
Timestamps are integer microseconds since the Unix epoch; packet numbers count from 1
(0 means "not from a capture", e.g. a raw stream file).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple

from dissector.anomalies import REGISTRY, Severity


class Direction(StrEnum):
    CLIENT_TO_BROKER = "client_to_broker"
    BROKER_TO_CLIENT = "broker_to_client"


class Checksum(StrEnum):
    """CRC32C status of a payload frame (None on simple commands)."""

    VALID = "valid"
    INVALID = "invalid"
    ABSENT = "absent"  # no magic 0x0e01: brokers' MESSAGE frames, clients before protocol v6
    UNKNOWN = "unknown"  # bytes of the frame are missing from the capture


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
    topic: str | None = None  # the frame's topic: named by it, or of its producer/consumer

    @property
    def wire_size(self) -> int:
        """Bytes the frame occupies on the wire, size field included."""
        return 4 + self.total_size


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
