"""schema.incompatible on arbitrary schema traffic: any schema bytes, any order, any ids.

Hypothesis draws PRODUCER, SUBSCRIBE, GET_SCHEMA, GET_OR_CREATE_SCHEMA and their answers
(ERROR IncompatibleSchema or another error, successes with any schema version) over two
connections, with schemas of any type whose definitions are any bytes or JSON of any shape;
each frame is followed by its facts, the schema facts included (as `diagnose --values` feeds
them). Whatever is drawn, the engine gives findings and never an exception; every row it
gives is a registered code, its evidence within bound, and the schema shapes it describes
come from any bytes without an exception.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.diagnose import Diagnoser
from dissector.diagnose.schema_shapes import MAX_FIELDS, describe, differences, shape
from dissector.diagnose.state import MAX_EVIDENCE
from dissector.events import CloseReason, ConversationOpened, Direction, FlowKey, Frame
from dissector.facts import ConversationState
from dissector.findings import REGISTRY, FindingCode
from dissector.pulsar.encoder import command
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES
from tests.support.ended import ended

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
KEYS = {n: FlowKey("10.0.0.1", 40000 + n, "10.0.0.2", 6650) for n in (1, 2)}
IDS = st.integers(0, 3)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELD = st.fixed_dictionaries({"name": st.text(max_size=4), "type": JSONISH})
RECORD = st.fixed_dictionaries(
    {"type": st.just("record"), "name": st.text(max_size=4), "fields": st.lists(FIELD, max_size=5)}
)
DEFINITION = (
    st.binary(max_size=40)
    | JSONISH.map(lambda d: json.dumps(d).encode())
    | RECORD.map(lambda d: json.dumps(d).encode())
)
SCHEMA = st.fixed_dictionaries(
    {"name": st.text(max_size=4), "schema_data": DEFINITION, "type": st.integers(0, 22)}
)
VERSION = st.integers(0, 3).map(lambda n: n.to_bytes(8, "big")) | st.binary(max_size=3)
TOPIC = st.sampled_from(["t", "t-partition-0", "u"])


def _fields(name: str) -> st.SearchStrategy[dict[str, Any]]:
    drawn: dict[str, st.SearchStrategy[dict[str, Any]]] = {
        "PRODUCER": st.fixed_dictionaries(
            {"topic": TOPIC, "producer_id": IDS, "request_id": IDS},
            optional={"schema": SCHEMA, "producer_name": st.just("p")},
        ),
        "SUBSCRIBE": st.fixed_dictionaries(
            {"topic": TOPIC, "subscription": st.just("s"), "subType": st.integers(0, 3),
             "consumer_id": IDS, "request_id": IDS},
            optional={"schema": SCHEMA},
        ),
        "PRODUCER_SUCCESS": st.fixed_dictionaries(
            {"request_id": IDS, "producer_name": st.just("p")},
            optional={"schema_version": VERSION, "producer_ready": st.booleans()},
        ),
        "SUCCESS": st.fixed_dictionaries({"request_id": IDS}),
        "ERROR": st.fixed_dictionaries(
            {"request_id": IDS, "error": st.sampled_from([18, 18, 6, 5]), "message": st.just("m")}
        ),
        "GET_SCHEMA": st.fixed_dictionaries(
            {"request_id": IDS, "topic": TOPIC}, optional={"schema_version": VERSION}
        ),
        "GET_SCHEMA_RESPONSE": st.fixed_dictionaries(
            {"request_id": IDS},
            optional={"schema": SCHEMA, "schema_version": VERSION, "error_code": st.just(18)},
        ),
        "GET_OR_CREATE_SCHEMA": st.fixed_dictionaries(
            {"request_id": IDS, "topic": TOPIC, "schema": SCHEMA}
        ),
        "GET_OR_CREATE_SCHEMA_RESPONSE": st.fixed_dictionaries(
            {"request_id": IDS},
            optional={"schema_version": VERSION, "error_code": st.sampled_from([18, 6]),
                      "error_message": st.just("e")},
        ),
    }  # fmt: skip
    return drawn.get(name, st.just({}))


NAMES = [
    "PRODUCER", "SUBSCRIBE", "PRODUCER_SUCCESS", "SUCCESS", "ERROR", "GET_SCHEMA",
    "GET_SCHEMA_RESPONSE", "GET_OR_CREATE_SCHEMA", "GET_OR_CREATE_SCHEMA_RESPONSE",
]  # fmt: skip
_REQUESTS = {"PRODUCER", "SUBSCRIBE", "GET_SCHEMA", "GET_OR_CREATE_SCHEMA"}


@st.composite
def frames(draw: st.DrawFn) -> Frame:
    name = draw(st.sampled_from(NAMES))
    cmd = command(name, **draw(_fields(name)))
    ctype = COMMAND_TYPES[name]
    packet = draw(st.integers(1, 1000))
    ts = draw(st.integers(0, 10_000_000))
    return Frame(
        conn_id=draw(st.sampled_from([1, 2])), direction=C2B if name in _REQUESTS else B2C,
        stream_offset=0, total_size=10, command_size=5, command_type=ctype,
        command_name=name, command=cmd, body=getattr(cmd, BODY_FIELDS[ctype]), checksum=None,
        metadata=None, payload=None, first_packet=packet, last_packet=packet, first_ts=ts,
        last_ts=ts, topic=None,
    )  # fmt: skip


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(frames(), max_size=40))
def test_any_schema_traffic_gives_findings_never_an_exception(drawn: list[Frame]) -> None:
    engine = Diagnoser()
    found = []
    states = {n: ConversationState(n, schemas=True, lifecycles=True) for n in KEYS}
    for n, key in KEYS.items():
        found += engine.feed(ConversationOpened(n, key, 0, 1))
    for frame in sorted(drawn, key=lambda f: f.last_ts):
        state = states[frame.conn_id]
        _, facts = state.observe(frame)
        for ev in (frame, *facts, *state.schemas.take()):
            found += engine.feed(ev)
    for n, key in KEYS.items():
        for fact in states[n].close():
            found += engine.feed(fact)
        found += engine.feed(ended(n, key, end_ts=20_000_000, last_packet=1000,
                                   reason=CloseReason.FIN))  # fmt: skip
    found += engine.finish()
    for f in found:
        assert f.code in REGISTRY and f.severity == REGISTRY[f.code].severity
        assert len(f.evidence) <= MAX_EVIDENCE and f.count >= 0
        if f.code == FindingCode.SCHEMA_INCOMPATIBLE:
            assert f.count >= 1 and "IncompatibleSchema" in f.summary


@settings(max_examples=100, deadline=None)
@given(SCHEMA, SCHEMA)
def test_any_two_schemas_have_a_shape_and_a_difference(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    one = shape(
        command("GET_OR_CREATE_SCHEMA", request_id=1, topic="t", schema=a).getOrCreateSchema.schema
    )
    two = shape(
        command("GET_OR_CREATE_SCHEMA", request_id=1, topic="t", schema=b).getOrCreateSchema.schema
    )
    assert one.fields is None or len(one.fields) <= MAX_FIELDS
    assert describe(one, fields=True).startswith(one.type)
    diff = differences(one, two)
    assert isinstance(diff, list) and all(isinstance(d, str) for d in diff)
    assert differences(one, one) == []


def test_a_field_named_twice_differs_from_nothing_in_itself() -> None:
    """Found by the property above: an Avro record naming one field twice, with two types
    (null, then a union), is not different from itself; a name counts once, as it first
    comes, against another schema too."""
    twice = {
        "name": "",
        "schema_data": b'{"type": "record", "name": "", "fields": '
        b'[{"name": "", "type": null}, {"name": "", "type": []}]}',
        "type": 2,
    }
    one = shape(
        command(
            "GET_OR_CREATE_SCHEMA", request_id=1, topic="t", schema=twice
        ).getOrCreateSchema.schema
    )
    assert one.fields is not None and len(one.fields) == 2
    assert differences(one, one) == []
