"""The official client (pulsar-client) against pulsar-lite on loopback, under tcpdump: its
producers send with its Avro, JSON, String and ProtobufNative schemas (one batched), its
consumers, on another connection, read them back; every decoded value equals what the
client was given and what its consumer got, compared as data.

What these peers cannot show (docs/values.md says it; crafted captures cover them):
- KeyValue and primitive schemas: this client has no KeyValue schema class (its SchemaInfo
  takes no properties, and its C++ core refuses a KEY_VALUE schema without
  `kv.encoding.type`), and its C++ core sends no schema for INT8..DOUBLE (their PRODUCER
  carries none: such messages are plain bytes on the wire, `BYTES (not declared)`).
- Versions: pulsar-lite answers PRODUCER with an empty schema_version and does not answer
  GET_SCHEMA, so every value here is decoded by its producer's or consumer's declared
  schema (`AVRO (declared)`), not by a version.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pulsar.schema as ps
from google.protobuf import json_format

from dissector.read import read_capture
from tests.support.recorded import QUIET, recorded, topic_name
from tests.values.test_official_client import Line
from tests.values.test_structs import order_classes


class Order(ps.Record):  # type: ignore[misc]
    id = ps.Long()
    paid = ps.Boolean()
    total = ps.Double()
    note = ps.String()
    tags = ps.Array(ps.String())
    attrs = ps.Map(ps.String())
    line = Line()


def _order(i: int) -> Order:
    return Order(
        id=2**40 + i,
        paid=i % 2 == 0,
        total=12.5 * i,
        note=f"é-{i}",
        tags=["a", str(i)],
        attrs={"k": str(i)},
        line=Line(sku=f"s{i}", qty=i),
    )


def _data(value: Any) -> Any:
    """A record the client made or got, as plain data (its private fields left out)."""
    if isinstance(value, ps.Record):
        return {k: _data(v) for k, v in vars(value).items() if not k.startswith("_")}
    if isinstance(value, list):
        return [_data(v) for v in value]
    if isinstance(value, dict):
        return {k: _data(v) for k, v in value.items()}
    return value


def _client(url: str) -> Any:
    import pulsar

    # GET_SCHEMA is never answered by pulsar-lite: the client waits this long once
    return pulsar.Client(url, operation_timeout_seconds=3, logger=QUIET)


def _proto_data(msg: Any) -> Any:
    """protobuf's JSON mapping, proto field names, defaults included (docs/values.md)."""
    return json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def test_values_are_what_the_official_client_sent_and_received(tmp_path: Path) -> None:
    logging.getLogger("pulsar").setLevel(logging.ERROR)
    proto_cls, _ = order_classes()
    protos = []
    for i in range(2):
        p = proto_cls(id=100 + i, customer=f"c{i}")
        p.lines.add(sku=f"x{i}", qty=i + 1)
        protos.append(p)
    cases: dict[str, tuple[Any, list[Any], bool]] = {
        "avro": (ps.AvroSchema(Order), [_order(i) for i in range(3)], False),
        "avro-batched": (ps.AvroSchema(Order), [_order(i) for i in range(3, 6)], True),
        "json": (ps.JsonSchema(Order), [_order(i) for i in range(2)], False),
        "string": (ps.StringSchema(), ["hé", "€uro", ""], False),
        "protobuf-native": (ps.ProtobufNativeSchema(proto_cls), protos, False),
    }
    topics = {name: topic_name(f"values-{name}") for name in cases}
    received: dict[str, list[Any]] = {}
    cap = tmp_path / "values.pcap"
    with recorded(cap) as lite:
        producing, consuming = _client(lite.url), _client(lite.url)  # two connections
        try:
            for name, (schema, values, batched) in cases.items():
                consumer = consuming.subscribe(topics[name], "s", schema=schema)
                producer = producing.create_producer(
                    topics[name],
                    schema=schema,
                    batching_enabled=batched,
                    batching_max_publish_delay_ms=50,
                )
                if batched:
                    for v in values:
                        producer.send_async(v, None)
                    producer.flush()
                else:
                    for v in values:
                        producer.send(v)
                got = []
                for _ in values:
                    m = consumer.receive(timeout_millis=10_000)
                    got.append(m.value())
                    consumer.acknowledge(m)
                received[name] = got
                producer.close()
                consumer.close()
        finally:
            producing.close()
            consuming.close()

    def expected(name: str, values: list[Any]) -> list[Any]:
        if name == "protobuf-native":
            return [_proto_data(v) for v in values]
        return [_data(v) for v in values]

    rows = read_capture(cap, values=True, tables=["messages", "journeys"])
    messages = rows.arrow["messages"].to_pylist()
    for name, (_, sent, batched) in cases.items():
        mine = [m for m in messages if m["topic"] == topics[name]]
        for kind, truth in (("produced", sent), ("delivered", received[name])):
            side = [m for m in mine if m["kind"] == kind]
            assert [m["value_error"] for m in side] == [None] * len(truth), (name, kind, side)
            assert [json.loads(m["value"]) for m in side] == expected(name, truth), (name, kind)
            label = schema_label(name)
            assert {m["value_schema"] for m in side} == {f"{label} (declared)"}
        if batched:
            assert {m["batch_size"] for m in mine} == {len(sent)}
        journeys = [j for j in rows.arrow["journeys"].to_pylist() if j["topic"] == topics[name]]
        assert [json.loads(j["value"]) for j in journeys] == expected(name, sent), name


def schema_label(name: str) -> str:
    return {
        "avro": "AVRO",
        "avro-batched": "AVRO",
        "json": "JSON",
        "string": "STRING",
        "protobuf-native": "PROTOBUF_NATIVE",
    }[name]
