"""The diagnosis engine on arbitrary conversations: any frames, any order, any ids, any times.

Hypothesis draws sequences of commands of every kind the rules read (with random ids,
sequence ids, message ids, permits, URLs, chunk metadata, directions and times, stray
responses answering the wrong request) over a few connections, some opened, some not, some
ended, each frame followed by the facts its connection's state machine makes of it (as a
findings read feeds them: completions, acks, permits, lifecycles). Whatever it draws, the
engine gives findings and never an exception; every code is a registered one, and evidence
stays within its bound. Bounds on what the engine keeps per connection are checked with a
flood (an operation count, not a time).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.diagnose import Diagnoser
from dissector.diagnose.state import MAX_EVIDENCE
from dissector.events import (
    CloseReason,
    Conversation,
    ConversationOpened,
    Direction,
    Finding,
    FlowKey,
    Frame,
)
from dissector.facts import ConversationState
from dissector.facts.bounds import MAX_ENTITIES, MAX_PENDING
from dissector.findings import REGISTRY, Thresholds
from dissector.pulsar.encoder import command
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES, MessageMetadata
from tests.support.ended import ended

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
KEYS = {n: FlowKey("10.0.0.1", 40000 + n, "10.0.0.2", 6650) for n in range(1, 4)}
IDS = st.integers(0, 5) | st.sampled_from([(1 << 64) - 1, (1 << 63)])
MID = st.fixed_dictionaries({"ledgerId": st.integers(0, 3), "entryId": st.integers(0, 5)})
URL = st.sampled_from(["pulsar://10.0.0.2:6650", "pulsar://10.0.0.3:6650", "x:/[", ""])


def _fields(name: str) -> st.SearchStrategy[dict[str, Any]]:
    common: dict[str, st.SearchStrategy[Any]] = {
        "PRODUCER": st.fixed_dictionaries(
            {"topic": st.just("t"), "producer_id": IDS, "request_id": IDS}
        ),
        "PRODUCER_SUCCESS": st.fixed_dictionaries(
            {"request_id": IDS, "producer_name": st.just("p"),
             "last_sequence_id": st.integers(-1, 3), "producer_ready": st.booleans()}
        ),
        "SUBSCRIBE": st.fixed_dictionaries(
            {"topic": st.just("t"), "subscription": st.just("s"), "subType": st.integers(0, 3),
             "consumer_id": IDS, "request_id": IDS}
        ),
        "SUCCESS": st.fixed_dictionaries({"request_id": IDS}),
        "ERROR": st.fixed_dictionaries(
            {"request_id": IDS, "error": st.sampled_from([16, 25, 0]), "message": st.just("m")}
        ),
        "SEND": st.fixed_dictionaries(
            {"producer_id": IDS, "sequence_id": IDS, "is_chunk": st.booleans(),
             "highest_sequence_id": IDS}
        ),
        "SEND_RECEIPT": st.fixed_dictionaries(
            {"producer_id": IDS, "sequence_id": IDS, "message_id": MID}
        ),
        "SEND_ERROR": st.fixed_dictionaries(
            {"producer_id": IDS, "sequence_id": IDS, "error": st.just(9), "message": st.just("e")}
        ),
        "FLOW": st.fixed_dictionaries({"consumer_id": IDS, "messagePermits": st.integers(0, 3)}),
        "MESSAGE": st.fixed_dictionaries(
            {"consumer_id": IDS, "message_id": MID, "redelivery_count": st.integers(0, 5),
             "ack_set": st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=2)}
        ),
        "ACK": st.fixed_dictionaries(
            {"consumer_id": IDS, "ack_type": st.integers(0, 1),
             "message_id": st.lists(MID, max_size=3)}
        ),
        "REDELIVER_UNACKNOWLEDGED_MESSAGES": st.fixed_dictionaries(
            {"consumer_id": IDS, "message_ids": st.lists(MID, max_size=2)}
        ),
        "CLOSE_PRODUCER": st.fixed_dictionaries(
            {"producer_id": IDS, "request_id": IDS, "assignedBrokerServiceUrl": URL}
        ),
        "CLOSE_CONSUMER": st.fixed_dictionaries(
            {"consumer_id": IDS, "request_id": IDS, "assignedBrokerServiceUrl": URL}
        ),
        "LOOKUP": st.fixed_dictionaries(
            {"topic": st.just("t"), "request_id": IDS, "authoritative": st.booleans()}
        ),
        "LOOKUP_RESPONSE": st.fixed_dictionaries(
            {"request_id": IDS, "response": st.integers(0, 2), "brokerServiceUrl": URL,
             "authoritative": st.booleans()}
        ),
        "TOPIC_MIGRATED": st.fixed_dictionaries(
            {"resource_id": IDS, "resource_type": st.integers(0, 1), "brokerServiceUrl": URL}
        ),
        "CONNECT": st.fixed_dictionaries({"client_version": st.just("c")}),
        "CONNECTED": st.fixed_dictionaries(
            {"server_version": st.just("s"), "max_message_size": st.integers(0, 8)}
        ),
        "SEEK": st.fixed_dictionaries({"consumer_id": IDS, "request_id": IDS}),
    }  # fmt: skip
    return common.get(name, st.just({}))


NAMES = [
    "CONNECT", "CONNECTED", "PRODUCER", "PRODUCER_SUCCESS", "SUBSCRIBE", "SUCCESS", "ERROR",
    "SEND", "SEND_RECEIPT", "SEND_ERROR", "FLOW", "MESSAGE", "ACK",
    "REDELIVER_UNACKNOWLEDGED_MESSAGES", "CLOSE_PRODUCER", "CLOSE_CONSUMER", "LOOKUP",
    "LOOKUP_RESPONSE", "TOPIC_MIGRATED", "PING", "PONG", "SEEK",
]  # fmt: skip


@st.composite
def frames(draw: st.DrawFn) -> Frame:
    name = draw(st.sampled_from(NAMES))
    cmd = command(name, **draw(_fields(name)))
    ctype = COMMAND_TYPES[name]
    meta = None
    if name in ("SEND", "MESSAGE"):
        meta = MessageMetadata(
            producer_name="p", sequence_id=0, publish_time=1,
            num_messages_in_batch=draw(st.integers(-2, 70)),
            uuid=draw(st.sampled_from(["u", "v"])), chunk_id=draw(st.integers(0, 3)),
            num_chunks_from_msg=draw(st.integers(0, 3)),
        )  # fmt: skip
    ts = draw(st.integers(0, 200_000_000))
    packet = draw(st.integers(1, 1000))
    return Frame(
        conn_id=draw(st.integers(1, 3)), direction=draw(st.sampled_from([C2B, B2C])),
        stream_offset=draw(st.integers(0, 100)), total_size=10, command_size=5,
        command_type=ctype, command_name=name, command=cmd,
        body=getattr(cmd, BODY_FIELDS[ctype]), checksum=None, metadata=meta,
        payload=memoryview(b"x" * draw(st.integers(0, 10))) if meta is not None else None,
        first_packet=packet, last_packet=packet, first_ts=ts, last_ts=ts, topic="t",
    )  # fmt: skip


def _ended(conn_id: int, reason: CloseReason) -> Conversation:
    return ended(conn_id, KEYS[conn_id], end_ts=200_000_000, last_packet=1000, reason=reason)


def _check(found: list[Finding]) -> None:
    for f in found:
        assert f.code in REGISTRY and f.severity == REGISTRY[f.code].severity
        assert len(f.evidence) <= MAX_EVIDENCE and f.count >= 0


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(frames(), max_size=60),
    st.sets(st.integers(1, 3)),
    st.sampled_from(list(CloseReason)),
)
def test_any_conversation_gives_findings_never_an_exception(
    drawn: list[Frame], opened: set[int], reason: CloseReason
) -> None:
    engine = Diagnoser(Thresholds(send_timeout=1, keepalive=1, flow_wait=1, ack_timeout=1))
    states: dict[int, ConversationState] = {}  # each frame's facts follow it, as in a read
    for conn_id in sorted(opened):
        _check(engine.feed(ConversationOpened(conn_id, KEYS[conn_id], 0, 1)))
    for frame in sorted(drawn, key=lambda f: f.last_ts):
        state = states.setdefault(frame.conn_id, ConversationState(frame.conn_id, lifecycles=True))
        _, facts = state.observe(frame)
        for ev in (frame, *facts):
            _check(engine.feed(ev))
    _check(engine.tick(300_000_000))
    for conn_id in sorted(opened):
        for fact in states.pop(conn_id, ConversationState(conn_id)).close():
            _check(engine.feed(fact))
        _check(engine.feed(_ended(conn_id, reason)))
    _check(engine.finish())


def _frame(name: str, direction: Direction, ts: int, **fields: Any) -> Frame:
    cmd = command(name, **fields)
    ctype = COMMAND_TYPES[name]
    body = getattr(cmd, BODY_FIELDS[ctype])
    return Frame(1, direction, 0, 10, 5, ctype, name, cmd, body, None, last_ts=ts)


def test_a_response_of_the_wrong_type_teaches_nothing() -> None:
    """A SUCCESS answering a LOOKUP, a LOOKUP_RESPONSE answering a PRODUCER: the rules that
    learn from LOOKUP and PRODUCER answers do not read fields those responses lack."""
    engine = Diagnoser()
    engine.feed(ConversationOpened(1, KEYS[1], 0, 1))
    state = ConversationState(1, lifecycles=True)
    for frame in (
        _frame("CONNECT", C2B, 1, client_version="c"),
        _frame("LOOKUP", C2B, 2, topic="t", request_id=1),
        _frame("SUCCESS", B2C, 3, request_id=1),
        _frame("PRODUCER", C2B, 4, topic="t", producer_id=1, request_id=2),
        _frame("LOOKUP_RESPONSE", B2C, 5, request_id=2, response=0),
    ):
        _, facts = state.observe(frame)
        for ev in (frame, *facts):
            _check(engine.feed(ev))
    assert engine.conns[1].producers[1].open  # neither created nor failed: still open
    _check(engine.feed(_ended(1, CloseReason.FIN)))
    _check(engine.finish())


def test_a_flood_of_producers_is_bounded() -> None:
    """PRODUCER commands with ever new ids (each frame, then its facts, as the pipeline
    feeds them): the engine keeps at most MAX_ENTITIES of them (the facts' bound)."""
    engine = Diagnoser()
    engine.feed(ConversationOpened(1, KEYS[1], 0, 1))
    state = ConversationState(1, lifecycles=True)
    for pid in range(MAX_ENTITIES + 100):
        cmd = command("PRODUCER", topic="t", producer_id=pid, request_id=pid)
        ctype = COMMAND_TYPES["PRODUCER"]
        frame = Frame(1, C2B, 0, 10, 5, ctype, "PRODUCER", cmd, cmd.producer, None, last_ts=pid)
        _, facts = state.observe(frame)
        for ev in (frame, *facts):
            engine.feed(ev)
    conn = engine.conns[1]
    assert len(conn.producers) == MAX_ENTITIES and next(iter(conn.producers)) == 100
    assert len(conn.requests) <= MAX_PENDING
