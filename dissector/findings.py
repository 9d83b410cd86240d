"""Registry of finding codes: what went wrong on the wire, as the `findings` table names it.

Input: nothing. Output: `FindingCode`, every code by name (`FindingCode.FLOW_STARVED` is
"flow.starved"); `REGISTRY`, each code's severity, title, hint and the threshold option it
uses; `Thresholds`, those options with the clients' defaults (seconds, counts), and
`THRESHOLDS`, one line of help per option.
Rule: as dissector/anomalies.py for anomalies: a code is written here once, as a
`FindingCode` name, and everything else names it (tests/test_anomalies.py finds any code
written as a string elsewhere); codes are stable public identifiers (add, never rename).
A finding is a diagnosis built from many frames (dissector.diagnose); an anomaly is a fault
of the bytes themselves. Thresholds are never constants of the rules: they are options
(`diagnose --help`, docs/tables.md) defaulting to the official clients' settings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from dissector.anomalies import Severity


class FindingCode:
    """Every finding code, by name: the name is the code in capitals, its dot an underscore."""

    FLOW_NO_FLOW_AFTER_SUBSCRIBE: Final[str] = "flow.no_flow_after_subscribe"
    FLOW_STARVED: Final[str] = "flow.starved"
    FLOW_OVERSHOOT: Final[str] = "flow.overshoot"
    PRODUCER_SEND_TIMEOUT: Final[str] = "producer.send_timeout"
    PRODUCER_RECEIPT_OUT_OF_ORDER: Final[str] = "producer.receipt_out_of_order"
    PRODUCER_SEQUENCE_REGRESSION: Final[str] = "producer.sequence_regression"
    PRODUCER_BUSY: Final[str] = "producer.busy"
    CONSUMER_REDELIVERED_AFTER_ACK: Final[str] = "consumer.redelivered_after_ack"
    CONSUMER_REDELIVERY_STORM: Final[str] = "consumer.redelivery_storm"
    CONSUMER_ACK_HOLE: Final[str] = "consumer.ack_hole"
    CONSUMER_DISCARDED_CORRUPT: Final[str] = "consumer.discarded_corrupt"
    KEEPALIVE_UNANSWERED: Final[str] = "keepalive.unanswered"
    LOOKUP_REDIRECT_LOOP: Final[str] = "lookup.redirect_loop"
    REQUEST_UNANSWERED: Final[str] = "request.unanswered"
    REQUEST_UNKNOWN_RESPONSE: Final[str] = "request.unknown_response"
    REQUEST_ID_REUSED: Final[str] = "request.id_reused"
    MESSAGE_OVERSIZE: Final[str] = "message.oversize"
    TOPIC_MIGRATED_NOT_FOLLOWED: Final[str] = "topic.migrated_not_followed"
    CHUNK_INCOMPLETE_EXPIRED: Final[str] = "chunk.incomplete_expired"
    CONNECTION_WRONG_PROTOCOL: Final[str] = "connection.wrong_protocol"
    CHECKSUM_MISMATCH_HOP: Final[str] = "checksum.mismatch_hop"
    CONSUMER_BUSY: Final[str] = "consumer.busy"
    AUTH_REFRESH_UNSUPPORTED: Final[str] = "auth.refresh_unsupported"
    AUTH_CHALLENGE_UNANSWERED: Final[str] = "auth.challenge_unanswered"
    RECONNECT_RETRY_LOOP: Final[str] = "reconnect.retry_loop"
    RECONNECT_STORM: Final[str] = "reconnect.storm"
    DISPATCH_STALLED_WITH_PERMITS: Final[str] = "dispatch.stalled_with_permits"
    SCHEMA_INCOMPATIBLE: Final[str] = "schema.incompatible"
    TXN_COORDINATOR_NOT_FOUND: Final[str] = "txn.coordinator_not_found"
    TXN_INVALID_STATUS: Final[str] = "txn.invalid_status"
    TXN_TIMEOUT: Final[str] = "txn.timeout"
    FLOW_PERMIT_LEAK: Final[str] = "flow.permit_leak"
    CONSUMER_STATS_MISMATCH: Final[str] = "consumer.stats_mismatch"


@dataclass(frozen=True, slots=True)
class FindingKind:
    code: str
    severity: Severity
    title: str  # what the code means, one line
    hint: str  # what usually causes it and what to check
    threshold: str | None  # the Thresholds field it uses, if any


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The rules' thresholds; defaults are the official clients' (Java and C++) settings."""

    send_timeout: float = 30.0  # sendTimeoutMs 30000
    keepalive: float = 30.0  # keepAliveIntervalSeconds 30
    request_timeout: float = 30.0  # operationTimeoutSeconds 30
    ack_timeout: float = 60.0  # ackTimeout: disabled by default in clients; a hole this old
    flow_wait: float = 10.0  # no client default: how long a consumer may wait for FLOW
    chunk_expiry: float = 60.0  # expireTimeOfIncompleteChunkedMessage 60000 ms
    max_redirects: int = 20  # maxLookupRedirects 20
    redeliveries: int = 3  # redelivery requests (bursts: see consumers.py), or redelivery_count
    reconnect_wait: float = 30.0  # a migrated producer/consumer back this soon is followed
    retry_refusals: int = 5  # no client default: refusals in a row that make a retry loop
    storm_per_minute: int = 20  # no client default (backoff 100 ms doubling opens ~9 a minute)
    auth_wait: float = 60.0  # broker authenticationRefreshCheckSeconds 60
    dispatch_wait: float = 10.0  # no client default: how long permits may go unused
    txn_timeout: float = 60.0  # client transactionTimeout 60 s, when NEW_TXN names none
    leaked_permits: int = 1  # no client default: permits never returned that make a leak

    def us(self, name: str) -> int:
        """A threshold in seconds as whole microseconds (the events' clock)."""
        return round(float(getattr(self, name)) * 1_000_000)


