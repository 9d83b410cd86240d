"""ConversationState, fed frame by frame: every pairing rule, entities, handshake, bounds.

Frames are encoded with dissector.pulsar.encoder, decoded by a FrameDecoder per direction (as the
pipeline does) and observed in the order given. Every expected value comes from what the test
encoded: the frames themselves (compared by identity), their ids and the timestamps the test
gave them; never from the state's own output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from dissector.events import Acked, Direction, Entity, Frame, Pair, Permits, RequestIdReused
from dissector.facts import ConversationState, bounds, is_request_pair
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import BaseCommand, MessageMetadata
from dissector.tables.builders import pair_row
from dissector.tables.schema import TABLES

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
TOPIC = "persistent://public/default/conv"
OTHER = "persistent://public/default/conv-other"
T0 = 1_700_000_000_000_000
U64 = 2**64

_SERVER_ERROR = BaseCommand.DESCRIPTOR.file.enum_types_by_name["ServerError"]


def err(name: str) -> int:
    """Wire number of a ServerError value (its name is what the pair must report)."""
    return _SERVER_ERROR.values_by_name[name].number


def mid(ledger: int, entry: int, **extra: Any) -> dict[str, Any]:
    return {"ledgerId": ledger, "entryId": entry, **extra}


# --------------------------------------------------------------------------- harness


@dataclass
class Sent:
    """A frame as observed: the decoded Frame, the time we gave it, what observe returned."""

    frame: Frame
    ts: int
    topic: str | None
    pairs: list[Pair]


class Link:
    """One connection: encodes frames, decodes them per direction, feeds ConversationState."""

    def __init__(self, conn_id: int = 1, *, pairs: bool = True) -> None:
        self.state = ConversationState(conn_id, pairs=pairs)
        self.decoders = {d: FrameDecoder(conn_id=conn_id, direction=d) for d in Direction}
        self.ts = T0
        self.packet = 0
        self.reused: list[RequestIdReused] = []  # facts of requests sent with an id in flight
        self.acked: list[Acked] = []  # facts of ACKs: what each did to the unacknowledged
        self.permits: list[Permits] = []  # facts of consumers' permits (FLOW, some MESSAGEs)

    def send(
        self,
        direction: Direction,
        name: str,
        *,
        after: int = 1_000,
        early: int = 0,
        metadata: MessageMetadata | None = None,
        **fields: Any,
    ) -> Sent:
        """Encode `name` with `fields`, completed `after` microseconds after the previous
        frame; with `early`, its first bytes arrive in a packet that many microseconds before."""
        self.ts += after
        self.packet += 1
        cmd = command(name, **fields)
        if name in ("SEND", "MESSAGE"):
            meta = metadata or MessageMetadata(
                producer_name="p", sequence_id=fields.get("sequence_id", 0), publish_time=1
            )
            data = encode_frame(cmd, metadata=meta, payload=b"payload")
        else:
            data = encode_frame(cmd)
        decoder = self.decoders[direction]
        if early:
            assert decoder.feed(data[:6], packet=self.packet, ts=self.ts - early) == []
            self.packet += 1
            data = data[6:]
        (frame,) = decoder.feed(data, packet=self.packet, ts=self.ts)
        assert isinstance(frame, Frame), frame
        topic, facts = self.state.observe(frame)
        self.reused.extend(f for f in facts if type(f) is RequestIdReused)
        self.acked.extend(f for f in facts if type(f) is Acked)
        self.permits.extend(f for f in facts if type(f) is Permits)
        return Sent(frame, self.ts, topic, [f for f in facts if type(f) is Pair])

    def close(self) -> list[Pair]:
        return self.state.close()


def one(pairs: list[Pair]) -> Pair:
    assert len(pairs) == 1, pairs
    return pairs[0]


def kept(frame: Frame | None) -> Frame | None:
    """A request as its pair holds it, compared: a SEND or MESSAGE without its decoded
    command, metadata, payload and bytes (issue 42: they kept about 3 KB per pending
    delivery alive; its ids are checked by the rows), others as they came."""
    if frame is None or frame.command_name not in ("SEND", "MESSAGE"):
        return frame
    return frame._replace(
        command=None, body=None, metadata=None, broker_entry=None, payload=None, raw=None
    )


def linked(p: Pair, request: Sent | None, response: Sent | None, outcome: str) -> None:
    """`p` joins exactly these two frames (by identity, the request as kept) with this
    outcome."""
    if request is None or kept(request.frame) is request.frame:
        assert p.request is (None if request is None else request.frame)
    else:
        assert kept(p.request) == kept(request.frame)
    assert p.response is (None if response is None else response.frame)
    assert p.outcome == outcome
    assert p.conn_id == 1


def row(p: Pair) -> dict[str, Any]:
    """The timeline row the pair becomes (its connection's Community ID aside)."""
    return dict(zip(TABLES["timeline"].names, pair_row(p, None), strict=True))


def _producer(link: Link, pid: int, topic: str = TOPIC) -> None:
    link.send(C2B, "PRODUCER", topic=topic, producer_id=pid, request_id=1000 + pid)
    link.send(B2C, "PRODUCER_SUCCESS", request_id=1000 + pid, producer_name=f"p{pid}")


def _consumer(link: Link, cid: int, topic: str = TOPIC) -> None:
    link.send(
        C2B, "SUBSCRIBE", topic=topic, subscription="s", subType=1, consumer_id=cid, request_id=cid
    )
    link.send(B2C, "SUCCESS", request_id=cid)


# --------------------------------------------------------------------------- request_id


_RESPONSE_CASES: list[tuple[str, dict[str, Any], str, dict[str, Any], str, str | None]] = [
    ("LOOKUP", {"topic": TOPIC}, "LOOKUP_RESPONSE", {"response": 1}, "success", None),
    (
        "LOOKUP",
        {"topic": TOPIC},
        "LOOKUP_RESPONSE",
        {"response": 2, "error": err("ServiceNotReady"), "message": "not ready"},
        "error",
        "ServiceNotReady",
    ),
    (
        "PARTITIONED_METADATA",
        {"topic": TOPIC},
        "PARTITIONED_METADATA_RESPONSE",
        {"partitions": 4, "response": 0},
        "success",
        None,
    ),
    (
        "PARTITIONED_METADATA",
        {"topic": TOPIC},
        "PARTITIONED_METADATA_RESPONSE",
        {"response": 1, "error": err("TopicNotFound"), "message": "no such topic"},
        "error",
        "TopicNotFound",
    ),
    (
        "PRODUCER",
        {"topic": TOPIC, "producer_id": 1},
        "PRODUCER_SUCCESS",
        {"producer_name": "given"},
        "success",
        None,
    ),
    (
        "PRODUCER",
        {"topic": TOPIC, "producer_id": 1},
        "ERROR",
        {"error": err("ProducerBusy"), "message": "producer busy"},
        "error",
        "ProducerBusy",
    ),
    (
        "SUBSCRIBE",
        {"topic": TOPIC, "subscription": "s", "subType": 1, "consumer_id": 3},
        "SUCCESS",
        {},
        "success",
        None,
    ),
    (
        "GET_LAST_MESSAGE_ID",
        {"consumer_id": 3},
        "GET_LAST_MESSAGE_ID_RESPONSE",
        {"last_message_id": mid(9, 8)},
        "success",
        None,
    ),
    (
        "GET_SCHEMA",
        {"topic": TOPIC},
        "GET_SCHEMA_RESPONSE",
        {"schema_version": b"\x00" * 7 + b"\x01"},
        "success",
        None,
    ),
    (
        "GET_SCHEMA",
        {"topic": TOPIC},
        "GET_SCHEMA_RESPONSE",
        {"error_code": err("TopicNotFound"), "error_message": "no schema"},
        "error",
        "TopicNotFound",
    ),
    (
        "GET_OR_CREATE_SCHEMA",
        {"topic": TOPIC, "schema": {"name": "s", "schema_data": b"{}", "type": 2}},
        "GET_OR_CREATE_SCHEMA_RESPONSE",
        {"schema_version": b"\x02"},
        "success",
        None,
    ),
    (
        "GET_OR_CREATE_SCHEMA",
        {"topic": TOPIC, "schema": {"name": "s", "schema_data": b"{}", "type": 2}},
        "GET_OR_CREATE_SCHEMA_RESPONSE",
        {"error_code": err("IncompatibleSchema"), "error_message": "incompatible"},
        "error",
        "IncompatibleSchema",
    ),
    (
        "GET_TOPICS_OF_NAMESPACE",
        {"namespace": "public/default"},
        "GET_TOPICS_OF_NAMESPACE_RESPONSE",
        {"topics": [TOPIC, OTHER]},
        "success",
        None,
    ),
    (
        "CONSUMER_STATS",
        {"consumer_id": 3},
        "CONSUMER_STATS_RESPONSE",
        {"msgRateOut": 1.5, "consumerName": "c"},
        "success",
        None,
    ),
    (
        "CONSUMER_STATS",
        {"consumer_id": 3},
        "CONSUMER_STATS_RESPONSE",
        {"error_code": err("ConsumerNotFound"), "error_message": "gone"},
        "error",
        "ConsumerNotFound",
    ),
    (
        "NEW_TXN",
        {"txn_ttl_millis": 60_000, "tc_id": 0},
        "NEW_TXN_RESPONSE",
        {"txnid_least_bits": 5, "txnid_most_bits": 0},
        "success",
        None,
    ),
    (
        "NEW_TXN",
        {"tc_id": 1},
        "NEW_TXN_RESPONSE",
        {"error": err("TransactionCoordinatorNotFound"), "message": "no tc"},
        "error",
        "TransactionCoordinatorNotFound",
    ),
    (
        "WATCH_TOPIC_LIST",
        {"watcher_id": 4, "namespace": "public/default", "topics_pattern": "conv.*"},
        "WATCH_TOPIC_LIST_SUCCESS",
        {"watcher_id": 4, "topic": [TOPIC], "topics_hash": "h"},
        "success",
        None,
    ),
    ("UNSUBSCRIBE", {"consumer_id": 3}, "SUCCESS", {}, "success", None),
]


@pytest.mark.parametrize(
    ("request_name", "request_fields", "response_name", "response_fields", "outcome", "code"),
    _RESPONSE_CASES,
    ids=[f"{c[0]}-{c[2]}-{c[4]}" for c in _RESPONSE_CASES],
)
@pytest.mark.parametrize("rid", [7, U64 - 1], ids=["small-id", "max-u64-id"])
def test_request_id_pairs_request_with_response(
    request_name: str,
    request_fields: dict[str, Any],
    response_name: str,
    response_fields: dict[str, Any],
    outcome: str,
    code: str | None,
    rid: int,
) -> None:
    link = Link()
    req = link.send(C2B, request_name, request_id=rid, **request_fields)
    assert req.pairs == []
    other = link.send(C2B, "LOOKUP", topic=OTHER, request_id=rid ^ 1)  # another id: untouched
    resp = link.send(B2C, response_name, request_id=rid, after=2_345, **response_fields)

    p = one(resp.pairs)
    linked(p, req, resp, outcome)
    assert p.request_id == rid
    assert p.error_code == code
    message = response_fields.get("message", response_fields.get("error_message"))
    assert p.error_message == message
    r = row(p)
    assert r["latency_us"] == resp.ts - req.ts
    assert r["request_id"] == (rid if rid < 2**63 else rid - U64)
    assert (r["request_offset"], r["response_offset"]) == (
        req.frame.stream_offset,
        resp.frame.stream_offset,
    )
    linked(one(link.close()), other, None, "unanswered")


def test_latency_runs_from_the_last_packet_of_the_request_to_that_of_the_response() -> None:
    link = Link()
    req = link.send(C2B, "LOOKUP", topic=TOPIC, request_id=1, early=300)
    resp = link.send(B2C, "LOOKUP_RESPONSE", request_id=1, response=1, after=5_000, early=4_000)
    assert (req.frame.first_ts, req.frame.last_ts) == (req.ts - 300, req.ts)
    r = row(one(resp.pairs))
    assert r["latency_us"] == resp.ts - req.ts == 5_000
    assert (r["ts"], r["request_ts"], r["response_ts"]) == (req.ts, req.ts, resp.ts)
    assert (r["request_packet"], r["response_packet"]) == (2, 4)


def test_lookup_failed_without_error_code_is_an_error() -> None:
    link = Link()
    req = link.send(C2B, "LOOKUP", topic=TOPIC, request_id=1)
    resp = link.send(B2C, "LOOKUP_RESPONSE", request_id=1, response=2)  # Failed, nothing else
    linked(one(resp.pairs), req, resp, "error")


def test_response_pairs_only_with_a_request_sent_the_other_way() -> None:
    link = Link()
    lookup = link.send(C2B, "LOOKUP", topic=TOPIC, request_id=7)
    # The broker's own request with the same id: a different key.
    close = link.send(B2C, "CLOSE_PRODUCER", producer_id=1, request_id=7)
    assert lookup.pairs == close.pairs == []

    # A "response" sent the same way as the request does not answer it.
    same_way = link.send(C2B, "SUCCESS", request_id=8)
    linked(one(same_way.pairs), None, same_way, "unmatched")
    stray = link.send(B2C, "SUCCESS", request_id=8)
    linked(one(stray.pairs), None, stray, "unmatched")

    answer = link.send(B2C, "LOOKUP_RESPONSE", request_id=7, response=1)
    linked(one(answer.pairs), lookup, answer, "success")
    client_ok = link.send(C2B, "SUCCESS", request_id=7)
    p = one(client_ok.pairs)
    linked(p, close, client_ok, "success")
    assert p.request_id == 7 and p.producer_id == 1
    assert row(p)["request_direction"] == B2C.value
    assert link.close() == []


def test_request_waits_for_the_response_from_the_other_side_only() -> None:
    link = Link()
    req = link.send(C2B, "GET_SCHEMA", request_id=3, topic=TOPIC)
    wrong = link.send(C2B, "GET_SCHEMA_RESPONSE", request_id=3)
    linked(one(wrong.pairs), None, wrong, "unmatched")
    right = link.send(B2C, "GET_SCHEMA_RESPONSE", request_id=3)
    linked(one(right.pairs), req, right, "success")


def test_unmatched_response_and_unanswered_requests() -> None:
    link = Link()
    late = link.send(B2C, "SUCCESS", request_id=41)  # its request is not in the capture
    p = one(late.pairs)
    linked(p, None, late, "unmatched")
    assert p.request_id == 41
    r = row(p)
    assert r["ts"] == late.ts and r["request_ts"] is None and r["latency_us"] is None
    assert r["request_direction"] is None and r["response_offset"] == late.frame.stream_offset

    first = link.send(C2B, "LOOKUP", topic=TOPIC, request_id=1)
    ping = link.send(B2C, "PING")
    send = link.send(C2B, "SEND", producer_id=2, sequence_id=0)
    link.send(B2C, "MESSAGE", consumer_id=5, message_id=mid(1, 1))
    connect = link.send(C2B, "CONNECT", client_version="c")
    delivered = link.send(B2C, "MESSAGE", consumer_id=5, message_id=mid(1, 2))
    acked = link.send(C2B, "ACK", consumer_id=5, ack_type=0, message_id=[mid(1, 1)])
    assert len(acked.pairs) == 1

    left = link.close()
    expected = [first, ping, send, connect, delivered]  # in the order they were sent
    assert [kept(p.request) for p in left] == [kept(s.frame) for s in expected]
    assert all(p.response is None and p.outcome == "unanswered" for p in left)
    for p in left:
        r = row(p)
        assert r["response_ts"] is None and r["latency_us"] is None
    assert link.close() == []  # nothing is reported twice


# --------------------------------------------------------------------------- SEND


def test_send_receipt_and_send_error_with_64_bit_ids() -> None:
    link = Link()
    pid, big = U64 - 2, 2**63 + 5
    producer = link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=pid, request_id=1)
    a = link.send(C2B, "SEND", producer_id=pid, sequence_id=big)
    b = link.send(C2B, "SEND", producer_id=pid, sequence_id=big + 1)
    ok = link.send(
        B2C, "SEND_RECEIPT", producer_id=pid, sequence_id=big, message_id=mid(2**63 + 9, 2**64 - 3)
    )
    p = one(ok.pairs)
    linked(p, a, ok, "success")
    assert (p.producer_id, p.sequence_id) == (pid, big)
    assert (p.ledger_id, p.entry_id) == (2**63 + 9, 2**64 - 3)
    r = row(p)
    assert (r["producer_id"], r["sequence_id"]) == (pid - U64, big - U64)
    assert (r["ledger_id"], r["entry_id"]) == (2**63 + 9 - U64, -3)
    assert r["latency_us"] == ok.ts - a.ts

    failed = link.send(
        B2C,
        "SEND_ERROR",
        producer_id=pid,
        sequence_id=big + 1,
        error=err("PersistenceError"),
        message="bookie down",
    )
    p = one(failed.pairs)
    linked(p, b, failed, "error")
    assert (p.error_code, p.error_message) == ("PersistenceError", "bookie down")
    assert p.sequence_id == big + 1
    linked(one(link.close()), producer, None, "unanswered")  # no PRODUCER_SUCCESS was sent


