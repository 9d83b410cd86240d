"""Arrow schemas of every table: the single definition pandas, Parquet and Spark come from.

Input: nothing. Output: `SCHEMAS`, table name -> pyarrow.Schema, each column with a
one-line description in its field metadata.
Rules: `ts` first (UTC, microseconds) and `conn_id` in every table; no unsigned types (Spark
has none): protocol uint64 ids are stored as int64, as Pulsar's Java implementation holds them;
client/broker naming for endpoints.
"""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
#: Lists name their item "element", as Parquet does, so that schemas survive a round trip.
_STRINGS = pa.list_(pa.field("element", pa.string()))


def _col(name: str, dtype: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, dtype, nullable=nullable, metadata={"description": doc})


def _endpoints() -> list[pa.Field]:
    return [
        _col("client_ip", pa.string(), "client address (IPv4 dotted or IPv6 text)"),
        _col("client_port", pa.int32(), "client TCP port"),
        _col("broker_ip", pa.string(), "broker address"),
        _col("broker_port", pa.int32(), "broker TCP port"),
    ]


FRAMES = pa.schema(
    [
        _col("ts", TS, "time of the packet that completed the frame", nullable=False),
        _col("conn_id", pa.int64(), "connection id, joins every table", nullable=False),
        _col("direction", pa.string(), "client_to_broker or broker_to_client", nullable=False),
        *_endpoints(),
        _col("first_packet", pa.int64(), "capture packet number holding the frame's first byte"),
        _col("last_packet", pa.int64(), "capture packet number holding the frame's last byte"),
        _col("stream_offset", pa.int64(), "offset of the frame in its direction's byte stream"),
        _col("frame_size", pa.int64(), "bytes on the wire, the 4-byte size field included"),
        _col("command", pa.string(), "BaseCommand type name, e.g. SEND", nullable=False),
        _col("request_id", pa.int64(), "request_id of the command, if it has one"),
        _col("producer_id", pa.int64(), "producer_id of the command, if it has one"),
        _col("consumer_id", pa.int64(), "consumer_id of the command, if it has one"),
        _col("sequence_id", pa.int64(), "sequence_id (SEND, SEND_RECEIPT, SEND_ERROR)"),
        _col("topic", pa.string(), "topic the frame names, or of its producer/consumer id"),
        _col("ledger_id", pa.int64(), "ledger of the (first) message id the command carries"),
        _col("entry_id", pa.int64(), "entry of the (first) message id the command carries"),
        _col("checksum", pa.string(), "payload frames: valid, invalid, absent or unknown"),
        _col("checksum_expected", pa.int64(), "CRC32C carried by the frame"),
        _col("checksum_computed", pa.int64(), "CRC32C computed over the frame"),
        _col("broker_entry_timestamp", TS, "broker entry metadata: when the broker got it"),
        _col("broker_entry_index", pa.int64(), "broker entry metadata: the broker's index"),
        _col("num_messages", pa.int32(), "messages the frame carries or acknowledges"),
        _col("payload_size", pa.int64(), "bytes of payload after the metadata (as sent)"),
        _col("complete", pa.bool_(), "false when bytes of the frame are missing", nullable=False),
    ]
)

ANOMALIES = pa.schema(
    [
        _col("ts", TS, "time of the packet where the fault was seen", nullable=False),
        _col("conn_id", pa.int64(), "connection id (0: not tied to a connection)", nullable=False),
        _col("direction", pa.string(), "client_to_broker, broker_to_client or null"),
        _col("stream_offset", pa.int64(), "offset in the direction's stream, if any"),
        _col("code", pa.string(), "stable dotted code, e.g. pulsar.bad_checksum", nullable=False),
        _col("severity", pa.string(), "info, warning or error", nullable=False),
        _col("detail", pa.string(), "what exactly was found"),
        _col("length", pa.int64(), "bytes concerned (skipped, missing, ...), 0 if none"),
        _col("packet", pa.int64(), "capture packet number (0 if unknown)"),
    ]
)


def _per_direction(stem: str, doc: str) -> list[pa.Field]:
    return [
        _col(f"{stem}_c2b", pa.int64(), f"{doc}, client to broker"),
        _col(f"{stem}_b2c", pa.int64(), f"{doc}, broker to client"),
    ]


