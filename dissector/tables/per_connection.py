"""The per-connection tables: conversations, timeline and entities, each declared once.

Input: nothing (the declarations below). Output: `CONVERSATIONS` (row function
conversations_row(c, capture, community_id): a Conversation and the capture it was read
from), `TIMELINE` (timeline_row(p, community_id): a Pair) and `ENTITIES` (entities_row(conn_id,
e, community_id): an Entity), `Table`s of dissector.tables.columns; community_id is the
connection's, made once per connection by the builder.
Rule: each column names the expression that gives its value; names shared by several columns
come from the table's prelude. Protocol uint64 ids are stored as int64 (see columns.i64).
"""

from __future__ import annotations

from dissector.events import CloseReason, EntityKind, EntityState, Outcome
from dissector.tables.columns import (
    BOOL,
    I32,
    I64,
    STR,
    STRINGS,
    TS,
    Column,
    Table,
    col,
    community_id_column,
    endpoints,
    one_of,
)

# ----------------------------------------------------------------------------- conversations


def _per_direction(stem: str, doc: str, stat: str) -> list[Column]:
    """Two columns from a DirectionStats field: client to broker, then broker to client."""
    return [
        col(f"{stem}_c2b", I64, f"c2b.{stat}", f"{doc}, client to broker"),
        col(f"{stem}_b2c", I64, f"b2c.{stat}", f"{doc}, broker to client"),
    ]


#: Row function conversations_row(c, capture, community_id): c is a Conversation, capture the
#: file it is from.
_CONVERSATION_PRELUDE = """
    client_ip, client_port, broker_ip, broker_port = c.key
    proxied = c.proxied_client
    c2b, b2c = c.c2b, c.b2c
    s = c.info
    tls = c.tls
"""

CONVERSATIONS = Table(
    "conversations",
    "c, capture, community_id",
    [
        col("ts", TS, "c.start_ts", "start: time of the connection's first packet", False),
        col("conn_id", I64, "c.conn_id", "connection id, joins every table", False),
        *endpoints(),
        community_id_column(),
        col("end_ts", TS, "c.end_ts", "time of the last packet (or of the FIN/RST that closed it)"),
        col("duration_us", I64, "c.end_ts - c.start_ts", "end_ts - ts in microseconds"),
        col("ended", STR, "c.ended", one_of(CloseReason)),
        col("syn_seen", BOOL, "c.syn_seen", "the capture holds the connection's SYN"),
        col("encrypted", BOOL, "c.encrypted", "TLS: reported, not decoded"),
        col(
            "proxied_client_ip",
            STR,
            "proxied[0] if proxied else None",
            "original client from a PROXY protocol header",
        ),
        col(
            "proxied_client_port",
            I32,
            "proxied[1] if proxied else None",
            "original client port from a PROXY header",
        ),
        col("first_packet", I64, "c.first_packet", "capture packet number of the first packet"),
        col("last_packet", I64, "c.last_packet", "capture packet number of the last packet"),
        *_per_direction("packets", "packets seen, retransmissions included", "packets"),
        *_per_direction(
            "bytes", "TCP payload bytes on the wire, retransmissions included", "wire_bytes"
        ),
        *_per_direction("stream_bytes", "length of the reassembled stream", "stream_bytes"),
        *_per_direction("frames", "Pulsar frames", "frames"),
        *_per_direction("frame_bytes", "stream bytes that belong to frames", "frame_bytes"),
        *_per_direction("skipped_bytes", "stream bytes skipped to resynchronise", "skipped_bytes"),
        *_per_direction("gap_bytes", "stream bytes missing from the capture", "gap_bytes"),
        col(
            "preamble_bytes",
            I64,
            "c2b.preamble_bytes",
            "PROXY protocol header bytes before the first frame",
        ),
        col("client_version", STR, "s.client_version", "CONNECT client_version"),
        col("server_version", STR, "s.server_version", "CONNECTED server_version"),
        col("client_protocol", I32, "s.client_protocol", "protocol version the client announced"),
        col("server_protocol", I32, "s.server_protocol", "protocol version the broker announced"),
        col("auth_method", STR, "s.auth_method", "authentication method name (data never shown)"),
        col(
            "proxy_to_broker_url",
            STR,
            "s.proxy_to_broker_url",
            "set when a Pulsar proxy forwarded the client",
        ),
        col(
            "original_principal",
            STR,
            "s.original_principal",
            "client principal as forwarded by a proxy",
        ),
        col(
            "max_message_size",
            I32,
            "s.max_message_size",
            "CONNECTED max_message_size, if the broker sent it",
        ),
        col("feature_flags", STRINGS, "s.feature_flags", "CONNECT feature flags set to true"),
        col(
            "producers",
            I32,
            "sum(1 for e in s.entities if e.kind == EntityKind.PRODUCER)",
            "producers created on the connection",
        ),
        col(
            "consumers",
            I32,
            "sum(1 for e in s.entities if e.kind == EntityKind.CONSUMER)",
            "consumers created on the connection",
        ),
        col(
            "topics",
            STRINGS,
            "sorted({e.topic for e in s.entities if e.topic})",
            "topics of its producers and consumers",
        ),
        col("anomalies", I64, "c.anomalies", "anomaly rows of the connection"),
        col("capture", STR, "capture", "capture file the connection was read from"),
        col(
            "tls_version",
            STR,
            "tls.version if tls else None",
            "TLS: negotiated version (TLS 1.3 from the ServerHello's supported_versions)",
        ),
        col("tls_cipher", STR, "tls.cipher if tls else None", "TLS: cipher suite (IANA name)"),
        col("tls_sni", STR, "tls.sni if tls else None", "TLS: server name the client asked for"),
        col(
            "tls_alpn",
            STR,
            "tls.alpn if tls else None",
            "TLS: ALPN protocol the server chose, else those the client offered (a,b)",
        ),
        col(
            "tls_cert_subject",
            STR,
            "tls.cert_subject if tls else None",
            "TLS: server certificate subject, RFC 4514 (TLS 1.2, or 1.3 decrypted)",
        ),
        col(
            "tls_cert_issuer",
            STR,
            "tls.cert_issuer if tls else None",
            "TLS: server certificate issuer, RFC 4514",
        ),
        col(
            "tls_cert_not_after",
            TS,
            "tls.cert_not_after if tls else None",
            "TLS: server certificate expiry (UTC)",
        ),
        col(
            "tls_decrypted",
            BOOL,
            "tls.decrypted if tls else None",
            "TLS: application data was decrypted with a key log (--tls-keylog)",
        ),
    ],
    prelude=_CONVERSATION_PRELUDE,
    env={"EntityKind": EntityKind},
)