def test_send_pairs_by_producer_and_sequence_id_when_interleaved() -> None:
    link = Link()
    sends = {
        (pid, seq): link.send(C2B, "SEND", producer_id=pid, sequence_id=seq)
        for seq in (0, 1)
        for pid in (1, 2)
    }
    order = [(2, 1), (1, 0), (2, 0), (1, 1)]  # receipts in another order than the sends
    for pid, seq in order:
        receipt = link.send(
            B2C, "SEND_RECEIPT", producer_id=pid, sequence_id=seq, message_id=mid(pid, seq)
        )
        p = one(receipt.pairs)
        linked(p, sends[pid, seq], receipt, "success")
        assert (p.producer_id, p.sequence_id, p.ledger_id, p.entry_id) == (pid, seq, pid, seq)
    stray = link.send(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=0, message_id=mid(1, 0))
    linked(one(stray.pairs), None, stray, "unmatched")  # already answered
    assert link.close() == []


def test_batch_send_is_acknowledged_by_one_receipt() -> None:
    link = Link()
    _producer(link, 1)
    meta = MessageMetadata(
        producer_name="p",
        sequence_id=10,
        publish_time=1,
        num_messages_in_batch=3,
        highest_sequence_id=12,
    )
    batch = link.send(
        C2B,
        "SEND",
        producer_id=1,
        sequence_id=10,
        num_messages=3,
        highest_sequence_id=12,
        metadata=meta,
    )
    receipt = link.send(
        B2C,
        "SEND_RECEIPT",
        producer_id=1,
        sequence_id=10,
        highest_sequence_id=12,
        message_id=mid(4, 0),
    )
    p = one(receipt.pairs)
    linked(p, batch, receipt, "success")
    assert (p.sequence_id, p.ledger_id, p.entry_id) == (10, 4, 0)
    assert link.close() == []
    assert link.state.producers[1].sent == 3


