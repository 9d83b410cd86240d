"""A crafted capture whose messages carry schemas: a producer's connection and a consumer's.

Input: a path. Output: the pcap, and `ORDERS` / `PRICE` / `KV` (what each topic's messages
hold, as the data a client gave). The producer's connection declares a JSON schema (version
3, taught by PRODUCER_SUCCESS), a KeyValue<STRING, INT32> schema (INLINE) and an INT64 schema,
and sends a batch of two orders, a KeyValue and a price; the consumer's connection (another
TCP connection) subscribes without a schema and gets the orders and the KeyValue: only the
producer's connection taught their versions.
Rule: every payload is encoded here from the data, as Pulsar's clients encode it (JSON
text, big-endian integers, KeyValue INLINE halves), never by the dissector.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from dissector.pulsar.wire import MessageMetadata, SingleMessageMetadata
from tests.support.crafted import B2C, C2B, Conn, Session, msg, write_pcap
from tests.support.schema_wire import WIRE_NUMBERS, kv_halves, kv_properties, version

ORDERS_TOPIC = "persistent://public/default/orders"
PRICES_TOPIC = "persistent://public/default/prices"
KV_TOPIC = "persistent://public/default/kv"
#: distinctive field values: a scan for them finds any leak of a payload
CUSTOMER = "ZQXJ-customer-7731"
CARD = "4929-1111-2222-3333"
ORDERS = [
    {"customer": CUSTOMER, "amount": 4242.5, "card": {"number": CARD, "cvv": "912"}},
    {"customer": "small-buyer-QW", "amount": 12, "card": {"number": "5555-0000", "cvv": "1"}},
]
PRICE = 987654321987
KV: dict[str, Any] = {"key": "kv-key-PLMN", "value": 77}
ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "card", "type": {"type": "record", "name": "Card", "fields": []}},
    ],
}


def _schema(type_name: str, data: bytes = b"", props: dict[str, str] | None = None) -> Any:
    return {
        "name": type_name.lower(),
        "type": WIRE_NUMBERS[type_name],
        "schema_data": data,
        "properties": [{"key": k, "value": v} for k, v in (props or {}).items()],
    }


def _meta(seq: int, ver: int, **extra: Any) -> MessageMetadata:
    return MessageMetadata(
        producer_name="orders-producer",
        sequence_id=seq,
        publish_time=1_700_000_000_000,
        schema_version=version(ver),
        **extra,
    )


def batch(payloads: list[bytes]) -> bytes:
    """A batch payload as Pulsar writes it: per entry [size][SingleMessageMetadata][data]."""
    out = b""
    for i, data in enumerate(payloads):
        single = SingleMessageMetadata(payload_size=len(data), sequence_id=i).SerializeToString()
        out += struct.pack(">I", len(single)) + single + data
    return out


def connected(client_port: int) -> Session:
    """A connection from `client_port`: its handshake, CONNECT and CONNECTED."""
    session = Session(Conn(client_port=client_port))
    session.handshake()
    session.exchange(
        [
            msg(C2B, "CONNECT", client_version="crafted", protocol_version=21),
            msg(B2C, "CONNECTED", server_version="crafted", protocol_version=21),
        ]
    )
    return session


def write_value_capture(path: Path) -> Path:
    """The capture of the module docstring."""
    orders = batch([json.dumps(o).encode() for o in ORDERS])
    kv_schema = kv_halves(b"", b"")
    kv_payload = kv_halves(KV["key"].encode(), struct.pack(">i", KV["value"]))
    price = struct.pack(">q", PRICE)
    batch_meta = _meta(0, 3, num_messages_in_batch=len(ORDERS))
    mid = {"ledgerId": 5, "entryId": 1}
    prod = connected(40001)
    prod.exchange(
        [
            msg(
                C2B,
                "PRODUCER",
                topic=ORDERS_TOPIC,
                producer_id=1,
                request_id=1,
                schema=_schema("JSON", json.dumps(ORDER_SCHEMA).encode()),
            ),
            msg(
                B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p", schema_version=version(3)
            ),
            msg(
                C2B,
                "PRODUCER",
                topic=KV_TOPIC,
                producer_id=2,
                request_id=2,
                schema=_schema("KEY_VALUE", kv_schema, kv_properties("STRING", "INT32", "INLINE")),
            ),
            msg(
                B2C, "PRODUCER_SUCCESS", request_id=2, producer_name="q", schema_version=version(0)
            ),
            msg(
                C2B,
                "PRODUCER",
                topic=PRICES_TOPIC,
                producer_id=3,
                request_id=3,
                schema=_schema("INT64"),
            ),
            msg(
                B2C, "PRODUCER_SUCCESS", request_id=3, producer_name="r", schema_version=version(1)
            ),
            msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=orders, metadata=batch_meta),
            msg(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=0, message_id=mid),
            msg(
                C2B, "SEND", producer_id=2, sequence_id=0, payload=kv_payload, metadata=_meta(0, 0)
            ),
            msg(C2B, "SEND", producer_id=3, sequence_id=0, payload=price, metadata=_meta(0, 1)),
        ]
    )
    prod.close()
    cons = connected(40002)
    cons.exchange(
        [
            msg(
                C2B,
                "SUBSCRIBE",
                topic=ORDERS_TOPIC,
                subscription="s",
                consumer_id=1,
                request_id=1,
                subType=0,
            ),
            msg(B2C, "SUCCESS", request_id=1),
            msg(
                C2B,
                "SUBSCRIBE",
                topic=KV_TOPIC,
                subscription="s",
                consumer_id=2,
                request_id=2,
                subType=0,
            ),
            msg(B2C, "SUCCESS", request_id=2),
            msg(
                B2C,
                "MESSAGE",
                consumer_id=1,
                message_id=mid,
                payload=orders,
                metadata=batch_meta,
                checksum=False,
            ),
            msg(
                B2C,
                "MESSAGE",
                consumer_id=2,
                message_id={"ledgerId": 6, "entryId": 0},
                payload=kv_payload,
                metadata=_meta(0, 0),
                checksum=False,
            ),
        ]
    )
    cons.close()
    return write_pcap(path, prod.segs + cons.segs).path