#: Row function timeline_row(p, community_id): p is a Pair (a request and its response, either
#: may be None).
_PAIR_PRELUDE = """
    req, resp = p.request, p.response
    first = req if req is not None else resp
    assert first is not None
"""

TIMELINE = Table(
    "timeline",
    "p, community_id",
    [
        col(
            "ts", TS, "first.last_ts", "time of the request (of the response when unmatched)", False
        ),
        col("conn_id", I64, "p.conn_id", "connection id, joins every table", False),
        community_id_column(),
        col(
            "request_command",
            STR,
            "None if req is None else req.command_name",
            "the request (SEND, LOOKUP, MESSAGE, PING, ...)",
        ),
        col(
            "response_command",
            STR,
            "None if resp is None else resp.command_name",
            "its answer (SEND_RECEIPT, ERROR, ACK, PONG, ...)",
        ),
        col(
            "request_direction",
            STR,
            "first.direction if req is not None else None",
            "direction of the request",
        ),
        col(
            "request_packet",
            I64,
            "None if req is None else req.last_packet",
            "capture packet number completing the request",
        ),
        col(
            "response_packet",
            I64,
            "None if resp is None else resp.last_packet",
            "capture packet number completing the response",
        ),
        col("request_ts", TS, "None if req is None else req.last_ts", "time of the request"),
        col("response_ts", TS, "None if resp is None else resp.last_ts", "time of the response"),
        col(
            "latency_us",
            I64,
            "None if req is None or resp is None else resp.last_ts - req.last_ts",
            "response_ts - request_ts in microseconds",
        ),
        col("request_id", I64, "_opt64(p.request_id)", "request_id pairing the two"),
        col("producer_id", I64, "_opt64(p.producer_id)", "producer of a SEND"),
        col("consumer_id", I64, "_opt64(p.consumer_id)", "consumer of a MESSAGE/ACK"),
        col("sequence_id", I64, "_opt64(p.sequence_id)", "sequence id of a SEND"),
        col(
            "ledger_id",
            I64,
            "_opt64(p.ledger_id)",
            "message id: ledger (receipts, deliveries, acks)",
        ),
        col("entry_id", I64, "_opt64(p.entry_id)", "message id: entry"),
        col("topic", STR, "p.topic", "topic of the request"),
        col("outcome", STR, "p.outcome", one_of(Outcome)),
        col("error_code", STR, "p.error_code", "ServerError name when the response reports one"),
        col("error_message", STR, "p.error_message", "the response's error message"),
        col(
            "request_offset",
            I64,
            "None if req is None else req.stream_offset",
            "stream offset of the request frame (joins frames)",
        ),
        col(
            "response_offset",
            I64,
            "None if resp is None else resp.stream_offset",
            "stream offset of the response frame",
        ),
        col(
            "first_ack_packet",
            I64,
            "p.first_ack_packet",
            "a repeated ack (unmatched: of a message already acknowledged, not a fault): "
            "capture packet number of the message's first ack",
        ),
    ],
    prelude=_PAIR_PRELUDE,
)

#: Row function entities_row(conn_id, e, community_id): e is an Entity of the connection
#: conn_id.
ENTITIES = Table(
    "entities",
    "conn_id, e, community_id",
    [
        col("ts", TS, "e.created_ts", "when the PRODUCER / SUBSCRIBE was sent", False),
        col("conn_id", I64, "conn_id", "connection id, joins every table", False),
        community_id_column(),
        col("kind", STR, "e.kind", one_of(EntityKind), False),
        col("entity_id", I64, "_i64(e.entity_id)", "producer_id or consumer_id on the connection"),
        col("topic", STR, "e.topic", "topic of the producer or consumer"),
        col("name", STR, "e.name", "producer name (as assigned) or consumer name"),
        col("subscription", STR, "e.subscription", "consumers: subscription name"),
        col("sub_type", STR, "e.sub_type", "consumers: Exclusive, Shared, Failover, Key_Shared"),
        col(
            "access_mode",
            STR,
            "e.access_mode",
            "producers: Shared, Exclusive, WaitForExclusive, ...",
        ),
        col("state", STR, "e.state", ", ".join(EntityState)),
        col("closed_ts", TS, "e.closed_ts", "when it was closed"),
        col("permits", I64, "e.permits", "consumers: FLOW permits granted"),
        col(
            "delivered",
            I64,
            "e.delivered",
            "consumers: messages delivered as permits count them (batch entries, chunks)",
        ),
        col("sent", I64, "e.sent", "producers: messages sent (batch entries counted)"),
    ],
)