def test_chunks_sharing_a_sequence_id_pair_first_in_first_out() -> None:
    link = Link()
    chunks = []
    receipts = []

    def chunk(i: int) -> Sent:
        meta = MessageMetadata(
            producer_name="p",
            sequence_id=5,
            publish_time=1,
            uuid="p-5",
            chunk_id=i,
            num_chunks_from_msg=3,
            total_chunk_msg_size=21,
        )
        return link.send(C2B, "SEND", producer_id=1, sequence_id=5, is_chunk=True, metadata=meta)

    def receipt(entry: int) -> Sent:
        return link.send(
            B2C, "SEND_RECEIPT", producer_id=1, sequence_id=5, message_id=mid(6, entry)
        )

    chunks += [chunk(0), chunk(1)]
    receipts.append(receipt(0))
    chunks.append(chunk(2))
    receipts += [receipt(1), receipt(2)]
    for i, (c, r) in enumerate(zip(chunks, receipts, strict=True)):
        p = one(r.pairs)
        linked(p, c, r, "success")
        assert (p.ledger_id, p.entry_id) == (6, i)
    assert link.close() == []


# --------------------------------------------------------------------------- FIFO pairs


def test_connect_connected() -> None:
    link = Link()
    connect = link.send(C2B, "CONNECT", client_version="c", protocol_version=21)
    connected = link.send(B2C, "CONNECTED", server_version="b", protocol_version=21, after=777)
    p = one(connected.pairs)
    linked(p, connect, connected, "success")
    assert row(p)["latency_us"] == 777
    assert p.request_id is None and p.error_code is None


