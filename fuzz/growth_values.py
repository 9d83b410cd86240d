"""Growth families of message values (issue 42 items 3, 4, 5): inputs an attacker grows
through the payloads and schemas that `--values` decodes.

Input: a size n and a folder.
Output: `FAMILIES` (fuzz.growth_model.Family), each making one producer connection that
declares an AVRO schema (PRODUCER, PRODUCER_SUCCESS version 0) and SENDs payloads, read
with values into the messages table:
- avro_null_array: n SENDs of `array<null>`, each claiming 1,000 x n nulls in a few bytes
  (bytes grow as n, the items claimed as n squared: work must follow the bytes);
- avro_decimal: one SEND of a `bytes` decimal (precision 10) of n bytes (int and Decimal
  conversion is quadratic in the digits);
- wide_schemas: n topics, each with its own Avro schema of 18,000 fields (just under
  MAX_DEFINITION_BYTES), each used by one SEND, read as a user does (the CLI's streamed
  Parquet of the messages table): peak memory must stay bounded (300 MiB);
- schema_thrash: THRASH_SCHEMAS topics, each with its own wide Avro schema (a record whose
  one field is null or a record of 18,000 fields), then n SENDs of 1 byte (null) going
  round the topics: more wide schemas than stay parsed, so each would be parsed again per
  message (~1 MB of parsing per byte of payload): the work must follow the bytes.
Rule: every payload and schema is written here from the Avro spec (zigzag varints), never by
the dissector's decoders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from fuzz.growth_model import Family, Input
from fuzz.packets import B2C, C2B, Conn, Pkt, pcap, stamp

AVRO = 4  # the wire's Schema.Type AVRO
VALUES = {"values": True}
MESSAGES_PARQUET = ["--table", "messages", "--format", "parquet"]


def zigzag(n: int) -> bytes:
    """Avro's long: zigzag, then base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _frame(name: str, **fields: Any) -> bytes:
    return encode_frame(command(name, **fields))


def _producer(conn: Conn, topic: str, producer_id: int, schema: dict[str, Any]) -> list[Pkt]:
    data = json.dumps(schema).encode()
    wire = {"name": "s", "type": AVRO, "schema_data": data}
    return conn.send(
        C2B,
        _frame(
            "PRODUCER", topic=topic, producer_id=producer_id, request_id=producer_id, schema=wire
        ),
    ) + conn.send(
        B2C,
        _frame(
            "PRODUCER_SUCCESS",
            request_id=producer_id,
            producer_name=f"p{producer_id}",
            schema_version=(0).to_bytes(8, "big"),
        ),
    )


def _send(conn: Conn, producer_id: int, seq: int, payload: bytes) -> list[Pkt]:
    meta = MessageMetadata(
        producer_name=f"p{producer_id}",
        sequence_id=seq,
        publish_time=1_700_000_000_000,
        schema_version=(0).to_bytes(8, "big"),
    )
    cmd = command("SEND", producer_id=producer_id, sequence_id=seq)
    return conn.send(C2B, encode_frame(cmd, metadata=meta, payload=payload))


def _capture(folder: Path, name: str, pkts: list[Pkt], streamed: bool = False) -> Input:
    path = folder / f"{name}.pcap"
    path.write_bytes(pcap(stamp(pkts)))
    if streamed:  # what a user runs: the CLI, its Parquet streamed to a file
        out = str(folder / f"{name}.parquet")
        return Input([str(path)], argv=["read", "--values", *MESSAGES_PARQUET, "-o", out])
    return Input([str(path)], options=dict(VALUES), tables=["messages"])


def _connection(body: list[Pkt], conn: Conn) -> list[Pkt]:
    return [*body, *conn.close()]  # body starts with conn.handshake()


def null_array_payload(n: int) -> bytes:
    """1,000 x n nulls claimed in one block (a few bytes)."""
    return zigzag(1000 * n) + b"\x00"


def make_null_array(n: int, folder: Path) -> Input:
    conn = Conn()
    body = _producer(
        conn, "persistent://public/default/nulls", 1, {"type": "array", "items": "null"}
    )
    for seq in range(n):
        body += _send(conn, 1, seq, null_array_payload(n))
    return _capture(folder, f"avro_null_array{n}", _connection(body, conn))


DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}


def decimal_payload(n: int) -> bytes:
    return zigzag(n) + b"\x11" * n  # n bytes of unscaled value


def make_decimal(n: int, folder: Path) -> Input:
    conn = Conn()
    body = conn.handshake()
    body += _producer(conn, "persistent://public/default/decimals", 1, DECIMAL)
    body += _send(conn, 1, 0, decimal_payload(n))
    return _capture(folder, f"avro_decimal{n}", _connection(body, conn))


WIDE_FIELDS = 18_000  # about 1 MB of definition: just under MAX_DEFINITION_BYTES


def wide_schema(k: int) -> dict[str, Any]:
    fields = [{"name": f"f{k:04d}_{i:05d}", "type": ["null", "string"]} for i in range(WIDE_FIELDS)]
    return {"type": "record", "name": f"W{k}", "fields": fields}


def make_wide_schemas(n: int, folder: Path) -> Input:
    conn = Conn()
    body = conn.handshake()
    for k in range(n):
        body += _producer(conn, f"persistent://public/default/wide-{k}", k + 1, wide_schema(k))
        body += _send(conn, k + 1, 0, b"\x00" * WIDE_FIELDS)  # every field null
    return _capture(folder, f"wide_schemas{n}", _connection(body, conn), streamed=True)


#: Wide schemas the thrash goes round: more than MAX_PARSED_BYTES keeps parsed (three).
THRASH_SCHEMAS = 5


def thrash_schema(k: int) -> dict[str, Any]:
    """A record of one field, null or a record of WIDE_FIELDS fields: ~1 MB to parse, and
    a 1-byte payload (union branch 0, null) gives {"a":null}."""
    inner = wide_schema(k) | {"name": f"Inner{k}"}
    return {"type": "record", "name": f"T{k}", "fields": [{"name": "a", "type": ["null", inner]}]}


def make_schema_thrash(n: int, folder: Path) -> Input:
    conn = Conn()
    body = conn.handshake()
    for k in range(THRASH_SCHEMAS):
        body += _producer(conn, f"persistent://public/default/thrash-{k}", k + 1, thrash_schema(k))
    for seq in range(n):
        body += _send(conn, seq % THRASH_SCHEMAS + 1, seq, zigzag(0))
    return _capture(folder, f"schema_thrash{n}", _connection(body, conn), streamed=True)


FAMILIES: tuple[Family, ...] = (
    Family("avro_null_array", "42.3", make_null_array, 40, "messages of 1,000n nulls"),
    Family("avro_decimal", "42.4", make_decimal, 40_000, "decimal bytes"),
    Family("wide_schemas", "42.5", make_wide_schemas, 10, "wide schemas", max_peak_mib=300),
    Family("schema_thrash", "42.5", make_schema_thrash, 200, "messages round 5 wide schemas"),
)