#: Threshold option -> one line of help (the unit is in the text).
THRESHOLDS: dict[str, str] = {
    "send_timeout": "seconds a SEND may wait for its receipt (client sendTimeout)",
    "keepalive": "seconds a PING may wait for its PONG (client keepAliveInterval)",
    "request_timeout": "seconds a request_id may wait for its answer (operationTimeout)",
    "ack_timeout": "seconds the oldest unacknowledged delivery may wait while later ones are acked",
    "flow_wait": "seconds a subscribed or drained consumer may go without sending FLOW",
    "chunk_expiry": "seconds between chunks of one message before it counts as expired",
    "max_redirects": "consecutive Redirect answers to LOOKUP for one topic allowed",
    "redeliveries": "redelivery requests (commands within 10 ms count once) or redelivery_count "
    "of one consumer that make a storm",
    "reconnect_wait": "seconds a migrated producer/consumer may take to reappear elsewhere",
    "retry_refusals": "refusals in a row of the same PRODUCER or SUBSCRIBE with the same "
    "retriable error, with no LOOKUP between, that make a retry loop",
    "storm_per_minute": "connections from one client to one broker opened and ended within "
    "one minute that make a reconnect storm",
    "auth_wait": "seconds an AUTH_CHALLENGE may wait for its AUTH_RESPONSE, and how long "
    "after a token's expiry the broker may take to close (broker "
    "authenticationRefreshCheckSeconds)",
    "dispatch_wait": "seconds a consumer holding permits may get no MESSAGE while the topic's "
    "producers are receipted",
    "txn_timeout": "seconds a transaction may stay open when NEW_TXN names no txn_ttl_millis "
    "(client transactionTimeout)",
    "leaked_permits": "permits a consumer never returned for messages it was delivered and "
    "acknowledged that make a leak",
}
assert list(THRESHOLDS) == [f.name for f in fields(Thresholds)]

_C = FindingCode
_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