def test_ping_pong_pair_per_direction_when_interleaved() -> None:
    link = Link()
    broker_ping = link.send(B2C, "PING")
    client_ping = link.send(C2B, "PING")
    client_pong = link.send(C2B, "PONG", after=300)  # answers the broker's PING
    broker_pong = link.send(B2C, "PONG", after=4_000)  # answers the client's PING
    linked(one(client_pong.pairs), broker_ping, client_pong, "success")
    linked(one(broker_pong.pairs), client_ping, broker_pong, "success")
    assert row(client_pong.pairs[0])["latency_us"] == client_pong.ts - broker_ping.ts
    assert row(broker_pong.pairs[0])["latency_us"] == broker_pong.ts - client_ping.ts

    # Two PINGs of one side are answered in order; a PONG nobody asked for is unmatched.
    first, second = link.send(C2B, "PING"), link.send(C2B, "PING")
    a, b = link.send(B2C, "PONG"), link.send(B2C, "PONG")
    linked(one(a.pairs), first, a, "success")
    linked(one(b.pairs), second, b, "success")
    extra = link.send(C2B, "PONG")
    linked(one(extra.pairs), None, extra, "unmatched")
    assert link.close() == []


def test_auth_challenge_auth_response() -> None:
    link = Link()
    challenge = link.send(
        B2C, "AUTH_CHALLENGE", challenge={"auth_method_name": "token", "auth_data": b"c"}
    )
    response = link.send(
        C2B, "AUTH_RESPONSE", response={"auth_method_name": "token", "auth_data": b"r"}
    )
    linked(one(response.pairs), challenge, response, "success")
    again = link.send(C2B, "AUTH_RESPONSE", response={"auth_data": b"r"})
    linked(one(again.pairs), None, again, "unmatched")


