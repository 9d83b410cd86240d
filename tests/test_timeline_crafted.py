"""Timeline, entities and conversation summaries end to end, on crafted captures.

Each capture is built by tests/support/crafted.py, one frame per TCP segment; the expected
pairs are written here by hand from the exchange the test encoded, and every timestamp and
offset comes from where the frame was put (its packet number, its stream offset), never from
the dissector. Also: port reuse keeps pairings per connection, and authentication data never
reaches any table written by the CLI.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dissector.frontends.cli import main
from dissector.pulsar.wire import BaseCommand, MessageMetadata
from dissector.read import Capture, read_capture
from dissector.tables.schema import SCHEMAS
from tests.support.crafted import (
    B2C,
    C2B,
    Conn,
    Msg,
    Placed,
    Session,
    msg,
    packet_number,
    ts_of,
    write_pcap,
)

TOPIC = "persistent://public/default/timeline"
IN = "persistent://public/default/timeline-in"
OTHER = "persistent://public/default/timeline-busy"
U64 = 2**64
BIG_PID = U64 - 5  # ids of 2**63 and above are int64-negative in the tables
BIG_SEQ = 2**63 + 11
BIG_LEDGER = 2**63 + 1
SECRET = b"s3cr3t-connect-auth-data-A1"
SECRET2 = b"s3cr3t-auth-response-data-B2"
ORIGINAL_SECRET = "s3cr3t-original-auth-data-C3"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_SERVER_ERROR = BaseCommand.DESCRIPTOR.file.enum_types_by_name["ServerError"]


def err(name: str) -> int:
    return _SERVER_ERROR.values_by_name[name].number


def i64(value: int) -> int:
    return value - U64 if value >= 2**63 else value


def us(value: dt.datetime) -> int:
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def mid(ledger: int, entry: int) -> dict[str, int]:
    return {"ledgerId": ledger, "entryId": entry}


def delivery(consumer_id: int, ledger: int, entry: int, **fields: Any) -> Msg:
    return msg(
        B2C,
        "MESSAGE",
        consumer_id=consumer_id,
        message_id=mid(ledger, entry),
        payload=f"m{ledger}:{entry}".encode(),
        checksum=False,
        **fields,
    )


# --------------------------------------------------------------------------- the exchange


def exchange() -> list[Msg]:
    """Client and broker frames in the order they are sent (indexes used by EXPECTED)."""
    meta = MessageMetadata(producer_name="assigned", sequence_id=BIG_SEQ + 1, publish_time=1)
    return [
        msg(
            C2B,
            "CONNECT",
            client_version="crafted-client-9",
            protocol_version=21,
            auth_method_name="token",
            auth_data=SECRET,
            original_auth_data=ORIGINAL_SECRET,
            proxy_to_broker_url="pulsar://broker-2:6650",
            original_principal="alice",
            feature_flags={"supports_auth_refresh": True, "supports_topic_watchers": True},
        ),  # 0
        msg(
            B2C,
            "CONNECTED",
            server_version="crafted-broker-9",
            protocol_version=20,
            max_message_size=1 << 20,
        ),  # 1
        msg(B2C, "AUTH_CHALLENGE", challenge={"auth_method_name": "token", "auth_data": b"?"}),
        msg(C2B, "AUTH_RESPONSE", response={"auth_method_name": "token", "auth_data": SECRET2}),
        msg(C2B, "LOOKUP", topic=TOPIC, request_id=1),  # 4
        msg(B2C, "LOOKUP_RESPONSE", request_id=1, response=1, brokerServiceUrl="pulsar://b:6650"),
        msg(
            C2B,
            "PRODUCER",
            topic=TOPIC,
            producer_id=BIG_PID,
            request_id=2,
            producer_access_mode=1,
        ),  # 6
        msg(B2C, "PRODUCER_SUCCESS", request_id=2, producer_name="assigned"),
        msg(C2B, "SEND", producer_id=BIG_PID, sequence_id=BIG_SEQ, payload=b"one"),  # 8
        msg(
            C2B,
            "SEND",
            producer_id=BIG_PID,
            sequence_id=BIG_SEQ + 1,
            payload=b"two",
            metadata=meta,
            checksum=0x0BAD0BAD,  # a corrupt frame: the broker refuses it
        ),  # 9
        msg(
            B2C,
            "SEND_RECEIPT",
            producer_id=BIG_PID,
            sequence_id=BIG_SEQ,
            message_id=mid(BIG_LEDGER, 4),
        ),  # 10
        msg(
            B2C,
            "SEND_ERROR",
            producer_id=BIG_PID,
            sequence_id=BIG_SEQ + 1,
            error=err("ChecksumError"),
            message="checksum mismatch",
        ),  # 11
        msg(
            C2B, "SUBSCRIBE", topic=IN, subscription="sub", subType=1, consumer_id=3, request_id=3
        ),  # 12
        msg(B2C, "SUCCESS", request_id=3),
        msg(C2B, "FLOW", consumer_id=3, messagePermits=100),  # 14
        delivery(3, 7, 1),
        delivery(3, 7, 2),
        msg(C2B, "ACK", consumer_id=3, ack_type=1, message_id=[mid(7, 2)]),  # 17 cumulative
        delivery(3, 7, 3),
        delivery(3, 7, 3, redelivery_count=1),  # 19
        msg(C2B, "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=3, message_ids=[mid(7, 3)]),
        msg(B2C, "PING"),  # 21
        msg(C2B, "PONG"),
        msg(C2B, "PING"),  # 23
        msg(B2C, "PONG"),
        msg(C2B, "PRODUCER", topic=OTHER, producer_id=9, request_id=4),  # 25
        msg(B2C, "ERROR", request_id=4, error=err("ProducerBusy"), message="busy"),
        msg(C2B, "GET_SCHEMA", request_id=5, topic=TOPIC),  # 27: never answered
        msg(B2C, "SUCCESS", request_id=77),  # 28: answers nothing in the capture
        msg(C2B, "CLOSE_CONSUMER", consumer_id=3, request_id=6),  # 29
        msg(B2C, "SUCCESS", request_id=6),  # 30
    ]


@dataclass(frozen=True)
class Want:
    """One expected timeline row: indexes into exchange() and the values that differ."""

    request: int | None
    response: int | None
    outcome: str = "success"
    columns: tuple[tuple[str, Any], ...] = ()


def want(request: int | None, response: int | None, outcome: str = "success", **cols: Any) -> Want:
    return Want(request, response, outcome, tuple(cols.items()))


EXPECTED = [
    want(0, 1),
    want(2, 3),
    want(4, 5, request_id=1),
    want(6, 7, request_id=2, producer_id=i64(BIG_PID)),
    want(
        8,
        10,
        producer_id=i64(BIG_PID),
        sequence_id=i64(BIG_SEQ),
        ledger_id=i64(BIG_LEDGER),
        entry_id=4,
    ),
    want(
        9,
        11,
        "error",
        producer_id=i64(BIG_PID),
        sequence_id=i64(BIG_SEQ + 1),
        error_code="ChecksumError",
        error_message="checksum mismatch",
    ),
    want(12, 13, request_id=3, consumer_id=3),
    want(15, 17, consumer_id=3, ledger_id=7, entry_id=1),
    want(16, 17, consumer_id=3, ledger_id=7, entry_id=2),
    want(18, 19, "redelivered", consumer_id=3, ledger_id=7, entry_id=3),
    want(19, 20, "redelivered", consumer_id=3, ledger_id=7, entry_id=3),
    want(21, 22),
    want(23, 24),
    want(
        25,
        26,
        "error",
        request_id=4,
        producer_id=9,
        error_code="ProducerBusy",
        error_message="busy",
    ),
    want(None, 28, "unmatched", request_id=77),
    want(29, 30, request_id=6, consumer_id=3),
    want(27, None, "unanswered", request_id=5),
]

_ID_COLUMNS = (
    "request_id",
    "producer_id",
    "consumer_id",
    "sequence_id",
    "ledger_id",
    "entry_id",
    "error_code",
    "error_message",
    "first_ack_packet",  # repeated acks only: none here
)


@dataclass
class Scenario:
    session: Session
    path: Path
    cap: Capture

    def placed(self, index: int) -> Placed:
        return self.session.placed[index]

    def packet(self, index: int) -> int:
        p = self.placed(index)
        return packet_number(self.session.segs, self.session.conn, p.msg.direction, p.offset)

    def expected_row(self, w: Want) -> dict[str, Any]:
        req = None if w.request is None else self.placed(w.request)
        resp = None if w.response is None else self.placed(w.response)
        req_ts = None if w.request is None else ts_of(self.packet(w.request))
        resp_ts = None if w.response is None else ts_of(self.packet(w.response))
        first = req_ts if req_ts is not None else resp_ts
        assert first is not None
        row: dict[str, Any] = {
            "ts": first,
            "conn_id": 1,
            "request_command": None if req is None else req.msg.name,
            "response_command": None if resp is None else resp.msg.name,
            "request_direction": None if req is None else req.msg.direction.value,
            "request_packet": None if w.request is None else self.packet(w.request),
            "response_packet": None if w.response is None else self.packet(w.response),
            "request_ts": req_ts,
            "response_ts": resp_ts,
            "latency_us": None if req_ts is None or resp_ts is None else resp_ts - req_ts,
            "outcome": w.outcome,
            "request_offset": None if req is None else req.offset,
            "response_offset": None if resp is None else resp.offset,
            **dict.fromkeys(_ID_COLUMNS),
        }
        row.update(w.columns)
        return row


def _timeline_rows(cap: Capture) -> list[dict[str, Any]]:
    out = []
    for r in cap.arrow["timeline"].to_pylist():
        # topic: checked below; community_id: tests/flow/test_community_id.py (against tshark)
        r = {k: v for k, v in r.items() if k not in ("topic", "community_id")}
        for k in ("ts", "request_ts", "response_ts"):
            r[k] = None if r[k] is None else us(r[k])
        out.append(r)
    return out


def _key(row: dict[str, Any]) -> tuple[int, int, int]:
    return (row["conn_id"], row["request_packet"] or 0, row["response_packet"] or 0)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    s = Session()
    s.handshake()
    s.exchange(exchange())
    s.close()
    path = write_pcap(tmp_path_factory.mktemp("timeline") / "timeline.pcap", s.segs).path
    return Scenario(s, path, read_capture(path))


# --------------------------------------------------------------------------- timeline


def test_timeline_rows_are_the_encoded_pairs(scenario: Scenario) -> None:
    got = sorted(_timeline_rows(scenario.cap), key=_key)
    expected = sorted((scenario.expected_row(w) for w in EXPECTED), key=_key)
    assert got == expected


def test_outcome_counts(scenario: Scenario) -> None:
    got = Counter(scenario.cap.arrow["timeline"].column("outcome").to_pylist())
    assert got == Counter(w.outcome for w in EXPECTED)
    assert got == {"success": 11, "error": 2, "redelivered": 2, "unmatched": 1, "unanswered": 1}


def test_latency_is_the_difference_of_the_frames_timestamps(scenario: Scenario) -> None:
    frames = {
        (f["conn_id"], f["direction"], f["stream_offset"]): f
        for f in scenario.cap.arrow["frames"].to_pylist()
    }
    answered = 0
    for row in scenario.cap.arrow["timeline"].to_pylist():
        if row["request_offset"] is None or row["response_offset"] is None:
            assert row["latency_us"] is None
            continue
        req = frames[row["conn_id"], row["request_direction"], row["request_offset"]]
        assert req["command"] == row["request_command"]
        # The response went the other way, except a redelivery (MESSAGE answered by MESSAGE).
        (resp,) = (
            f
            for d in (C2B.value, B2C.value)
            if (f := frames.get((row["conn_id"], d, row["response_offset"]))) is not None
            and f["command"] == row["response_command"]
            and (d != row["request_direction"] or f["command"] == "MESSAGE")
        )
        assert row["latency_us"] == us(resp["ts"]) - us(req["ts"])
        assert row["latency_us"] == ts_of(resp["last_packet"]) - ts_of(req["last_packet"])
        assert row["latency_us"] > 0
        answered += 1
    assert answered == sum(1 for w in EXPECTED if w.request is not None and w.response is not None)


def test_timeline_topic_comes_from_the_request_or_its_entity(scenario: Scenario) -> None:
    rows = scenario.cap.arrow["timeline"].to_pylist()
    topics = {(r["request_command"], r["response_command"]): r["topic"] for r in rows}
    assert topics["LOOKUP", "LOOKUP_RESPONSE"] == TOPIC
    assert topics["PRODUCER", "PRODUCER_SUCCESS"] == TOPIC
    assert topics["SEND", "SEND_RECEIPT"] == TOPIC
    assert topics["SUBSCRIBE", "SUCCESS"] == IN
    assert topics["MESSAGE", "ACK"] == IN
    assert topics["PRODUCER", "ERROR"] == OTHER
    assert topics["CONNECT", "CONNECTED"] is None


# --------------------------------------------------------------------------- entities


def test_entities_table(scenario: Scenario) -> None:
    got = sorted(
        (
            {
                k: (us(v) if isinstance(v, dt.datetime) else v)
                for k, v in r.items()
                if k != "community_id"  # checked in tests/flow/test_community_id.py
            }
            for r in scenario.cap.arrow["entities"].to_pylist()
        ),
        key=lambda r: (r["kind"], r["entity_id"]),
    )
    common = {"conn_id": 1, "closed_ts": None, "permits": 0, "delivered": 0, "sent": 0}
    producer = {**common, "kind": "producer", "subscription": None, "sub_type": None}
    assert got == [
        {
            **common,
            "ts": ts_of(scenario.packet(12)),
            "kind": "consumer",
            "entity_id": 3,
            "topic": IN,
            "name": None,
            "subscription": "sub",
            "sub_type": "Shared",
            "access_mode": None,
            "state": "closed_by_client",
            "closed_ts": ts_of(scenario.packet(29)),
            "permits": 100,
            "delivered": 4,  # 7:1, 7:2, 7:3 and its redelivery
        },
        {
            **producer,
            "ts": ts_of(scenario.packet(6)),
            "entity_id": i64(BIG_PID),
            "topic": TOPIC,
            "name": "assigned",
            "access_mode": "Exclusive",
            "state": "created",
            "sent": 2,
        },
        {
            **producer,
            "ts": ts_of(scenario.packet(25)),
            "entity_id": 9,
            "topic": OTHER,
            "name": None,
            "access_mode": None,  # not sent
            "state": "failed",
        },
    ]


# --------------------------------------------------------------------------- conversations


def test_conversation_summary_columns(scenario: Scenario) -> None:
    (conv,) = scenario.cap.arrow["conversations"].to_pylist()
    expected = {
        "client_version": "crafted-client-9",
        "server_version": "crafted-broker-9",
        "client_protocol": 21,
        "server_protocol": 20,
        "auth_method": "token",
        "proxy_to_broker_url": "pulsar://broker-2:6650",
        "original_principal": "alice",
        "max_message_size": 1 << 20,
        "feature_flags": ["supports_auth_refresh", "supports_topic_watchers"],
        "consumers": 1,
    }
    assert {k: conv[k] for k in expected} == expected
    anomalies = scenario.cap.arrow["anomalies"].to_pylist()
    assert "pulsar.bad_checksum" in {a["code"] for a in anomalies}  # the corrupt SEND
    assert conv["anomalies"] == sum(1 for a in anomalies if a["conn_id"] == 1) >= 1


def _reuse_session(conn: Conn, msgs: list[Msg], *, close: bool) -> Session:
    s = Session(conn)
    s.handshake()
    s.exchange(msgs)
    if close:
        s.close()
    return s


def test_port_reuse_keeps_pairings_per_connection(tmp_path: Path) -> None:
    one = _reuse_session(
        Conn(),
        [
            msg(C2B, "CONNECT", client_version="first", protocol_version=21),
            msg(B2C, "CONNECTED", server_version="broker-a"),
            msg(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1),
            msg(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="p"),
            msg(C2B, "LOOKUP", topic=OTHER, request_id=2),  # answered on the next connection
            msg(C2B, "PING"),
        ],
        close=False,
    )
    two = _reuse_session(
        Conn(client_isn=3_000_000_000, broker_isn=77),  # same ports, new SYN
        [
            msg(C2B, "CONNECT", client_version="second", protocol_version=21),
            msg(B2C, "CONNECTED", server_version="broker-b"),
            msg(B2C, "LOOKUP_RESPONSE", request_id=2, response=1),
            msg(B2C, "PONG"),
            msg(
                C2B, "SUBSCRIBE", topic=IN, subscription="s", subType=0, consumer_id=1, request_id=1
            ),
            msg(B2C, "SUCCESS", request_id=1),
        ],
        close=True,
    )
    cap = read_capture(write_pcap(tmp_path / "reuse.pcap", [*one.segs, *two.segs]).path)

    convs = cap.arrow["conversations"].to_pylist()
    assert [c["ended"] for c in convs] == ["port_reuse", "fin"]
    columns = ("conn_id", "client_version", "server_version", "producers", "consumers", "topics")
    assert [{k: c[k] for k in columns} for c in convs] == [
        {
            "conn_id": 1,
            "client_version": "first",
            "server_version": "broker-a",
            "producers": 1,
            "consumers": 0,
            "topics": [TOPIC],
        },
        {
            "conn_id": 2,
            "client_version": "second",
            "server_version": "broker-b",
            "producers": 0,
            "consumers": 1,
            "topics": [IN],
        },
    ]
    assert [c["anomalies"] for c in convs] == [0, 0]

    rows = cap.arrow["timeline"].to_pylist()
    got = sorted(
        ((r["conn_id"], r["request_command"], r["response_command"], r["outcome"]) for r in rows),
        key=str,
    )
    assert got == sorted(
        [
            (1, "CONNECT", "CONNECTED", "success"),
            (1, "PRODUCER", "PRODUCER_SUCCESS", "success"),
            (1, "LOOKUP", None, "unanswered"),
            (1, "PING", None, "unanswered"),
            (2, "CONNECT", "CONNECTED", "success"),
            (2, None, "LOOKUP_RESPONSE", "unmatched"),
            (2, None, "PONG", "unmatched"),
            (2, "SUBSCRIBE", "SUCCESS", "success"),
        ],
        key=str,
    )


def test_port_reuse_entities_stay_with_their_connection(tmp_path: Path) -> None:
    one = _reuse_session(
        Conn(),
        [
            msg(C2B, "CONNECT", client_version="first"),
            msg(C2B, "PRODUCER", topic=TOPIC, producer_id=1, request_id=1),
        ],
        close=False,
    )
    two = _reuse_session(
        Conn(client_isn=3_000_000_000, broker_isn=77),
        [
            msg(C2B, "CONNECT", client_version="second"),
            msg(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name="late"),
        ],
        close=True,
    )
    cap = read_capture(write_pcap(tmp_path / "reuse.pcap", [*one.segs, *two.segs]).path)
    (entity,) = cap.arrow["entities"].to_pylist()
    assert (entity["conn_id"], entity["state"], entity["name"]) == (1, "pending", None)
    assert us(entity["ts"]) == ts_of(5)  # SYN, SYN-ACK, ACK, CONNECT, then the PRODUCER
    rows = cap.arrow["timeline"].to_pylist()
    got = sorted(
        ((r["conn_id"], r["request_command"], r["response_command"], r["outcome"]) for r in rows),
        key=str,
    )
    assert got == sorted(
        [
            (1, "CONNECT", None, "unanswered"),
            (1, "PRODUCER", None, "unanswered"),
            (2, "CONNECT", None, "unanswered"),
            (2, None, "PRODUCER_SUCCESS", "unmatched"),
        ],
        key=str,
    )


# --------------------------------------------------------------------------- secrets


def _forms(secret: bytes) -> list[bytes]:
    """Ways a leaked secret could be written: raw, hex (both cases), base64."""
    return [
        secret,
        secret.hex().encode(),
        secret.hex().upper().encode(),
        base64.b64encode(secret),
        base64.b64encode(secret).rstrip(b"="),
    ]


SECRETS = [*_forms(SECRET), *_forms(SECRET2), *_forms(ORIGINAL_SECRET.encode())]


def test_the_capture_holds_the_secrets(scenario: Scenario) -> None:
    data = b"".join(seg.payload for seg in scenario.session.segs)
    assert SECRET in data and SECRET2 in data and ORIGINAL_SECRET.encode() in data


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("table", sorted(SCHEMAS))
def test_secrets_appear_in_no_table(
    scenario: Scenario, tmp_path: Path, table: str, fmt: str
) -> None:
    out = tmp_path / f"{table}.{fmt}"
    args = ["read", str(scenario.path), "--table", table, "--format", fmt, "-o", str(out)]
    assert main(args) == 0
    data = out.read_bytes()
    if table != "anomalies" or fmt == "csv":
        assert data  # something was written (csv: at least the header)
    rows: pa.Table = scenario.cap.arrow[table]
    assert table == "anomalies" or rows.num_rows > 0  # the table is not trivially empty
    for form in SECRETS:
        assert form not in data, (table, fmt, form)


def test_secrets_appear_in_no_text_line(
    scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["read", str(scenario.path)]) == 0
    text = capsys.readouterr().out.encode()
    assert b"AUTH_RESPONSE" in text and b"CONNECT" in text
    for form in SECRETS:
        assert form not in text, form


def test_a_request_id_in_flight_twice_pairs_each_request_with_its_answer(tmp_path: Path) -> None:
    """pulsar-client 3.13 (C++ core 4.2.0) numbers lookups and other requests with two
    counters: at a partitioned consumer's close, Apache's broker saw PARTITIONED_METADATA and
    CLOSE_CONSUMER both with request_id 10 in flight. Each answer goes to the request it
    answers by its type (a SUCCESS to the CLOSE_CONSUMER); none is lost."""
    s = _reuse_session(
        Conn(),
        [
            msg(C2B, "CONNECT", client_version="two-counters", protocol_version=20),
            msg(B2C, "CONNECTED", server_version="broker"),
            msg(C2B, "PARTITIONED_METADATA", topic=TOPIC, request_id=10),
            msg(C2B, "CLOSE_CONSUMER", consumer_id=1, request_id=10),
            msg(B2C, "PARTITIONED_METADATA_RESPONSE", request_id=10, partitions=3),
            msg(B2C, "SUCCESS", request_id=10),
            msg(C2B, "LOOKUP", topic=TOPIC, request_id=11),
            msg(C2B, "LOOKUP", topic=OTHER, request_id=11),
            msg(B2C, "LOOKUP_RESPONSE", request_id=11, response=1),
        ],
        close=True,
    )
    rows = read_capture(write_pcap(tmp_path / "twice.pcap", s.segs).path).arrow["timeline"]
    got = [
        (r["request_command"], r["request_id"], r["topic"], r["response_command"], r["outcome"])
        for r in rows.to_pylist()
        if r["request_command"] != "CONNECT"
    ]
    assert sorted(got, key=str) == sorted(
        [
            ("PARTITIONED_METADATA", 10, TOPIC, "PARTITIONED_METADATA_RESPONSE", "success"),
            ("CLOSE_CONSUMER", 10, None, "SUCCESS", "success"),
            ("LOOKUP", 11, TOPIC, "LOOKUP_RESPONSE", "success"),  # the first asked, answered
            ("LOOKUP", 11, OTHER, None, "unanswered"),
        ],
        key=str,
    )


def test_a_consumer_closed_by_the_broker_and_subscribed_again_is_two_entities(
    tmp_path: Path,
) -> None:
    """Apache's broker answers a SEEK by closing the consumer (CLOSE_CONSUMER, request_id
    -1); the client subscribes again with the same consumer_id: the first life stays in the
    entities table, closed by the broker, with what was delivered to it."""
    subscribe: dict[str, Any] = {"topic": IN, "subscription": "s", "subType": 0, "consumer_id": 4}

    def message(entry: int) -> Msg:
        return msg(B2C, "MESSAGE", consumer_id=4, message_id={"ledgerId": 7, "entryId": entry},
                   payload=b"m", checksum=False)  # fmt: skip

    s = _reuse_session(
        Conn(),
        [
            msg(C2B, "CONNECT", client_version="c", protocol_version=20),
            msg(B2C, "CONNECTED", server_version="b"),
            msg(C2B, "SUBSCRIBE", request_id=1, **subscribe),
            msg(B2C, "SUCCESS", request_id=1),
            message(0),
            msg(C2B, "SEEK", consumer_id=4, request_id=2, message_publish_time=1),
            msg(B2C, "SUCCESS", request_id=2),
            msg(B2C, "CLOSE_CONSUMER", consumer_id=4, request_id=U64 - 1),
            msg(C2B, "SUBSCRIBE", request_id=3, **subscribe),
            msg(B2C, "SUCCESS", request_id=3),
            message(0),
            message(1),
            msg(C2B, "CLOSE_CONSUMER", consumer_id=4, request_id=4),
            msg(B2C, "SUCCESS", request_id=4),
        ],
        close=True,
    )
    cap = read_capture(write_pcap(tmp_path / "again.pcap", s.segs).path)
    rows = cap.arrow["entities"].to_pylist()
    assert [(r["entity_id"], r["state"], r["delivered"]) for r in rows] == [
        (4, "closed_by_broker", 1),
        (4, "closed_by_client", 2),
    ]
    assert rows[0]["closed_ts"] <= rows[1]["ts"]
    assert cap.arrow["conversations"].to_pylist()[0]["consumers"] == 2