CONVERSATIONS = pa.schema(
    [
        _col("ts", TS, "start: time of the connection's first packet", nullable=False),
        _col("conn_id", pa.int64(), "connection id, joins every table", nullable=False),
        *_endpoints(),
        _col("end_ts", TS, "time of the last packet (or of the FIN/RST that closed it)"),
        _col("duration_us", pa.int64(), "end_ts - ts in microseconds"),
        _col("ended", pa.string(), "fin, rst, capture_end, port_reuse or evicted"),
        _col("syn_seen", pa.bool_(), "the capture holds the connection's SYN"),
        _col("encrypted", pa.bool_(), "TLS: reported, not decoded"),
        _col("proxied_client_ip", pa.string(), "original client from a PROXY protocol header"),
        _col("proxied_client_port", pa.int32(), "original client port from a PROXY header"),
        _col("first_packet", pa.int64(), "capture packet number of the first packet"),
        _col("last_packet", pa.int64(), "capture packet number of the last packet"),
        *_per_direction("packets", "packets seen, retransmissions included"),
        *_per_direction("bytes", "TCP payload bytes on the wire, retransmissions included"),
        *_per_direction("stream_bytes", "length of the reassembled stream"),
        *_per_direction("frames", "Pulsar frames"),
        *_per_direction("frame_bytes", "stream bytes that belong to frames"),
        *_per_direction("skipped_bytes", "stream bytes skipped to resynchronise"),
        *_per_direction("gap_bytes", "stream bytes missing from the capture"),
        _col("preamble_bytes", pa.int64(), "PROXY protocol header bytes before the first frame"),
        _col("client_version", pa.string(), "CONNECT client_version"),
        _col("server_version", pa.string(), "CONNECTED server_version"),
        _col("client_protocol", pa.int32(), "protocol version the client announced"),
        _col("server_protocol", pa.int32(), "protocol version the broker announced"),
        _col("auth_method", pa.string(), "authentication method name (data never shown)"),
        _col("proxy_to_broker_url", pa.string(), "set when a Pulsar proxy forwarded the client"),
        _col("original_principal", pa.string(), "client principal as forwarded by a proxy"),
        _col("max_message_size", pa.int32(), "CONNECTED max_message_size, if the broker sent it"),
        _col("feature_flags", _STRINGS, "CONNECT feature flags set to true"),
        _col("producers", pa.int32(), "producers created on the connection"),
        _col("consumers", pa.int32(), "consumers created on the connection"),
        _col("topics", _STRINGS, "topics of its producers and consumers"),
        _col("anomalies", pa.int64(), "anomaly rows of the connection"),
        _col("capture", pa.string(), "capture file the connection was read from"),
    ]
)

TIMELINE = pa.schema(
    [
        _col("ts", TS, "time of the request (of the response when unmatched)", nullable=False),
        _col("conn_id", pa.int64(), "connection id, joins every table", nullable=False),
        _col("request_command", pa.string(), "the request (SEND, LOOKUP, MESSAGE, PING, ...)"),
        _col("response_command", pa.string(), "its answer (SEND_RECEIPT, ERROR, ACK, PONG, ...)"),
        _col("request_direction", pa.string(), "direction of the request"),
        _col("request_packet", pa.int64(), "capture packet number completing the request"),
        _col("response_packet", pa.int64(), "capture packet number completing the response"),
        _col("request_ts", TS, "time of the request"),
        _col("response_ts", TS, "time of the response"),
        _col("latency_us", pa.int64(), "response_ts - request_ts in microseconds"),
        _col("request_id", pa.int64(), "request_id pairing the two"),
        _col("producer_id", pa.int64(), "producer of a SEND"),
        _col("consumer_id", pa.int64(), "consumer of a MESSAGE/ACK"),
        _col("sequence_id", pa.int64(), "sequence id of a SEND"),
        _col("ledger_id", pa.int64(), "message id: ledger (receipts, deliveries, acks)"),
        _col("entry_id", pa.int64(), "message id: entry"),
        _col("topic", pa.string(), "topic of the request"),
        _col("outcome", pa.string(), "success, error, unanswered, unmatched or redelivered"),
        _col("error_code", pa.string(), "ServerError name when the response reports one"),
        _col("error_message", pa.string(), "the response's error message"),
        _col("request_offset", pa.int64(), "stream offset of the request frame (joins frames)"),
        _col("response_offset", pa.int64(), "stream offset of the response frame"),
    ]
)