# --------------------------------------------------------------------------- MESSAGE / ACK


def test_one_ack_with_several_ids() -> None:
    link = Link()
    m = [link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, e)) for e in range(3)]
    ack = link.send(
        C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 2), mid(3, 0), mid(3, 9)]
    )
    first, second, unknown = ack.pairs
    linked(first, m[2], ack, "success")
    linked(second, m[0], ack, "success")
    linked(unknown, None, ack, "unmatched")  # (3, 9) was never delivered
    assert (first.consumer_id, first.ledger_id, first.entry_id) == (1, 3, 2)
    assert (unknown.ledger_id, unknown.entry_id) == (3, 9)
    assert row(first)["latency_us"] == ack.ts - m[2].ts
    linked(one(link.close()), m[1], None, "unanswered")


def test_cumulative_ack_covers_everything_of_that_consumer_up_to_the_id() -> None:
    link = Link()
    ids = [(3, 0), (3, 1), (2, 7), (3, 2), (4, 0)]
    mine = [link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(*i)) for i in ids]
    theirs = link.send(B2C, "MESSAGE", consumer_id=2, message_id=mid(3, 0))
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=1, message_id=[mid(3, 1)])
    covered = {(p.ledger_id, p.entry_id): p for p in ack.pairs}
    assert set(covered) == {(3, 0), (3, 1), (2, 7)}
    for i, s in zip(ids[:3], mine[:3], strict=True):
        linked(covered[i], s, ack, "success")
    left = link.close()
    assert [kept(p.request) for p in left] == [kept(s.frame) for s in (mine[3], mine[4], theirs)]


def test_cumulative_ack_with_nothing_delivered_is_unmatched() -> None:
    link = Link()
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=1, message_id=[mid(8, 8)])
    p = one(ack.pairs)
    linked(p, None, ack, "unmatched")
    assert (p.ledger_id, p.entry_id) == (8, 8)


def test_repeated_ack_is_unmatched_and_names_the_first_ack() -> None:
    link = Link()
    m = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(5, 5))
    first = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(5, 5)])
    linked(one(first.pairs), m, first, "success")
    again = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(5, 5)])
    p = one(again.pairs)
    linked(p, None, again, "unmatched")
    assert p.error_message is not None and f"packet {link.packet - 1}" in p.error_message
    assert p.first_ack_packet == link.packet - 1  # a field, not only the text
    assert row(p)["first_ack_packet"] == link.packet - 1
    never = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(5, 6)])
    assert one(never.pairs).error_message is None
    assert one(never.pairs).first_ack_packet is None
    assert one(first.pairs).first_ack_packet is None


def test_ack_from_another_consumer_does_not_pair() -> None:
    link = Link()
    m = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(5, 5))
    other = link.send(C2B, "ACK", consumer_id=2, ack_type=0, message_id=[mid(5, 5)])
    linked(one(other.pairs), None, other, "unmatched")
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(5, 5)])
    linked(one(ack.pairs), m, ack, "success")


def test_batch_index_ack_does_not_complete_the_pair() -> None:
    link = Link()
    meta = MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3
    )
    m = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 4), metadata=meta)
    # Slots 0 and 2 still unacknowledged (bitset 0b101): only slot 1 is acknowledged.
    partial = link.send(
        C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 4, batch_index=1, ack_set=[5])]
    )
    full = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 4)])
    everything = partial.pairs + full.pairs + link.close()
    assert [p for p in everything if kept(p.request) == kept(m.frame)] == full.pairs
    linked(one(full.pairs), m, full, "success")


def test_batch_index_ack_leaves_the_message_pending_until_a_full_ack() -> None:
    link = Link()
    meta = MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=3
    )
    m = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 4), metadata=meta)
    link.send(
        C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 4, batch_index=1, ack_set=[5])]
    )
    # An all-zero ack_set means no slot is left: that is a full ack.
    full = link.send(
        C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 4, batch_index=2, ack_set=[0])]
    )
    linked(one(full.pairs), m, full, "success")
    assert link.close() == []


def test_partial_ack_then_close_leaves_the_message_unanswered() -> None:
    link = Link()
    meta = MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2
    )
    m = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 4), metadata=meta)
    link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 4, ack_set=[2])])
    linked(one(link.close()), m, None, "unanswered")


def test_redeliver_with_ids() -> None:
    link = Link()
    m = [link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, e)) for e in range(3)]
    redeliver = link.send(
        C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1, message_ids=[mid(3, 1), mid(3, 0)]
    )
    a, b = redeliver.pairs
    linked(a, m[1], redeliver, "redelivered")
    linked(b, m[0], redeliver, "redelivered")
    assert (a.consumer_id, a.ledger_id, a.entry_id) == (1, 3, 1)
    linked(one(link.close()), m[2], None, "unanswered")


def test_redeliver_without_ids_covers_everything_unacked_of_that_consumer() -> None:
    link = Link()
    m = [link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, e)) for e in range(2)]
    theirs = link.send(B2C, "MESSAGE", consumer_id=2, message_id=mid(3, 0))
    acked = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 0)])
    linked(one(acked.pairs), m[0], acked, "success")
    redeliver = link.send(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=1)
    linked(one(redeliver.pairs), m[1], redeliver, "redelivered")
    linked(one(link.close()), theirs, None, "unanswered")


