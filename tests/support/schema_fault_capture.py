"""A crafted capture whose schemas are faulty: the schema.* anomalies' known truth.

Input: a path. Output: the pcap, and `EXPECTED` (code name, topic, schema label, in capture
order), `DROPPED` (the one schema.dropped detail) and the topics.
The producer's connection creates producers whose schemas, as the broker versions them, are:
an AVRO definition that is not JSON (v5), a KEY_VALUE whose data's first length runs past its
end (v0), a PROTOBUF_NATIVE whose fileDescriptorSet is not base64 (v2), a JSON definition of
MAX_DEFINITION_BYTES + 1 bytes (v1), a good AVRO record (v7: no anomaly); it sends two messages
with the bad AVRO one. Then GET_OR_CREATE_SCHEMA teaches MAX_SCHEMAS_PER_TOPIC + 1 versions
(v0 first) of one STRING schema on another topic: v0 is forgotten. A second connection asks
GET_SCHEMA for the bad AVRO v5 and is answered with it (already reported: no second row).
Rule: the faults are written here as bytes (what each parser must refuse follows from the
format's own rules), never taken from the dissector's output.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from dissector.pulsar.wire import MessageMetadata
from dissector.values.model import MAX_DEFINITION_BYTES
from dissector.values.schemas import MAX_SCHEMAS_PER_TOPIC
from tests.support.crafted import B2C, C2B, Msg, msg, write_pcap
from tests.support.schema_wire import WIRE_NUMBERS, kv_properties, version
from tests.support.value_capture import connected

NS = "persistent://public/default/"
AVRO_TOPIC = NS + "bad-avro"
KV_TOPIC = NS + "bad-kv"
PB_TOPIC = NS + "bad-pb"
BIG_TOPIC = NS + "big-json"
GOOD_TOPIC = NS + "good-avro"
EVOLVING_TOPIC = NS + "evolving"

BAD_AVRO = b'{"type": "record", "name": "Broken", "fields": ['  # JSON cut short
BAD_KV = struct.pack(">i", 9) + b"ab"  # a 9-byte key schema with 2 bytes left
BAD_PB = json.dumps(
    {
        "fileDescriptorSet": "%%% not base64 %%%",
        "rootMessageTypeName": "M",
        "rootFileDescriptorName": "m.proto",
    }
).encode()
BIG_JSON = b" " * (MAX_DEFINITION_BYTES + 1)
GOOD_AVRO = json.dumps(
    {"type": "record", "name": "Ok", "fields": [{"name": "a", "type": "long"}]}
).encode()

#: (AnomalyCode name, topic, schema label) of each row, in capture order
EXPECTED = [
    ("SCHEMA_INVALID", AVRO_TOPIC, "AVRO v5"),
    ("SCHEMA_INVALID", KV_TOPIC, "KEY_VALUE v0"),
    ("SCHEMA_INVALID", PB_TOPIC, "PROTOBUF_NATIVE v2"),
    ("SCHEMA_TOO_LARGE", BIG_TOPIC, "JSON v1"),
]
DROPPED = f"MAX_SCHEMAS_PER_TOPIC: topic {EVOLVING_TOPIC}: STRING v0 forgotten"


def _schema(type_name: str, data: bytes, props: dict[str, str] | None = None) -> Any:
    return {
        "name": "s",
        "type": WIRE_NUMBERS[type_name],
        "schema_data": data,
        "properties": [{"key": k, "value": v} for k, v in (props or {}).items()],
    }


def _producer(pid: int, topic: str, schema: Any, ver: int) -> list[Msg]:
    return [
        msg(C2B, "PRODUCER", topic=topic, producer_id=pid, request_id=pid, schema=schema),
        msg(B2C, "PRODUCER_SUCCESS", request_id=pid, producer_name=f"p{pid}",
            schema_version=version(ver)),
    ]  # fmt: skip


def write_schema_fault_capture(path: Path) -> Path:
    """The capture of the module docstring."""
    prod = connected(40011)
    prod.exchange(_producer(1, AVRO_TOPIC, _schema("AVRO", BAD_AVRO), 5))
    for seq in range(2):
        meta = MessageMetadata(
            producer_name="p1", sequence_id=seq, publish_time=1, schema_version=version(5)
        )
        prod.exchange([msg(C2B, "SEND", producer_id=1, sequence_id=seq, payload=b"\x02",
                           metadata=meta)])  # fmt: skip
    kv = _schema("KEY_VALUE", BAD_KV, kv_properties("STRING", "STRING", "INLINE"))
    prod.exchange(_producer(2, KV_TOPIC, kv, 0))
    prod.exchange(_producer(3, PB_TOPIC, _schema("PROTOBUF_NATIVE", BAD_PB), 2))
    big = _producer(4, BIG_TOPIC, _schema("JSON", BIG_JSON), 1)
    prod.frames([big[0]], each=60_000)  # a frame of 1 MiB in segments an IP packet holds
    prod.exchange(big[1:])
    prod.exchange(_producer(5, GOOD_TOPIC, _schema("AVRO", GOOD_AVRO), 7))
    for n in range(MAX_SCHEMAS_PER_TOPIC + 1):
        rid = 100 + n
        prod.exchange(
            [
                msg(C2B, "GET_OR_CREATE_SCHEMA", request_id=rid, topic=EVOLVING_TOPIC,
                    schema=_schema("STRING", b"")),
                msg(B2C, "GET_OR_CREATE_SCHEMA_RESPONSE", request_id=rid,
                    schema_version=version(n)),
            ]
        )  # fmt: skip
    prod.close()
    cons = connected(40012)
    cons.exchange(
        [
            msg(C2B, "GET_SCHEMA", request_id=1, topic=AVRO_TOPIC, schema_version=version(5)),
            msg(B2C, "GET_SCHEMA_RESPONSE", request_id=1, schema=_schema("AVRO", BAD_AVRO),
                schema_version=version(5)),
        ]
    )  # fmt: skip
    cons.close()
    return write_pcap(path, prod.segs + cons.segs).path
