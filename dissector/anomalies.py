"""Registry of anomaly codes: every protocol or capture fault the dissector can report.

Input: nothing. Output: `AnomalyCode`, every code by name (`AnomalyCode.TCP_GAP` is
"tcp.gap"), and `REGISTRY`, mapping each code to its severity and summary.
Rule: codes are stable public identifiers (users filter on them); add new ones, never rename.
A code is written here once, as an `AnomalyCode` name; everything else in the package names
it (tests/test_anomalies.py finds any code written as a string elsewhere, and any code
without its one line here). Every anomaly event must use a code from this table (checked at
creation).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


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


class AnomalyCode:
    """Every anomaly code, by name: the stable dotted strings of the anomaly rows.

    A plain class of `Final` strings rather than an enum: mypyc folds each name into its
    string where it is compiled, so naming a code costs the per-packet path nothing, and the
    rows hold the very same strings. The name is the code in capitals, its dot an underscore.
    """

    # Framing: sizes and layout of one frame.
    PULSAR_FRAME_TOO_LARGE: Final[str] = "pulsar.frame_too_large"
    PULSAR_FRAME_TOO_SMALL: Final[str] = "pulsar.frame_too_small"
    PULSAR_COMMAND_SIZE_INVALID: Final[str] = "pulsar.command_size_invalid"
    PULSAR_COMMAND_UNDECODABLE: Final[str] = "pulsar.command_undecodable"
    PULSAR_UNKNOWN_COMMAND_TYPE: Final[str] = "pulsar.unknown_command_type"
    PULSAR_COMMAND_MISSING_BODY: Final[str] = "pulsar.command_missing_body"
    PULSAR_INVALID_UTF8: Final[str] = "pulsar.invalid_utf8"
    PULSAR_TRAILING_BYTES: Final[str] = "pulsar.trailing_bytes"
    PULSAR_PAYLOAD_MISSING: Final[str] = "pulsar.payload_missing"
    PULSAR_BAD_MAGIC: Final[str] = "pulsar.bad_magic"
    PULSAR_BAD_CHECKSUM: Final[str] = "pulsar.bad_checksum"
    PULSAR_METADATA_SIZE_INVALID: Final[str] = "pulsar.metadata_size_invalid"
    PULSAR_METADATA_UNDECODABLE: Final[str] = "pulsar.metadata_undecodable"
    PULSAR_BROKER_ENTRY_METADATA_INVALID: Final[str] = "pulsar.broker_entry_metadata_invalid"
    # Stream: what happens between frames.
    PULSAR_SKIPPED_BYTES: Final[str] = "pulsar.skipped_bytes"
    PULSAR_TRUNCATED_FRAME: Final[str] = "pulsar.truncated_frame"
    PULSAR_ENCRYPTED: Final[str] = "pulsar.encrypted"
    PROXY_HEADER_INVALID: Final[str] = "proxy.header_invalid"
    # TLS (conversations on a TLS port or opening with a ClientHello).
    TLS_ALERT: Final[str] = "tls.alert"
    TLS_HANDSHAKE_FAILURE: Final[str] = "tls.handshake_failure"
    TLS_NO_KEY: Final[str] = "tls.no_key"
    TLS_WAITING_DROPPED: Final[str] = "tls.waiting_dropped"
    TLS_DECRYPT_FAILED: Final[str] = "tls.decrypt_failed"
    TLS_UNSUPPORTED_CIPHER: Final[str] = "tls.unsupported_cipher"
    TLS_SKIPPED_BYTES: Final[str] = "tls.skipped_bytes"
    TLS_TRUNCATED_RECORD: Final[str] = "tls.truncated_record"
    TLS_CERTIFICATE_UNDECODABLE: Final[str] = "tls.certificate_undecodable"
    # Payloads: decompression, batches, chunks.
    PAYLOAD_DECOMPRESSION_FAILED: Final[str] = "payload.decompression_failed"
    PAYLOAD_SIZE_MISMATCH: Final[str] = "payload.size_mismatch"
    PAYLOAD_DECOMPRESSION_BOMB: Final[str] = "payload.decompression_bomb"
    PAYLOAD_BATCH_INVALID: Final[str] = "payload.batch_invalid"
    PAYLOAD_CHUNK_MISSING: Final[str] = "payload.chunk_missing"
    PAYLOAD_CHUNK_DUPLICATE: Final[str] = "payload.chunk_duplicate"
    PAYLOAD_CHUNK_SIZE_MISMATCH: Final[str] = "payload.chunk_size_mismatch"
    PAYLOAD_CHUNK_COUNT_INVALID: Final[str] = "payload.chunk_count_invalid"
    PAYLOAD_ENCRYPTED: Final[str] = "payload.encrypted"
    # Application messages: their properties.
    MESSAGE_TRACE_CONTEXT_INVALID: Final[str] = "message.trace_context_invalid"
    # Schemas, as the values stage learns them (--values only: docs/values.md).
    SCHEMA_INVALID: Final[str] = "schema.invalid"
    SCHEMA_TOO_LARGE: Final[str] = "schema.too_large"
    SCHEMA_DROPPED: Final[str] = "schema.dropped"
    # TCP reassembly.
    TCP_GAP: Final[str] = "tcp.gap"
    TCP_MIDSTREAM_START: Final[str] = "tcp.midstream_start"
    TCP_RETRANSMISSION_MISMATCH: Final[str] = "tcp.retransmission_mismatch"
    TCP_OUT_OF_ORDER_OVERFLOW: Final[str] = "tcp.out_of_order_overflow"
    TCP_DATA_AFTER_CLOSE: Final[str] = "tcp.data_after_close"
    TCP_FLOW_EVICTED: Final[str] = "tcp.flow_evicted"
    # Network and link layers.
    NET_IP_FRAGMENT: Final[str] = "net.ip_fragment"
    NET_IP_FRAGMENT_OVERLAP: Final[str] = "net.ip_fragment_overlap"
    NET_ENCAPSULATION_TOO_DEEP: Final[str] = "net.encapsulation_too_deep"
    NET_TRUNCATED_HEADER: Final[str] = "net.truncated_header"
    NET_BAD_HEADER: Final[str] = "net.bad_header"
    NET_UNSUPPORTED_LINKTYPE: Final[str] = "net.unsupported_linktype"
    # Capture files.
    CAPTURE_TRUNCATED: Final[str] = "capture.truncated"
    CAPTURE_CORRUPT_RECORD: Final[str] = "capture.corrupt_record"
    CAPTURE_BAD_TIMESTAMP: Final[str] = "capture.bad_timestamp"
    CAPTURE_KERNEL_DROPS: Final[str] = "capture.kernel_drops"
    CAPTURE_NOT_DISSECTED: Final[str] = "capture.not_dissected"


_C = AnomalyCode

#: code, severity, summary: one line each, in the order of AnomalyCode.
_TABLE: tuple[tuple[str, Severity, str], ...] = (
    # Framing: sizes and layout of one frame.
    (_C.PULSAR_FRAME_TOO_LARGE, _E, "totalSize exceeds the maximum frame size"),
    (_C.PULSAR_FRAME_TOO_SMALL, _E, "totalSize too small to hold commandSize and a command"),
    (_C.PULSAR_COMMAND_SIZE_INVALID, _E, "commandSize is zero or larger than the frame"),
    (_C.PULSAR_COMMAND_UNDECODABLE, _E, "the BaseCommand protobuf does not decode"),
    (_C.PULSAR_UNKNOWN_COMMAND_TYPE, _W, "BaseCommand.type is not a known command type"),
    (_C.PULSAR_COMMAND_MISSING_BODY, _E, "the sub-message named by BaseCommand.type is absent"),
    (_C.PULSAR_INVALID_UTF8, _W, "a string field is not UTF-8: replaced with U+FFFD, bytes named"),
    (_C.PULSAR_TRAILING_BYTES, _W, "bytes after the command of a simple (payload-free) command"),
    (_C.PULSAR_PAYLOAD_MISSING, _E, "a payload command (SEND, MESSAGE) has no metadata section"),
    (
        _C.PULSAR_BAD_MAGIC,
        _E,
        "neither magic 0x0e01 nor a plausible metadataSize after the command",
    ),
    (_C.PULSAR_BAD_CHECKSUM, _E, "CRC32C of metadataSize+metadata+payload differs from the frame"),
    (_C.PULSAR_METADATA_SIZE_INVALID, _E, "metadataSize is larger than the rest of the frame"),
    (_C.PULSAR_METADATA_UNDECODABLE, _E, "the MessageMetadata protobuf does not decode"),
    (
        _C.PULSAR_BROKER_ENTRY_METADATA_INVALID,
        _E,
        "broker entry metadata (0x0e02) size is inconsistent or it does not decode",
    ),
    # Stream: what happens between frames.
    (_C.PULSAR_SKIPPED_BYTES, _W, "bytes that are not part of any frame were skipped to resync"),
    (_C.PULSAR_TRUNCATED_FRAME, _W, "the stream ended or lost bytes in the middle of a frame"),
    (_C.PULSAR_ENCRYPTED, _I, "TLS conversation: reported, not decoded"),
    (_C.PROXY_HEADER_INVALID, _W, "a PROXY protocol header that does not parse"),
    # TLS (conversations on a TLS port or opening with a ClientHello).
    (_C.TLS_ALERT, _W, "a TLS alert other than close_notify (in clear, or decrypted)"),
    (
        _C.TLS_HANDSHAKE_FAILURE,
        _E,
        "the TLS handshake failed: fatal alert or end before it completed",
    ),
    (_C.TLS_NO_KEY, _W, "TLS records of a session without a key in the key log: not decrypted"),
    (
        _C.TLS_WAITING_DROPPED,
        _W,
        "TLS records waiting for a key not kept: all sessions together waited too many bytes",
    ),
    (
        _C.TLS_DECRYPT_FAILED,
        _E,
        "a TLS record does not decrypt with its session's key (wrong key, corrupted)",
    ),
    (_C.TLS_UNSUPPORTED_CIPHER, _W, "a TLS cipher suite this dissector cannot decrypt"),
    (
        _C.TLS_SKIPPED_BYTES,
        _W,
        "TCP bytes that are not part of any TLS record were skipped to resync",
    ),
    (_C.TLS_TRUNCATED_RECORD, _W, "the stream ended in the middle of a TLS record"),
    (_C.TLS_CERTIFICATE_UNDECODABLE, _W, "the server certificate does not parse as X.509"),
    # Payloads: decompression, batches, chunks.
    (_C.PAYLOAD_DECOMPRESSION_FAILED, _E, "the payload does not decompress with its codec"),
    (_C.PAYLOAD_SIZE_MISMATCH, _E, "decompressed size differs from uncompressed_size"),
    (_C.PAYLOAD_DECOMPRESSION_BOMB, _E, "claimed or produced size above the bound: not expanded"),
    (_C.PAYLOAD_BATCH_INVALID, _E, "batch entries do not add up to the payload or their count"),
    (_C.PAYLOAD_CHUNK_MISSING, _W, "a chunked message lacks chunks (not all were captured)"),
    (_C.PAYLOAD_CHUNK_DUPLICATE, _W, "a chunk of a chunked message arrived twice"),
    (_C.PAYLOAD_CHUNK_SIZE_MISMATCH, _E, "chunk sizes disagree with total_chunk_msg_size"),
    (
        _C.PAYLOAD_CHUNK_COUNT_INVALID,
        _E,
        "num_chunks_from_msg or chunk_id out of range (wrapped negative, too many, id >= count)",
    ),
    (_C.PAYLOAD_ENCRYPTED, _I, "an encrypted message: reported, payload not decoded"),
    # Application messages: their properties.
    (
        _C.MESSAGE_TRACE_CONTEXT_INVALID,
        _W,
        "a trace context property (traceparent, tracestate, b3, X-B3-*, uber-trace-id, sw8)"
        " is malformed: not used",
    ),
    # Schemas, as the values stage learns them (--values only: docs/values.md).
    (
        _C.SCHEMA_INVALID,
        _W,
        "--values: a schema carried on the wire does not parse (Avro, protobuf-native"
        " descriptors, KeyValue data): its messages get no value",
    ),
    (
        _C.SCHEMA_TOO_LARGE,
        _W,
        "--values: a schema definition over MAX_DEFINITION_BYTES: not kept, its messages get"
        " no value",
    ),
    (
        _C.SCHEMA_DROPPED,
        _W,
        "--values: a schema version, topic, producer, consumer or schema request forgotten at"
        " a bound of the schema tracker: later messages may find no schema",
    ),
    # TCP reassembly.
    (_C.TCP_GAP, _W, "bytes of a TCP stream are missing from the capture"),
    (_C.TCP_MIDSTREAM_START, _I, "the capture starts in the middle of this direction's stream"),
    (
        _C.TCP_RETRANSMISSION_MISMATCH,
        _E,
        "retransmitted or overlapping bytes differ from the first",
    ),
    (_C.TCP_OUT_OF_ORDER_OVERFLOW, _W, "too many out-of-order bytes buffered: declared a gap"),
    (_C.TCP_DATA_AFTER_CLOSE, _W, "payload on a connection after its FIN or RST"),
    (_C.TCP_FLOW_EVICTED, _W, "too many open connections: the least recently active was closed"),
    # Network and link layers.
    (
        _C.NET_IP_FRAGMENT,
        _W,
        "a fragment of an IP datagram never completed (fragment lost, timeout): bytes missing",
    ),
    (
        _C.NET_IP_FRAGMENT_OVERLAP,
        _W,
        "IP fragments overlap with different bytes or datagram ends: the first copy is kept",
    ),
    (
        _C.NET_ENCAPSULATION_TOO_DEEP,
        _W,
        "more nested tunnels, label stacks or inner frames than the dissector decodes",
    ),
    (_C.NET_TRUNCATED_HEADER, _W, "captured bytes too short for the link/IP/TCP headers"),
    (_C.NET_BAD_HEADER, _W, "an impossible IP or TCP header"),
    (_C.NET_UNSUPPORTED_LINKTYPE, _W, "packets of a link type the dissector cannot parse"),
    # Capture files.
    (_C.CAPTURE_TRUNCATED, _E, "the capture file ends in the middle of a record"),
    (_C.CAPTURE_CORRUPT_RECORD, _E, "a capture record with an impossible length or block"),
    (_C.CAPTURE_BAD_TIMESTAMP, _W, "a timestamp before 1970 or after 9999: the previous one used"),
    (_C.CAPTURE_KERNEL_DROPS, _E, "live: the kernel dropped packets (its buffer was full)"),
    (_C.CAPTURE_NOT_DISSECTED, _E, "live: packets captured (kept by -w) but not dissected"),
)

REGISTRY: dict[str, AnomalyKind] = {
    code: AnomalyKind(code, sev, text) for code, sev, text in _TABLE
}