def test_message_delivered_twice_before_any_ack() -> None:
    link = Link()
    first = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 3))
    again = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 3), redelivery_count=1)
    linked(one(again.pairs), first, again, "redelivered")
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 3)])
    linked(one(ack.pairs), again, ack, "success")
    assert link.close() == []


def test_ack_with_request_id_is_answered_by_ack_response() -> None:
    link = Link()
    m = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 3))
    ack = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 3)], request_id=9)
    linked(one(ack.pairs), m, ack, "success")
    response = link.send(B2C, "ACK_RESPONSE", consumer_id=1, request_id=9)
    p = one(response.pairs)
    linked(p, ack, response, "success")
    assert (p.request_id, p.consumer_id) == (9, 1)

    m2 = link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(3, 4))
    ack2 = link.send(C2B, "ACK", consumer_id=1, ack_type=0, message_id=[mid(3, 4)], request_id=10)
    linked(one(ack2.pairs), m2, ack2, "success")
    failed = link.send(
        B2C,
        "ACK_RESPONSE",
        consumer_id=1,
        request_id=10,
        error=err("TransactionConflict"),
        message="conflict",
    )
    p = one(failed.pairs)
    linked(p, ack2, failed, "error")
    assert (p.error_code, p.error_message) == ("TransactionConflict", "conflict")
    assert link.close() == []


# --------------------------------------------------------------------------- topics


def test_observe_returns_the_topic_of_the_frame_or_of_its_entity() -> None:
    link = Link()
    assert link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1).topic == TOPIC
    assert link.send(C2B, "SEND", producer_id=1, sequence_id=0).topic == TOPIC
    assert link.send(C2B, "SEND", producer_id=2, sequence_id=0).topic is None  # unknown producer
    assert link.send(C2B, "LOOKUP", topic=OTHER, request_id=2).topic == OTHER
    _consumer(link, 4, OTHER)
    assert link.send(C2B, "FLOW", consumer_id=4, messagePermits=1).topic == OTHER
    assert link.send(B2C, "MESSAGE", consumer_id=4, message_id=mid(1, 1)).topic == OTHER
    assert link.send(B2C, "PING").topic is None


def test_pairs_carry_the_topic_of_their_producer_consumer_or_request() -> None:
    link = Link()
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1)
    created = link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p")
    assert one(created.pairs).topic == TOPIC
    link.send(C2B, "SEND", producer_id=1, sequence_id=0)
    receipt = link.send(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=0, message_id=mid(1, 0))
    assert one(receipt.pairs).topic == TOPIC
    _consumer(link, 4, OTHER)
    link.send(B2C, "MESSAGE", consumer_id=4, message_id=mid(1, 1))
    ack = link.send(C2B, "ACK", consumer_id=4, ack_type=0, message_id=[mid(1, 1)])
    assert one(ack.pairs).topic == OTHER
    link.send(C2B, "LOOKUP", topic=OTHER, request_id=9)
    assert one(link.send(B2C, "LOOKUP_RESPONSE", request_id=9).pairs).topic == OTHER


# --------------------------------------------------------------------------- entities


def _entity(link: Link, kind: str, entity_id: int) -> Entity:
    return (link.state.producers if kind == "producer" else link.state.consumers)[entity_id]


def test_entity_lifecycle() -> None:
    link = Link()
    made = link.send(
        C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1, producer_access_mode=1
    )
    link.send(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="assigned-name")
    refused = link.send(C2B, "PRODUCER", topic=OTHER, producer_id=2, request_id=2)
    link.send(B2C, "ERROR", request_id=2, error=err("ProducerBusy"), message="busy")
    link.send(C2B, "PRODUCER", topic=OTHER, producer_id=3, request_id=3, producer_name="mine")
    link.send(B2C, "PRODUCER_SUCCESS", request_id=3, producer_name="mine")
    waiting = link.send(C2B, "PRODUCER", topic=OTHER, producer_id=4, request_id=4)
    sub = link.send(
        C2B,
        "SUBSCRIBE",
        topic=TOPIC,
        subscription="sub",
        subType=3,
        consumer_id=1,
        request_id=5,
        consumer_name="cons",
    )
    link.send(B2C, "SUCCESS", request_id=5)
    link.send(
        C2B, "SUBSCRIBE", topic=OTHER, subscription="s2", subType=0, consumer_id=2, request_id=6
    )
    link.send(B2C, "SUCCESS", request_id=6)
    link.send(
        C2B, "SUBSCRIBE", topic=OTHER, subscription="s3", subType=2, consumer_id=3, request_id=7
    )
    link.send(B2C, "ERROR", request_id=7, error=err("ConsumerBusy"), message="exclusive")

    by_client = link.send(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=8)
    link.send(B2C, "SUCCESS", request_id=8)
    by_broker = link.send(B2C, "CLOSE_PRODUCER", producer_id=3, request_id=U64 - 1)
    c_by_client = link.send(C2B, "CLOSE_CONSUMER", consumer_id=1, request_id=9)
    link.send(B2C, "SUCCESS", request_id=9)
    c_by_broker = link.send(B2C, "CLOSE_CONSUMER", consumer_id=2, request_id=U64 - 1)
    link.close()

    p1, p2, p3, p4 = (_entity(link, "producer", i) for i in (1, 2, 3, 4))
    assert (p1.topic, p1.name, p1.access_mode, p1.state) == (
        TOPIC,
        "assigned-name",
        "Exclusive",
        "closed_by_client",
    )
    assert (p1.created_ts, p1.closed_ts) == (made.ts, by_client.ts)
    assert (p2.topic, p2.state, p2.created_ts, p2.closed_ts) == (OTHER, "failed", refused.ts, None)
    assert (p3.name, p3.state, p3.closed_ts) == ("mine", "closed_by_broker", by_broker.ts)
    assert (p4.state, p4.created_ts) == ("pending", waiting.ts)
    c1, c2, c3 = (_entity(link, "consumer", i) for i in (1, 2, 3))
    assert (c1.kind, c1.topic, c1.subscription, c1.sub_type, c1.name) == (
        "consumer",
        TOPIC,
        "sub",
        "Key_Shared",
        "cons",
    )
    assert (c1.state, c1.created_ts, c1.closed_ts) == ("closed_by_client", sub.ts, c_by_client.ts)
    assert (c2.sub_type, c2.state, c2.closed_ts) == (
        "Exclusive",
        "closed_by_broker",
        c_by_broker.ts,
    )
    assert (c3.sub_type, c3.state) == ("Failover", "failed")
    summary = link.state.info.entities
    assert [(e.kind, e.entity_id) for e in summary] == [
        ("producer", 1),
        ("producer", 2),
        ("producer", 3),
        ("producer", 4),
        ("consumer", 1),
        ("consumer", 2),
        ("consumer", 3),
    ]