ENTITIES = pa.schema(
    [
        _col("ts", TS, "when the PRODUCER / SUBSCRIBE was sent", nullable=False),
        _col("conn_id", pa.int64(), "connection id, joins every table", nullable=False),
        _col("kind", pa.string(), "producer or consumer", nullable=False),
        _col("entity_id", pa.int64(), "producer_id or consumer_id on the connection"),
        _col("topic", pa.string(), "topic of the producer or consumer"),
        _col("name", pa.string(), "producer name (as assigned) or consumer name"),
        _col("subscription", pa.string(), "consumers: subscription name"),
        _col("sub_type", pa.string(), "consumers: Exclusive, Shared, Failover, Key_Shared"),
        _col("access_mode", pa.string(), "producers: Shared, Exclusive, WaitForExclusive, ..."),
        _col("state", pa.string(), "pending, created, failed, closed_by_client, closed_by_broker"),
        _col("closed_ts", TS, "when it was closed"),
        _col("permits", pa.int64(), "consumers: FLOW permits granted"),
        _col(
            "delivered",
            pa.int64(),
            "consumers: messages delivered as permits count them (batch entries, chunks)",
        ),
        _col("sent", pa.int64(), "producers: messages sent (batch entries counted)"),
    ]
)

MESSAGES = pa.schema(
    [
        _col("ts", TS, "time of the packet that completed the (last) frame", nullable=False),
        _col("conn_id", pa.int64(), "connection id, joins every table", nullable=False),
        _col("direction", pa.string(), "client_to_broker (produced) or broker_to_client"),
        _col("kind", pa.string(), "produced (SEND) or delivered (MESSAGE)", nullable=False),
        _col("topic", pa.string(), "topic of the producer or consumer"),
        _col("producer_id", pa.int64(), "produced: the connection's producer id"),
        _col("consumer_id", pa.int64(), "delivered: the connection's consumer id"),
        _col("producer_name", pa.string(), "producer name from the message metadata"),
        _col("sequence_id", pa.int64(), "sequence id of this message (batch entries counted)"),
        _col("batch_index", pa.int32(), "index in its batch, null when not batched"),
        _col("batch_size", pa.int32(), "messages in the batch (1 when not batched)"),
        _col("publish_time", TS, "publish time set by the producer"),
        _col("event_time", TS, "event time set by the application, null when unset"),
        _col("key", pa.string(), "partition key"),
        _col("key_base64", pa.bool_(), "the key is base64-encoded bytes"),
        _col("ordering_key", pa.binary(), "ordering key (Key_Shared)"),
        _col("properties", pa.map_(pa.string(), pa.string()), "application properties"),
        _col("compression", pa.string(), "NONE, LZ4, ZLIB, ZSTD or SNAPPY"),
        _col("compressed_size", pa.int64(), "payload bytes as sent (whole batch / joined chunks)"),
        _col("payload_size", pa.int64(), "bytes of this message after decoding"),
        _col("payload_sha256", pa.string(), "sha256 of this message's decoded payload (hex)"),
        _col("chunked", pa.bool_(), "sent as a chunked message"),
        _col("num_chunks", pa.int32(), "chunks of a chunked message"),
        _col("encrypted", pa.bool_(), "end-to-end encrypted: payload not decoded"),
        _col("encryption_keys", _STRINGS, "names of the encryption keys"),
        _col("schema_version", pa.binary(), "schema version the producer used"),
        _col("ledger_id", pa.int64(), "delivered: ledger of the message id"),
        _col("entry_id", pa.int64(), "delivered: entry of the message id"),
        _col("partition", pa.int32(), "delivered: partition of the message id (-1: none)"),
        _col("redelivery_count", pa.int32(), "delivered: times the broker redelivered it"),
        _col("broker_entry_timestamp", TS, "broker entry metadata: when the broker got it"),
        _col("broker_entry_index", pa.int64(), "broker entry metadata: the broker's index"),
        _col("null_value", pa.bool_(), "the message has a null value (tombstone)"),
        _col("null_key", pa.bool_(), "the message has a null partition key"),
        _col("compacted_out", pa.bool_(), "batch entry removed by compaction"),
        _col("complete", pa.bool_(), "false when the payload could not be decoded"),
        _col("first_packet", pa.int64(), "capture packet number of the frame's first byte"),
        _col("last_packet", pa.int64(), "capture packet number of the frame's last byte"),
        _col("stream_offset", pa.int64(), "offset of the (first) frame in its stream"),
        _col("payload_preview", pa.string(), "first N payload bytes, escaped (opt-in only)"),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "frames": FRAMES,
    "messages": MESSAGES,
    "anomalies": ANOMALIES,
    "conversations": CONVERSATIONS,
    "timeline": TIMELINE,
    "entities": ENTITIES,
}


def describe(table: str) -> dict[str, str]:
    """Column name -> one-line description, for docs and `--help`."""
    return {f.name: (f.metadata or {}).get(b"description", b"").decode() for f in SCHEMAS[table]}