#: code, severity, title, hint, threshold: one entry each, in the order of FindingCode.
_TABLE: tuple[tuple[str, Severity, str, str, str | None], ...] = (
    (
        _C.FLOW_NO_FLOW_AFTER_SUBSCRIBE,
        _W,
        "a consumer subscribed and the client sent no FLOW",
        "without permits the broker delivers nothing: a receiver queue of 0 with no receive() "
        "call, a listener blocked, or a client that lost its FLOW after a reconnect",
        "flow_wait",
    ),
    (
        _C.FLOW_STARVED,
        _W,
        "a consumer had no permits left and sent no FLOW",
        "the application stopped receiving (slow or blocked listener, receive() not called) "
        "or the client forgot to renew permits; the broker holds the backlog meanwhile",
        "flow_wait",
    ),
    (
        _C.FLOW_OVERSHOOT,
        _W,
        "the broker delivered more messages than the permits granted plus one batch, and more "
        "MESSAGE commands than permits",
        "brokers may go over by one batch, and one estimating batch sizes (Apache's default, "
        "preciseDispatcherFlowControl=false) may send as many batches as permits; more points "
        "to a broker permit accounting bug or to FLOW frames missing from the capture",
        None,
    ),
    (
        _C.PRODUCER_SEND_TIMEOUT,
        _E,
        "SENDs went unanswered longer than the send timeout, or were pending at close",
        "a stalled or overloaded broker (throttling, storage slow, paused), a network "
        "partition, or back-pressure: look at PING/PONG and at the broker's logs",
        "send_timeout",
    ),
    (
        _C.PRODUCER_RECEIPT_OUT_OF_ORDER,
        _E,
        "a SEND_RECEIPT answered a sequence id other than the producer's oldest pending one",
        "clients treat it as a protocol error and reconnect; a broker bug or SENDs lost",
        None,
    ),
    (
        _C.PRODUCER_SEQUENCE_REGRESSION,
        _W,
        "a producer's sequence ids went backwards",
        "a client counter reset after an error or reconnect (deduplication then drops or "
        "duplicates messages); a restarted application reusing a producer name also does it",
        None,
    ),
    (
        _C.PRODUCER_BUSY,
        _E,
        "PRODUCER refused (ProducerBusy/ProducerFenced) or re-sent without CLOSE_PRODUCER",
        "another producer with the same name or an exclusive access mode holds the topic, or "
        "a client retried PRODUCER after a timeout instead of closing the first one",
        None,
    ),
    (
        _C.CONSUMER_REDELIVERED_AFTER_ACK,
        _W,
        "a message was delivered again after the subscription acknowledged it",
        "an ACK lost (sent as the connection dropped, grouped and not flushed), a broker "
        "restart before the ack was persisted, or batch-index acks not enabled on both sides",
        None,
    ),
    (
        _C.CONSUMER_REDELIVERY_STORM,
        _W,
        "a consumer asked for redelivery again and again, or messages kept coming back",
        "negative acks or an ack timeout firing while the application cannot process the "
        "message (poison message): set a dead letter policy, check processing errors",
        "redeliveries",
    ),
    (
        _C.CONSUMER_ACK_HOLE,
        _W,
        "the oldest unacknowledged delivery stayed unacked while later ones were acked",
        "a message the application never acknowledged pins the subscription's mark-delete "
        "position (backlog, redeliveries after restart): find what happened to that message",
        "ack_timeout",
    ),
    (
        _C.CONSUMER_DISCARDED_CORRUPT,
        _E,
        "a consumer discarded delivered messages as corrupt and acknowledged them (data loss)",
        "the ACK's validation_error names why: ChecksumMismatch, a broker or proxy that strips "
        "or alters the checksum, or a corrupting middlebox or NIC offload; DecompressionError "
        "or UncompressedSizeCorruption, a compression codec the client lacks or a corrupt "
        "payload; DecryptionError, the consumer lacks the encryption keys (crypto failure "
        "action DISCARD); "
        "BatchDeSerializeError, a batch the client cannot parse (a producer bug or altered bytes)",
        None,
    ),
    (
        _C.KEEPALIVE_UNANSWERED,
        _E,
        "a PING got no PONG within the keep-alive interval",
        "the peer is paused, overloaded or gone (half-open connection); if one side answers "
        "and the other never does, that side does not implement keep-alive",
        "keepalive",
    ),
    (
        _C.LOOKUP_REDIRECT_LOOP,
        _E,
        "LOOKUP redirected too often, back to the broker asked, or authoritative not followed",
        "brokers disagreeing about topic ownership, a proxy not setting authoritative, or "
        "advertised listeners pointing at the wrong broker",
        "max_redirects",
    ),
    (
        _C.REQUEST_UNANSWERED,
        _W,
        "a request_id was never answered before the connection closed",
        "the broker stalled or dropped the request; the client's operation timed out",
        "request_timeout",
    ),
    (
        _C.REQUEST_UNKNOWN_RESPONSE,
        _W,
        "a response named a request_id no request on the connection was waiting for",
        "a duplicate response or request ids mixed up (clients log 'unknown request id')",
        None,
    ),
    (
        _C.REQUEST_ID_REUSED,
        _W,
        "a request_id was reused while its first request was still pending, both awaiting "
        "the same kind of answer",
        "a client request id counter wrapped or shared between threads: answers get mixed up "
        "(two counters whose requests get answers of different types, as the C++ client's "
        "lookups and its other requests, are told apart and are no finding)",
        None,
    ),
    (
        _C.MESSAGE_OVERSIZE,
        _E,
        "a message larger than the broker's max_message_size (5 MiB when CONNECTED omits it)",
        "the broker rejects it: enable chunking, compress, or raise maxMessageSize on both sides",
        None,
    ),
    (
        _C.TOPIC_MIGRATED_NOT_FOLLOWED,
        _W,
        "after a topic migration or an assigned-broker close, the client did not move there",
        "an older client without topic migration (PIP-188) or assigned-broker (PIP-307) "
        "support, or a new broker URL the client cannot reach",
        "reconnect_wait",
    ),
    (
        _C.CHUNK_INCOMPLETE_EXPIRED,
        _W,
        "a chunked message's chunks stopped arriving for longer than the chunk expiry",
        "the producer failed mid-message or chunks were dropped (deduplication, resends); "
        "consumers discard it after the expiry and the backlog may stick",
        "chunk_expiry",
    ),
    (
        _C.CONNECTION_WRONG_PROTOCOL,
        _E,
        "TLS or HTTP instead of the Pulsar binary protocol on a broker port (sent by the "
        "client, or answered to it)",
        "the client uses the wrong port or scheme (pulsar:// vs pulsar+ssl://, the HTTP "
        "admin URL as service URL, an HTTP health check on the binary port); or the service "
        "URL reaches an HTTP proxy, ingress or load balancer, or a TLS listener, instead of "
        "the broker's plaintext port",
        None,
    ),
    (
        _C.CHECKSUM_MISMATCH_HOP,
        _E,
        "payload checksums failed on one hop (producer to broker, or broker to consumer)",
        "corruption in that hop (NIC offload, a proxy rewriting bytes, a client bug of the "
        "version named): compare with the other hop to locate it",
        None,
    ),
    (
        _C.CONSUMER_BUSY,
        _E,
        "SUBSCRIBE refused with ConsumerBusy: the subscription is held by another consumer",
        "an Exclusive or Failover subscription still held, often by a zombie consumer whose "
        "connection ended without CLOSE_CONSUMER (the broker has not noticed yet), or a "
        "second application instance subscribing with the same name and type; the summary "
        "names the holder when the capture shows it subscribe",
        None,
    ),
    (
        _C.AUTH_REFRESH_UNSUPPORTED,
        _E,
        "the broker ended connections of a client that cannot refresh its credentials, at "
        "their token's expiry or at a steady period, with no AUTH_CHALLENGE",
        "the client's CONNECT does not offer supports_auth_refresh, so when its token expires "
        "the broker closes the connection instead of sending AUTH_CHALLENGE (it reconnects "
        "with a fresh token, again and again at the token's lifetime): upgrade the client "
        "(older pulsar-rs and .NET clients do not offer it), or use tokens that outlive the "
        "connection",
        "auth_wait",
    ),
    (
        _C.AUTH_CHALLENGE_UNANSWERED,
        _E,
        "an AUTH_CHALLENGE got no AUTH_RESPONSE in time",
        "the client could not get a fresh credential (token provider failing, OAuth server "
        "unreachable) or ignores challenges; the broker closes the connection",
        "auth_wait",
    ),
    (
        _C.RECONNECT_RETRY_LOOP,
        _E,
        "the same PRODUCER or SUBSCRIBE refused with the same retriable error again and again, "
        "with no LOOKUP between",
        "a client pinned to one broker (an assigned broker URL kept after an unload or a "
        "TOPIC_MIGRATED, a broken lookup cache) instead of looking the topic up again; or a "
        "broker that stays not ready (a bundle being unloaded, metadata store trouble)",
        "retry_refusals",
    ),
    (
        _C.RECONNECT_STORM,
        _W,
        "one client opened and ended connections to one broker at a high rate",
        "a client reconnecting without backoff after errors or closes (broker restart, "
        "authentication failure, proxy resets): look at how each connection ended",
        "storm_per_minute",
    ),
    (
        _C.DISPATCH_STALLED_WITH_PERMITS,
        _E,
        "a consumer holding permits got no MESSAGE while the topic's producers were receipted",
        "the broker stopped dispatching to it: blocked on unacked messages "
        "(maxUnackedMessagesPerConsumer, an inflated unacked count), a Key_Shared key stuck, "
        "a chunked message whose first chunk was acked, or a dispatch rate limit; check the "
        "broker's consumer stats (blockedConsumerOnUnackedMsgs, unackedMessages)",
        "dispatch_wait",
    ),
    (
        _C.SCHEMA_INCOMPATIBLE,
        _E,
        "a producer, consumer or schema request was refused with IncompatibleSchema",
        "the schema offered breaks the topic's compatibility strategy (a changed field, "
        "another type, an AUTO_PRODUCE producer after an upgrade): compare the schema offered "
        "with the topic's (diagnose --values shows what differs)",
        None,
    ),
    (
        _C.TXN_COORDINATOR_NOT_FOUND,
        _E,
        "a transaction request was refused with TransactionCoordinatorNotFound",
        "transactions not enabled on the broker (transactionCoordinatorEnabled), the "
        "coordinator's topic not loaded, or a client that did not send TC_CLIENT_CONNECT first",
        None,
    ),
    (
        _C.TXN_INVALID_STATUS,
        _W,
        "a transaction request was refused: InvalidTxnStatus or TransactionNotFound",
        "the transaction had already ended, timed out or aborted (the coordinator aborts it "
        "after its timeout) before the client committed it or used it again",
        None,
    ),
    (
        _C.TXN_TIMEOUT,
        _W,
        "a transaction was not ended before its timeout",
        "the application took longer than the transaction timeout between NEW_TXN and commit, "
        "or never ended it: the coordinator aborts it and its messages are lost",
        "txn_timeout",
    ),
    (
        _C.FLOW_PERMIT_LEAK,
        _W,
        "a consumer returned fewer permits than the messages it was delivered and acknowledged",
        "the client dropped permits (one permit returned for a whole batch that failed its "
        "checksum or was discarded), so its window shrinks until delivery stalls",
        "leaked_permits",
    ),
    (
        _C.CONSUMER_STATS_MISMATCH,
        _I,
        "the broker's CONSUMER_STATS_RESPONSE disagrees with what the capture shows",
        "the broker counts permits or unacked messages the capture does not, beyond the "
        "frames in flight within one round trip (frames missing from the capture, acks of "
        "another consumer, a broker accounting bug): the broker's numbers are its view",
        None,
    ),
)