def test_flow_permits_and_delivered_count() -> None:
    link = Link()
    _consumer(link, 1)
    _consumer(link, 2, OTHER)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=1000)
    link.send(C2B, "FLOW", consumer_id=1, messagePermits=2**32 - 1)
    link.send(C2B, "FLOW", consumer_id=2, messagePermits=7)
    link.send(C2B, "FLOW", consumer_id=99, messagePermits=5)  # unknown consumer: ignored
    batch = MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=10
    )
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 0), metadata=batch)
    link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, 1))
    link.send(B2C, "MESSAGE", consumer_id=2, message_id=mid(1, 0))
    link.send(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=50)
    link.send(C2B, "SEND", producer_id=1, sequence_id=0)
    link.send(C2B, "SEND", producer_id=1, sequence_id=1, num_messages=4, metadata=batch)
    c1, c2 = link.state.consumers[1], link.state.consumers[2]
    assert (c1.permits, c1.delivered) == (1000 + 2**32 - 1, 11)
    assert (c2.permits, c2.delivered) == (7, 1)
    assert (c1.sent, link.state.producers[1].sent) == (0, 5)
    assert link.state.producers[1].permits == 0


# --------------------------------------------------------------------------- handshake


def test_handshake_summary() -> None:
    link = Link()
    link.send(
        C2B,
        "CONNECT",
        client_version="Pulsar-Java-v4.0.0",
        protocol_version=21,
        auth_method_name="token",
        auth_data=b"secret",
        proxy_to_broker_url="pulsar://broker-1:6650",
        original_principal="alice",
        feature_flags={
            "supports_auth_refresh": True,
            "supports_partial_producer": False,
            "supports_topic_watchers": True,
        },
    )
    link.send(
        B2C,
        "CONNECTED",
        server_version="Pulsar Server4.0.0",
        protocol_version=20,
        max_message_size=5 * 1024 * 1024,
        feature_flags={"supports_broker_entry_metadata": True},
    )
    s = link.state.info
    assert (s.client_version, s.client_protocol) == ("Pulsar-Java-v4.0.0", 21)
    assert (s.server_version, s.server_protocol) == ("Pulsar Server4.0.0", 20)
    assert s.auth_method == "token"
    assert s.proxy_to_broker_url == "pulsar://broker-1:6650"
    assert s.original_principal == "alice"
    assert s.max_message_size == 5 * 1024 * 1024
    assert s.feature_flags == ["supports_auth_refresh", "supports_topic_watchers"]


def test_handshake_summary_minimal_and_legacy_auth_method() -> None:
    link = Link()
    link.send(C2B, "CONNECT", client_version="old", auth_method=1)
    link.send(B2C, "CONNECTED", server_version="b")
    s = link.state.info
    assert (s.client_version, s.server_version) == ("old", "b")
    assert s.auth_method == "AuthMethodYcaV1"
    assert (s.client_protocol, s.server_protocol, s.max_message_size) == (None, None, None)
    assert (s.proxy_to_broker_url, s.original_principal, s.feature_flags) == (None, None, [])


# --------------------------------------------------------------------------- bound


def _flood(link: Link, kind: str, i: int) -> Sent:
    if kind == "request_id":
        return link.send(C2B, "LOOKUP", topic=TOPIC, request_id=i)
    if kind == "delivery":
        return link.send(B2C, "MESSAGE", consumer_id=1, message_id=mid(1, i))
    if kind == "send":
        return link.send(C2B, "SEND", producer_id=1, sequence_id=i)
    return link.send(C2B, "PING")


@pytest.mark.parametrize(
    ("kind", "bound"),
    [
        ("request_id", 20),
        ("delivery", 20),
        ("delivery", 5),
        ("request_id", 5),
        ("send", 20),
        ("ping", 20),
    ],
)
def test_pending_requests_are_bounded_and_the_oldest_reported_unanswered(
    monkeypatch: pytest.MonkeyPatch, kind: str, bound: int
) -> None:
    monkeypatch.setattr(bounds, "MAX_PENDING", bound)
    link = Link()
    total = 10 * bound
    sent: list[Sent] = []
    shed: list[Pair] = []
    for i in range(total):
        s = _flood(link, kind, i)
        sent.append(s)
        shed.extend(s.pairs)
        assert link.state._pending <= bound, i  # memory stays bounded at every step
    left = link.close()
    assert len(left) <= bound
    assert all(p.response is None and p.outcome == "unanswered" for p in shed + left)
    # Every request is reported exactly once, the oldest first (shed while running).
    assert [kept(p.request) for p in shed + left] == [kept(s.frame) for s in sent]
    assert len(shed) >= total - bound
    assert link.state.overflowed > 0


