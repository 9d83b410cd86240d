"""The journeys table: each message's way from its producer to each subscription, declared
once.

Input: nothing (the declaration below). Output: `JOURNEYS` (row function journeys_row(j):
a Journey of dissector.journeys), a `Table` of dissector.tables.columns.
Rule: as every table: each column names the expression that gives its value; latencies
are differences of the hops' capture times, null when either hop was not seen; protocol
uint64 ids are stored as int64 (columns.i64).
"""

from __future__ import annotations

from dissector.events import TraceFormat
from dissector.tables.columns import BOOL, I32, I64, STR, TS, Table, col, one_of, value_columns


def _span(start: int | None, end: int | None) -> int | None:
    """end - start in µs, None when either is unknown."""
    return None if start is None or end is None else end - start


JOURNEYS = Table(
    "journeys",
    "j",
    [
        col("ts", TS, "j.ts", "the first hop seen: send, else receipt, delivery or ack", False),
        col(
            "conn_id",
            I64,
            "j.conn_id",
            "connection id, joins every table: the producer's, else the consumer's",
            False,
        ),
        col("topic", STR, "j.topic", "topic (a partition's own name when partitioned)"),
        col("ledger_id", I64, "_opt64(j.ledger_id)", "message id: ledger"),
        col("entry_id", I64, "_opt64(j.entry_id)", "message id: entry"),
        col("partition", I32, "j.partition", "message id: partition (-1: not partitioned)"),
        col("batch_index", I32, "j.batch_index", "message id: index in its batch, null if none"),
        col("batch_size", I32, "j.batch_size", "messages in its batch, null when not batched"),
        col("chunks", I32, "j.chunks", "chunks of a chunked message, null when not chunked"),
        col("producer_name", STR, "j.producer_name", "producer name (message metadata)"),
        col("sequence_id", I64, "_opt64(j.sequence_id)", "the producer's sequence id of it"),
        col("publish_time", TS, "_ms(j.publish_time)", "publish time (the producer's clock)"),
        col("producer_conn_id", I64, "j.producer_conn_id", "connection of its SEND/receipt"),
        col("producer_id", I64, "_opt64(j.producer_id)", "that connection's producer id"),
        col("send_ts", TS, "j.send_ts", "time of the SEND (the first chunk's)"),
        col("send_packet", I64, "j.send_packet", "capture packet number completing the SEND"),
        col("receipt_ts", TS, "j.receipt_ts", "time of the SEND_RECEIPT (the last chunk's)"),
        col("receipt_packet", I64, "j.receipt_packet", "packet number of the SEND_RECEIPT"),
        col(
            "persist_us",
            I64,
            "_span(j.send_ts, j.receipt_ts)",
            "receipt_ts - send_ts in µs: the broker stored it",
        ),
        col("error", STR, "j.error", "SEND_ERROR's ServerError name when the broker refused it"),
        col(
            "subscription",
            STR,
            "j.subscription",
            "subscription it was delivered to (null: not delivered, or SUBSCRIBE not captured)",
        ),
        col("sub_type", STR, "j.sub_type", "that subscription's type (Exclusive, Shared, ...)"),
        col(
            "consumer_conn_id",
            I64,
            "j.consumer_conn_id",
            "connection of its first delivery to the subscription",
        ),
        col("consumer_id", I64, "_opt64(j.consumer_id)", "that connection's consumer id"),
        col("consumer_name", STR, "j.consumer_name", "that consumer's name (SUBSCRIBE)"),
        col(
            "delivered_ts",
            TS,
            "j.delivered_ts",
            "time of its first MESSAGE to the subscription (the last chunk's)",
        ),
        col("delivered_packet", I64, "j.delivered_packet", "packet number of that MESSAGE"),
        col(
            "dispatch_us",
            I64,
            "_span(j.receipt_ts, j.delivered_ts)",
            "delivered_ts - receipt_ts in µs (may be < 0: brokers dispatch as they store)",
        ),
        col("acked_ts", TS, "j.acked_ts", "time of its first ACK in the subscription"),
        col("acked_packet", I64, "j.acked_packet", "packet number of that ACK"),
        col(
            "consume_us",
            I64,
            "_span(j.delivered_ts, j.acked_ts)",
            "acked_ts - delivered_ts in µs",
        ),
        col(
            "end_to_end_us",
            I64,
            "_span(j.send_ts, j.acked_ts)",
            "acked_ts - send_ts in µs: from the producer's SEND to the subscription's ACK",
        ),
        col(
            "deliveries",
            I64,
            "j.deliveries",
            "MESSAGE frames seen delivering it to the subscription (0: only its ACK seen)",
            False,
        ),
        col(
            "redeliveries",
            I64,
            "j.redeliveries",
            "deliveries after the first: seen, or the broker's redelivery_count if more",
            False,
        ),
        col(
            "broker_entry_ts",
            TS,
            "_ms(j.broker_entry_ts)",
            "broker entry metadata's timestamp (when the broker sends it)",
        ),
        col(
            "broker_skew_us",
            I64,
            "_span(_ms(j.publish_time), _ms(j.broker_entry_ts))",
            "broker_entry_ts - publish_time in µs (the broker's clock against the producer's)",
        ),
        col(
            "trace_id",
            STR,
            "j.trace_id",
            "trace id from the message's properties (a batch entry's own), as the messages table's",
        ),
        col("span_id", STR, "j.span_id", "the producer's span id from the message's properties"),
        col(
            "trace_format",
            STR,
            "j.trace_format",
            f"{one_of(TraceFormat)}: the property it came from",
        ),
        col(
            "evicted",
            BOOL,
            "j.evicted",
            "made before the capture's end (the joiner's bound): later hops make rows of their own",
            False,
        ),
        *value_columns("j"),
    ],
    env={"_span": _span},
)
