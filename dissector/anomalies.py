"""Registry of anomaly codes: every protocol or capture fault the dissector can report.

Input: nothing. Output: `REGISTRY`, mapping a stable dotted code to its severity and summary.
Rule: codes are stable public identifiers (users filter on them); add new ones, never rename.
Every anomaly event must use a code from this table (checked at creation).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class AnomalyKind:
    code: str
    severity: Severity
    summary: str


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

_TABLE: tuple[tuple[str, Severity, str], ...] = (
    # Framing: sizes and layout of one frame.
    ("pulsar.frame_too_large", _E, "totalSize exceeds the maximum frame size"),
    ("pulsar.frame_too_small", _E, "totalSize too small to hold commandSize and a command"),
    ("pulsar.command_size_invalid", _E, "commandSize is zero or larger than the frame"),
    ("pulsar.command_undecodable", _E, "the BaseCommand protobuf does not decode"),
    ("pulsar.unknown_command_type", _W, "BaseCommand.type is not a known command type"),
    ("pulsar.command_missing_body", _E, "the sub-message named by BaseCommand.type is absent"),
    ("pulsar.invalid_utf8", _W, "a string field is not UTF-8: replaced with U+FFFD, bytes named"),
    ("pulsar.trailing_bytes", _W, "bytes after the command of a simple (payload-free) command"),
    ("pulsar.payload_missing", _E, "a payload command (SEND, MESSAGE) has no metadata section"),
    ("pulsar.bad_magic", _E, "neither magic 0x0e01 nor a plausible metadataSize after the command"),
    ("pulsar.bad_checksum", _E, "CRC32C of metadataSize+metadata+payload differs from the frame"),
    ("pulsar.metadata_size_invalid", _E, "metadataSize is larger than the rest of the frame"),
    ("pulsar.metadata_undecodable", _E, "the MessageMetadata protobuf does not decode"),
    (
        "pulsar.broker_entry_metadata_invalid",
        _E,
        "broker entry metadata (0x0e02) size is inconsistent or it does not decode",
    ),
    # Stream: what happens between frames.
    ("pulsar.skipped_bytes", _W, "bytes that are not part of any frame were skipped to resync"),
    ("pulsar.truncated_frame", _W, "the stream ended or lost bytes in the middle of a frame"),
    ("pulsar.encrypted", _I, "TLS conversation: reported, not decoded"),
    ("proxy.header_invalid", _W, "a PROXY protocol header that does not parse"),
    # TLS (conversations on a TLS port or opening with a ClientHello).
    ("tls.alert", _W, "a TLS alert other than close_notify (in clear, or decrypted)"),
    (
        "tls.handshake_failure",
        _E,
        "the TLS handshake failed: fatal alert or end before it completed",
    ),
    ("tls.no_key", _W, "TLS records of a session without a key in the key log: not decrypted"),
    (
        "tls.waiting_dropped",
        _W,
        "TLS records waiting for a key not kept: all sessions together waited too many bytes",
    ),
    (
        "tls.decrypt_failed",
        _E,
        "a TLS record does not decrypt with its session's key (wrong key, corrupted)",
    ),
    ("tls.unsupported_cipher", _W, "a TLS cipher suite this dissector cannot decrypt"),
    (
        "tls.skipped_bytes",
        _W,
        "TCP bytes that are not part of any TLS record were skipped to resync",
    ),
    ("tls.truncated_record", _W, "the stream ended in the middle of a TLS record"),
    ("tls.certificate_undecodable", _W, "the server certificate does not parse as X.509"),
    # Payloads: decompression, batches, chunks.
    ("payload.decompression_failed", _E, "the payload does not decompress with its codec"),
    ("payload.size_mismatch", _E, "decompressed size differs from uncompressed_size"),
    ("payload.decompression_bomb", _E, "claimed or produced size above the bound: not expanded"),
    ("payload.batch_invalid", _E, "batch entries do not add up to the payload or their count"),
    ("payload.chunk_missing", _W, "a chunked message lacks chunks (not all were captured)"),
    ("payload.chunk_duplicate", _W, "a chunk of a chunked message arrived twice"),
    ("payload.chunk_size_mismatch", _E, "chunk sizes disagree with total_chunk_msg_size"),
    (
        "payload.chunk_count_invalid",
        _E,
        "num_chunks_from_msg or chunk_id out of range (wrapped negative, too many, id >= count)",
    ),
    ("payload.encrypted", _I, "an encrypted message: reported, payload not decoded"),
    # TCP reassembly.
    ("tcp.gap", _W, "bytes of a TCP stream are missing from the capture"),
    ("tcp.midstream_start", _I, "the capture starts in the middle of this direction's stream"),
    ("tcp.retransmission_mismatch", _E, "retransmitted or overlapping bytes differ from the first"),
    ("tcp.out_of_order_overflow", _W, "too many out-of-order bytes buffered: declared a gap"),
    ("tcp.data_after_close", _W, "payload on a connection after its FIN or RST"),
    ("tcp.flow_evicted", _W, "too many open connections: the least recently active was closed"),
    # Network and link layers.
    (
        "net.ip_fragment",
        _W,
        "a fragment of an IP datagram never completed (fragment lost, timeout): bytes missing",
    ),
    (
        "net.ip_fragment_overlap",
        _W,
        "IP fragments overlap with different bytes or datagram ends: the first copy is kept",
    ),
    (
        "net.encapsulation_too_deep",
        _W,
        "more nested tunnels, label stacks or inner frames than the dissector decodes",
    ),
    ("net.truncated_header", _W, "captured bytes too short for the link/IP/TCP headers"),
    ("net.bad_header", _W, "an impossible IP or TCP header"),
    ("net.unsupported_linktype", _W, "packets of a link type the dissector cannot parse"),
    # Capture files.
    ("capture.truncated", _E, "the capture file ends in the middle of a record"),
    ("capture.corrupt_record", _E, "a capture record with an impossible length or block"),
    ("capture.bad_timestamp", _W, "a timestamp before 1970 or after 9999: the previous one used"),
    ("capture.kernel_drops", _E, "live: the kernel dropped packets (its buffer was full)"),
    ("capture.not_dissected", _E, "live: packets captured (kept by -w) but not dissected"),
)

REGISTRY: dict[str, AnomalyKind] = {
    code: AnomalyKind(code, sev, text) for code, sev, text in _TABLE
}