@pytest.mark.parametrize("pairs", [True, False])
def test_answered_sends_leave_no_state_behind(pairs: bool) -> None:
    """Memory follows pending requests, not the messages of the connection: after 2,000
    SENDs each answered by its SEND_RECEIPT, nothing of them is kept (with or without
    pairs being made)."""
    link = Link()
    link.state = ConversationState(1, pairs=pairs)
    answered = []
    for i in range(2000):
        link.send(C2B, "SEND", producer_id=1, sequence_id=i)
        receipt = link.send(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=i, message_id=mid(3, i))
        answered.extend(receipt.pairs)
    assert link.state._pending == 0
    assert link.state._sends == {}
    assert len(answered) == (2000 if pairs else 0)
    assert all(p.outcome == "success" for p in answered)
    assert link.close() == []


# --------------------------------------------------------------------------- cumulative acks: work


def _cumulative_work(n: int) -> tuple[int, list[Pair]]:
    """n deliveries of (5, 10..), then n cumulative acks of ids below them all (issue 42's
    f9: each covers nothing), then one covering everything. The comparisons the n acks made
    (tests/support/counted.py), and the pairs of the last ack."""
    from tests.support import counted as K

    state = ConversationState(1)
    ts = T0
    for i in range(n):
        ts += 1
        msg = K.body(consumer_id=1, message_id=K.mid(5, 10 + (i * 7919) % n))
        state.observe(K.frame("MESSAGE", msg, ts, i, B2C))
    K.Counted.calls = 0
    for i in range(n):
        ts += 1
        ack = K.body(consumer_id=1, ack_type=1, message_id=[K.mid(5, i % 10)])
        _, facts = state.observe(K.frame("ACK", ack, ts, n + i, C2B))
        assert [p.outcome.value for p in facts if type(p) is Pair] == ["unmatched"]
    work = K.Counted.calls
    ack = K.body(consumer_id=1, ack_type=1, message_id=[K.mid(5, 10 + n)])
    _, facts = state.observe(K.frame("ACK", ack, ts + 1, 2 * n, C2B))
    return work, [p for p in facts if type(p) is Pair]


def test_a_cumulative_ack_costs_what_it_covers_not_what_is_pending() -> None:
    """Issue 42 item 1: a cumulative ack compared its id with every pending delivery (n acks
    over n pending: n² comparisons, 330 s for f9's 12,000). Now a few per ack; and the ack
    covering all still pairs every delivery, in delivery order."""
    n = 400
    work, pairs = _cumulative_work(n)
    assert work <= 10 * n  # a scan: about 3 n² (480,000)
    entries = [(i * 7919) % n + 10 for i in range(n)]  # as delivered (7919 is prime)
    assert [(p.ledger_id, p.entry_id) for p in pairs] == [(5, e) for e in entries]
    assert {p.outcome.value for p in pairs} == {"success"}


def test_a_request_sent_with_its_id_in_flight_is_a_reused_fact_and_both_wait() -> None:
    """Two LOOKUPs numbered 5 and one answer: one RequestIdReused (the second LOOKUP, right
    after its frame), the answer pairs with the oldest, the other is unanswered at close;
    every fact here is of the request_id kind (what the diagnoses read)."""
    link = Link()
    first = link.send(C2B, "LOOKUP", topic=TOPIC, request_id=5)
    second = link.send(C2B, "LOOKUP", topic=TOPIC, request_id=5)
    assert [f.request for f in link.reused] == [second.frame]
    assert link.reused[0].conn_id == 1
    answer = link.send(B2C, "LOOKUP_RESPONSE", request_id=5, response=1)
    linked(one(answer.pairs), first, answer, "success")
    (left,) = link.close()
    assert left.request is not None and kept(left.request) == kept(second.frame)
    assert left.outcome == "unanswered"
    assert is_request_pair(left) and is_request_pair(one(answer.pairs))


def test_only_request_id_pairs_are_request_pairs() -> None:
    """SEND/receipt, MESSAGE/ACK, PING/PONG and stray acks are not request pairs; an ACK
    carrying a request_id left unanswered is one (it waits for its ACK_RESPONSE)."""
    link = Link()
    link.send(C2B, "SEND", producer_id=1, sequence_id=0)
    receipt = link.send(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=0, message_id=mid(3, 0))
    link.send(C2B, "PING")
    pong = link.send(B2C, "PONG")
    link.send(B2C, "MESSAGE", consumer_id=2, message_id=mid(3, 0))
    ack = link.send(C2B, "ACK", consumer_id=2, ack_type=0, message_id=[mid(3, 0)], request_id=9)
    stray = link.send(C2B, "ACK", consumer_id=2, ack_type=0, message_id=[mid(4, 0)])
    for p in (one(receipt.pairs), one(pong.pairs), one(ack.pairs), one(stray.pairs)):
        assert not is_request_pair(p), p.outcome
    (waiting,) = link.close()  # the ACK's own request_id: no ACK_RESPONSE came
    assert kept(waiting.request) == kept(ack.frame) and is_request_pair(waiting)