REGISTRY: dict[str, FindingKind] = {
    code: FindingKind(code, severity, title, hint, threshold)
    for code, severity, title, hint, threshold in _TABLE
}

#: Severities from the most to the least serious (how `diagnose` ranks findings).
SEVERITY_RANK: dict[str, int] = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}

# ----------------------------------------------------------------- evidence and sources
# What proves each code on the wire, and where the symptom comes from: docs/findings.md is
# generated from this block (scripts/gen_docs.py, `finding-reference`). A block of its own,
# apart from the registry's entries above.

#: The Pulsar binary protocol's specification (its sections are named in `sources`).
SPEC_URL = "https://pulsar.apache.org/docs/developing-binary-protocol/"


@dataclass(frozen=True, slots=True)
class FindingSources:
    """What proves a finding on the wire and where its symptom is documented."""

    evidence: str  # the frames (and their fields) that prove it
    #: "owner/repo#n" (a GitHub issue or pull request), "spec: SECTION" (a section of
    #: SPEC_URL) or a setting's name and default, in words
    sources: tuple[str, ...]


_S = FindingSources
#: Code -> its wire evidence and sources (issues from the research note on what users hit
#: in 2025-2026, the spec, the clients' settings): one entry per code of REGISTRY.
SOURCES: dict[str, FindingSources] = {
    _C.FLOW_NO_FLOW_AFTER_SUBSCRIBE: _S(
        "SUBSCRIBE answered SUCCESS, then no FLOW from the client for flow_wait seconds",
        ("spec: Flow control", "client setting receiverQueueSize (1000; 0 waits for receive())"),
    ),
    _C.FLOW_STARVED: _S(
        "a consumer's FLOW permits used up by the MESSAGE entries delivered (0 left), then no "
        "FLOW for flow_wait seconds",
        ("spec: Flow control", "client setting receiverQueueSize (1000)"),
    ),
    _C.FLOW_OVERSHOOT: _S(
        "more messages delivered to a consumer than its FLOW permits plus its largest batch, "
        "and more MESSAGE commands than its permits plus one",
        ("spec: Flow control",),
    ),
    _C.PRODUCER_SEND_TIMEOUT: _S(
        "a SEND with no SEND_RECEIPT or SEND_ERROR for send_timeout seconds, or still waiting "
        "when its producer or connection closed",
        (
            "apache/pulsar#18750",
            "apache/pulsar#23920",
            "spec: Producer",
            "client setting sendTimeoutMs (30000)",
        ),
    ),
    _C.PRODUCER_RECEIPT_OUT_OF_ORDER: _S(
        "a SEND_RECEIPT naming a sequence_id other than its producer's oldest SEND waiting",
        ("spec: Producer",),
    ),
    _C.PRODUCER_SEQUENCE_REGRESSION: _S(
        "a SEND whose sequence_id is not above the highest its producer sent (chunks of one "
        "message excepted), on one connection or after a reconnect",
        ("spec: Producer",),
    ),
    _C.PRODUCER_BUSY: _S(
        "PRODUCER answered ERROR ProducerBusy (16) or ProducerFenced (25), or PRODUCER sent "
        "again for an open producer_id without CLOSE_PRODUCER",
        ("apache/pulsar#5571", "PIP-68 (exclusive producer access modes)"),
    ),
    _C.CONSUMER_REDELIVERED_AFTER_ACK: _S(
        "a MESSAGE whose id an earlier ACK of the same subscription covered (individual or "
        "cumulative), on the connection where it was delivered again",
        ("apache/pulsar#23908", "apache/pulsar#22709"),
    ),
    _C.CONSUMER_REDELIVERY_STORM: _S(
        "REDELIVER_UNACKNOWLEDGED_MESSAGES bursts, or MESSAGE redelivery_count, reaching "
        "redeliveries for one consumer",
        ("spec: Consumer", "client settings ackTimeout, negativeAckRedeliveryDelay (60 s)"),
    ),
    _C.CONSUMER_ACK_HOLE: _S(
        "a consumer's oldest MESSAGE left unacknowledged for ack_timeout seconds while ACKs "
        "of later ones come",
        ("apache/pulsar#23908", "spec: Consumer"),
    ),
    _C.CONSUMER_DISCARDED_CORRUPT: _S(
        "an ACK with validation_error (ChecksumMismatch, DecompressionError, ...) naming "
        "MESSAGEs delivered to the consumer",
        ("apache/pulsar#22601", "spec: Consumer"),
    ),
    _C.KEEPALIVE_UNANSWERED: _S(
        "a PING with no PONG from the other side within keepalive seconds",
        (
            "apache/pulsar#18750",
            "apache/pulsar#23920",
            "spec: Keep Alive",
            "client setting keepAliveIntervalSeconds (30)",
        ),
    ),
    _C.LOOKUP_REDIRECT_LOOP: _S(
        "LOOKUP_RESPONSE Redirect answers for one topic: more than max_redirects in a row, "
        "back to the broker asked, the same redirect twice in one chain, or authoritative "
        "not followed",
        (
            "apache/pulsar-client-cpp#405",
            "spec: Topic lookup",
            "client setting maxLookupRedirects (20)",
        ),
    ),
    _C.REQUEST_UNANSWERED: _S(
        "a request with a request_id and no answer before its connection ended (at the "
        "capture's end: older than request_timeout)",
        ("apache/pulsar-client-go#779", "client setting operationTimeoutSeconds (30)"),
    ),
    _C.REQUEST_UNKNOWN_RESPONSE: _S(
        "a response whose request_id no request of the connection waits for",
        ("spec: Framing",),
    ),
    _C.REQUEST_ID_REUSED: _S(
        "a request sent with the request_id of one of the same side still waiting, both "
        "answered by the same type (their own response, or SUCCESS)",
        ("spec: Framing",),
    ),
    _C.MESSAGE_OVERSIZE: _S(
        "a SEND or MESSAGE frame larger than CONNECTED.max_message_size (5 MiB when absent)",
        ("spec: Framing", "broker setting maxMessageSize (5 MiB)"),
    ),
    _C.TOPIC_MIGRATED_NOT_FOLLOWED: _S(
        "TOPIC_MIGRATED, or CLOSE_PRODUCER / CLOSE_CONSUMER naming assignedBrokerServiceUrl, "
        "then no PRODUCER / SUBSCRIBE at that broker within reconnect_wait seconds",
        ("apache/pulsar#25997", "PIP-188 (topic migration)", "PIP-307 (assigned broker)"),
    ),
    _C.CHUNK_INCOMPLETE_EXPIRED: _S(
        "chunks of one uuid stopping before num_chunks_from_msg for chunk_expiry seconds",
        (
            "apache/pulsar-client-go#1446",
            "apache/pulsar-client-go#1397",
            "client setting expireTimeOfIncompleteChunkedMessage (60000 ms)",
        ),
    ),
    _C.CONNECTION_WRONG_PROTOCOL: _S(
        "a TLS ClientHello or HTTP on a plaintext broker port (the client's stream), or HTTP "
        "or TLS answering a plaintext Pulsar client (the server's stream)",
        ("apache/pulsar#14544", "apache/pulsar-helm-chart#528", "spec: Framing"),
    ),
    _C.CHECKSUM_MISMATCH_HOP: _S(
        "SEND or MESSAGE payloads whose CRC32C (over metadata and payload) fails, counted per hop",
        ("apache/pulsar#22601", "spec: Framing"),
    ),
    _C.CONSUMER_BUSY: _S(
        "SUBSCRIBE answered ERROR ConsumerBusy (5) again and again; the holder's connection "
        "ended without CLOSE_CONSUMER when the capture shows it",
        ("apache/pulsar#13920", "apache/pulsar#20621", "apache/pulsar-client-go#1290"),
    ),
    _C.AUTH_REFRESH_UNSUPPORTED: _S(
        "CONNECT without FeatureFlags.supports_auth_refresh, with an expiring credential; "
        "the broker closes the connections at a steady period with no AUTH_CHALLENGE",
        (
            "streamnative/pulsar-rs#423",
            "streamnative/pulsar-rs#429",
            "fsprojects/pulsar-client-dotnet#362",
        ),
    ),
    _C.AUTH_CHALLENGE_UNANSWERED: _S(
        "an AUTH_CHALLENGE with no AUTH_RESPONSE within auth_wait seconds, then the close",
        (
            "streamnative/pulsar-rs#423",
            "fsprojects/pulsar-client-dotnet#362",
            "broker setting authenticationRefreshCheckSeconds (60)",
        ),
    ),
    _C.RECONNECT_RETRY_LOOP: _S(
        "the same PRODUCER or SUBSCRIBE answered by the same retriable ERROR "
        "(ServiceNotReady (6), TooManyRequests (14), ...) retry_refusals times with no "
        "LOOKUP between (after a CLOSE_* naming an assigned broker, often)",
        (
            "apache/pulsar#25997",
            "apache/pulsar#26009",
            "apache/pulsar-client-cpp#405",
            "apache/pulsar-client-go#698",
        ),
    ),
    _C.RECONNECT_STORM: _S(
        "one client's connections to one broker opened and ended at storm_per_minute a "
        "minute or more, with the ERRORs or closes that ended them",
        ("apache/pulsar#5264", "apache/pulsar#2876", "apache/pulsar-client-go#698"),
    ),
    _C.DISPATCH_STALLED_WITH_PERMITS: _S(
        "a consumer holding FLOW permits gets no MESSAGE for dispatch_wait seconds while "
        "SEND_RECEIPTs of its topic advance; CONSUMER_STATS_RESPONSE "
        "blockedConsumerOnUnackedMsgs when polled",
        ("apache/pulsar#26395", "apache/pulsar#25581", "apache/pulsar#23999"),
    ),
    _C.SCHEMA_INCOMPATIBLE: _S(
        "PRODUCER or SUBSCRIBE answered ERROR IncompatibleSchema (18), or "
        "GET_OR_CREATE_SCHEMA_RESPONSE with that error_code; the schema offered "
        "(PRODUCER.schema, GET_OR_CREATE_SCHEMA.schema) against the topic's "
        "(PRODUCER_SUCCESS.schema_version after an accepted schema, GET_SCHEMA_RESPONSE)",
        ("apache/pulsar#25437", "apache/pulsar#23674", "spec: Producer"),
    ),
    _C.TXN_COORDINATOR_NOT_FOUND: _S(
        "a transaction response (NEW_TXN_RESPONSE, ...) with error "
        "TransactionCoordinatorNotFound (20), with or without a TC_CLIENT_CONNECT_REQUEST "
        "before it",
        ("apache/pulsar#21533", "apache/pulsar#20851"),
    ),
    _C.TXN_INVALID_STATUS: _S(
        "END_TXN or ADD_PARTITION_TO_TXN / ADD_SUBSCRIPTION_TO_TXN answered InvalidTxnStatus "
        "(21) or TransactionNotFound (24)",
        ("apache/pulsar#19200", "apache/pulsar#21533"),
    ),
    _C.TXN_TIMEOUT: _S(
        "NEW_TXN_RESPONSE opening a transaction and no END_TXN for it before its "
        "txn_ttl_millis (else txn_timeout) passed",
        ("apache/pulsar#19200", "client setting transactionTimeout (60 s)"),
    ),
    _C.FLOW_PERMIT_LEAK: _S(
        "FLOW permits returned over time falling short of the messages delivered and "
        "acknowledged (a MESSAGE batch of P > 1 failing its CRC32C, one permit returned)",
        ("apache/pulsar#26336",),
    ),
    _C.CONSUMER_STATS_MISMATCH: _S(
        "CONSUMER_STATS_RESPONSE availablePermits, unackedMessages, msgBacklog against the "
        "capture's permits granted minus delivered and deliveries minus acks",
        ("apache/pulsar#25581", "PIP-491 (message_permits on MESSAGE)"),
    ),
}
assert set(SOURCES) == set(REGISTRY), sorted(set(SOURCES) ^ set(REGISTRY))
