"""The Go client (apache/pulsar-client-go) against Apache Pulsar's own broker, on the wire.

The Go client's own record (tests/support/gopeer/main.go) is the truth: the producer, sequence
id, value and MessageID of every message it sent, and the MessageID, value, properties,
publish time, broker publish time and index (Message.BrokerPublishTime() and Index()) of
every message it received and acknowledged. One capture (tcpdump on lo, complete when every
connection's end is in the file: an event) holds one run per RUNS entry, each on a topic of
its own: messages one by one, batches cut by count, each codec the Go client has (LZ4, ZLIB,
ZSTD; it has no SNAPPY), and chunked messages (ChunkMaxMessageSize below the message size).
The Go client's own ways, written from its record and its source, not from our output: a
message sent without batching has MessageID batch index 0 of a batch of 1 and partition 0 on
a topic without partitions (on the wire: no batch, partition -1); a chunked message's id is
its last chunk's, with its first chunk's inside.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dissector
from tests.support.apache.broker import ApacheBroker
from tests.support.capture import Tcpdump, wait_closed
from tests.support.cli import cli
from tests.support.gopeer.run import run_go

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

#: (scenario, compression, count, size, chunk): main.go's header says what each means.
RUNS = (
    ("plain", "none", 6, 1, 0),
    ("plain", "zstd", 3, 1, 0),
    ("batch", "none", 3, 4, 0),
    ("batch", "lz4", 2, 4, 0),
    ("batch", "zlib", 2, 4, 0),
    ("batch", "zstd", 2, 4, 0),
    ("chunk", "none", 2, 2500, 1000),
)

Run = tuple[Path, list[dict[str, Any]], dissector.Capture]
Key = tuple[Any, ...]


@pytest.fixture(scope="module")
def run(apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """(capture, the Go client's records, one per RUNS entry, our tables of the capture)."""
    cap = tmp_path_factory.mktemp("go") / "go_client.pcap"
    port = apache_broker.port
    records = []
    with Tcpdump(cap, f"tcp port {port}"):  # returns once tcpdump is listening
        for scenario, compression, count, size, chunk in RUNS:
            topic = (
                f"persistent://public/default/go-{scenario}-{compression}-{uuid.uuid4().hex[:8]}"
            )
            records.append(
                run_go(
                    apache_broker.url,
                    topic,
                    "go-sub",
                    scenario=scenario,
                    compression=compression,
                    count=count,
                    size=size,
                    chunk=chunk,
                )
            )
        assert wait_closed(cap, (port,), timeout=120.0), "a connection did not end"
    return cap, records, dissector.read_capture(cap, ports=[port], fields=True)


def _sha(hex_value: str) -> str:
    return hashlib.sha256(bytes.fromhex(hex_value)).hexdigest()


def _rows(frame: Any, **equal: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows whose columns equal `equal`, nulls as None."""
    for column, value in equal.items():
        frame = frame[frame[column] == value]
    rows: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return rows


def _ms(ts: Any) -> int:
    return int(ts.value // 1_000_000)


def _entries(entry: dict[str, Any]) -> list[tuple[int, int]]:
    """The (ledger, entry) of every entry a message was stored in (a chunk each)."""
    mid = entry["message_id"]
    first = mid.get("first_chunk") or mid
    return [(mid["ledger_id"], e) for e in range(first["entry_id"], mid["entry_id"] + 1)]


def _wire_batch_index(record: dict[str, Any], entry: dict[str, Any]) -> int | None:
    """The batch index on the wire: only batching producers send batches (the Go client
    calls an unbatched message index 0 of a batch of 1)."""
    index: int | None = entry["message_id"]["batch_index"]
    return index if record["scenario"] == "batch" else None


def _codec(record: dict[str, Any]) -> str:
    return "NONE" if record["compression"] == "none" else str(record["compression"]).upper()


def test_the_records_are_whole(run: Run) -> None:
    _, records, _ = run
    for record, (scenario, _, count, size, chunk) in zip(records, RUNS, strict=True):
        messages = count * size if scenario == "batch" else count
        assert len(record["sent"]) == len(record["received"]) == messages, record["topic"]
        assert record["discarded"] == []
        assert sorted(e["value_hex"] for e in record["sent"]) == sorted(
            e["value_hex"] for e in record["received"]
        )
        for entry in record["received"]:
            assert entry["broker_publish_time"] is not None and entry["index"] is not None
        if scenario == "chunk":  # each message needs more than one chunk
            assert all(len(_entries(e)) == -(-size // chunk) for e in record["sent"])


def test_every_send_and_receipt_is_the_clients(run: Run) -> None:
    """SEND: (sequence id, messages in it); SEND_RECEIPT: (sequence id, ledger, entry)."""
    _, records, capture = run
    frames = capture.frames
    for record in records:
        sends: Counter[Key] = Counter()
        receipts: Counter[Key] = Counter()
        for key, group in _by_entry(record["sent"]).items():
            seq = min(e["sequence_id"] for e in group)
            if record["scenario"] == "chunk":
                sends[(seq, 1)] += len(key)
                receipts.update((seq, *chunk) for chunk in key)
            else:
                sends[(seq, len(group))] += 1
                receipts[(seq, *key[0])] += 1
        rows = _rows(frames, topic=record["topic"], command="SEND")
        assert Counter((r["sequence_id"], r["num_messages"]) for r in rows) == sends
        assert {r["checksum"] for r in rows} == {"valid"}
        rows = _rows(frames, topic=record["topic"], command="SEND_RECEIPT")
        got = Counter((r["sequence_id"], r["ledger_id"], r["entry_id"]) for r in rows)
        assert got == receipts, record["topic"]
        pairs = _rows(capture.timeline, topic=record["topic"], request_command="SEND")
        assert len(pairs) == sum(sends.values())
        assert {(p["response_command"], p["outcome"]) for p in pairs} == {
            ("SEND_RECEIPT", "success")
        }


def _by_entry(entries: list[dict[str, Any]]) -> dict[tuple[tuple[int, int], ...], list[Any]]:
    """The client's messages grouped by the entries that hold them (a batch, or a message's
    chunks)."""
    groups: dict[tuple[tuple[int, int], ...], list[Any]] = {}
    for entry in entries:
        groups.setdefault(tuple(_entries(entry)), []).append(entry)
    return groups


def test_every_produced_message_is_the_clients(run: Run) -> None:
    _, records, capture = run
    for record in records:
        rows = _rows(capture.messages, topic=record["topic"], kind="produced")
        chunked = record["scenario"] == "chunk"
        ours = Counter(
            (
                r["producer_name"],
                r["sequence_id"],
                r["payload_sha256"],
                r["key"],
                json.dumps(dict(r["properties"] or {}), sort_keys=True),
                r["compression"],
                r["batch_index"],
                r["chunked"],
                r["num_chunks"],
                r["complete"],
            )
            for r in rows
        )
        theirs = Counter(
            (
                e["producer"],
                e["sequence_id"],
                _sha(e["value_hex"]),
                e["key"],
                json.dumps(e["properties"], sort_keys=True),
                _codec(record),
                _wire_batch_index(record, e),
                chunked,
                len(_entries(e)) if chunked else None,
                True,
            )
            for e in record["sent"]
        )
        assert ours == theirs, record["topic"]


#: delivered column -> the field of the Go client's received entry that gives it.
DELIVERED = {
    "payload_sha256": "value_hex",
    "producer_name": "producer",
    "key": "key",
    "properties": "properties",
    "publish_time": "publish_time",
    "broker_entry_timestamp": "broker_publish_time",
    "broker_entry_index": "index",
    "redelivery_count": "redelivery_count",
}


def _as_the_client_says(column: str, value: Any) -> Any:
    """A delivered row's value in the record's terms (ms since the epoch, dicts, 0 for null)."""
    if column in ("publish_time", "broker_entry_timestamp"):
        return _ms(value)
    if column == "properties":
        return dict(value or {})
    return value or 0 if column == "redelivery_count" else value


def test_every_delivered_message_is_the_clients(run: Run) -> None:
    """The delivered rows (batches split, payloads decompressed, chunks joined): id, payload,
    and the broker entry metadata as the Go client's BrokerPublishTime() and Index()."""
    _, records, capture = run
    for record in records:
        rows = _rows(capture.messages, topic=record["topic"], kind="delivered")
        expected = {}
        for e in record["received"]:
            mid = e["message_id"]
            expected[(mid["ledger_id"], mid["entry_id"], _wire_batch_index(record, e))] = e
        got = Counter((r["ledger_id"], r["entry_id"], r["batch_index"]) for r in rows)
        assert got == Counter(list(expected)), record["topic"]
        for row in rows:
            entry = expected[(row["ledger_id"], row["entry_id"], row["batch_index"])]
            seen = {field: _as_the_client_says(c, row[c]) for c, field in DELIVERED.items()}
            said = {field: entry[field] for field in DELIVERED.values()}
            said["value_hex"] = _sha(entry["value_hex"])
            assert seen == said, row
            assert (row["compression"], row["complete"]) == (_codec(record), True), row
            # a topic without partitions: -1 on the wire (the Go client's MessageID says 0)
            assert (row["partition"], entry["message_id"]["partition"]) == (-1, 0), row


def test_every_message_frame_is_an_entry_the_client_got(run: Run) -> None:
    _, records, capture = run
    for record in records:
        entries = {chunk for e in record["received"] for chunk in _entries(e)}
        rows = _rows(capture.frames, topic=record["topic"], command="MESSAGE")
        assert Counter((r["ledger_id"], r["entry_id"]) for r in rows) == Counter(list(entries))
        assert {r["checksum"] for r in rows} == {"valid"}
        assert all(r["broker_entry_index"] is not None for r in rows)


def test_every_ack_is_the_clients(run: Run) -> None:
    """The ACK frames name every entry the client acknowledged (a batch once all of it is
    acked, each chunk of a chunked message), none with a validation error; each MESSAGE
    pairs with its ACK on the timeline."""
    _, records, capture = run
    for record in records:
        entries = {chunk for e in record["received"] for chunk in _entries(e)}
        acked: list[tuple[int, int]] = []
        for row in _rows(capture.frames, topic=record["topic"], command="ACK"):
            fields = json.loads(row["fields"])
            assert fields["ack_type"] == "Individual" and "validation_error" not in fields
            acked += [(m["ledgerId"], m["entryId"]) for m in fields["message_id"]]
        assert Counter(acked) == Counter(list(entries)), record["topic"]
        pairs = _rows(capture.timeline, topic=record["topic"], request_command="MESSAGE")
        assert Counter((p["ledger_id"], p["entry_id"]) for p in pairs) == Counter(list(entries))
        assert {(p["response_command"], p["outcome"]) for p in pairs} == {("ACK", "success")}


def test_one_journey_per_message_acked(run: Run) -> None:
    _, records, capture = run
    for record in records:
        rows = _rows(capture.journeys, topic=record["topic"])
        got = Counter(
            (r["ledger_id"], r["entry_id"], r["batch_index"], r["sequence_id"], r["chunks"])
            for r in rows
        )
        chunked = record["scenario"] == "chunk"
        want = Counter(
            (*_entries(e)[0], _wire_batch_index(record, e), e["sequence_id"])
            + (len(_entries(e)) if chunked else None,)
            for e in record["sent"]
        )
        assert got == want, record["topic"]
        for row in rows:
            assert row["subscription"] == record["subscription"], row
            assert row["acked_ts"] is not None and row["send_ts"] is not None, row
            assert row["deliveries"] == 1 and row["redeliveries"] == 0, row


def test_connect_names_the_go_client(run: Run) -> None:
    _, records, capture = run
    rows = _rows(capture.frames, command="CONNECT")
    assert len(rows) == len(records)  # one connection per run: the broker is its own lookup
    assert {json.loads(r["fields"])["client_version"] for r in rows} == {
        r["client_version"] for r in records
    }


def test_a_healthy_run_has_no_anomaly_and_no_finding(run: Run) -> None:
    cap, records, capture = run
    assert _rows(capture.anomalies) == []
    assert _rows(capture.findings) == []
    port = str(capture.conversations.broker_port.iloc[0])
    done = cli("diagnose", str(cap), "--port", port, "--format", "json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["findings"], shown["connections"]) == (0, []), done.stdout
    # the clean bill: every SEND answered, one per entry the client's message ids name (a
    # batch is one entry, a chunked message one per chunk), one producer per run
    entries = {(r["topic"], *e) for r in records for m in r["sent"] for e in _entries(m)}
    sends = shown["checked"]["sends"]
    assert (sends["count"], sends["failed"], sends["unknown"]) == (len(entries), 0, 0)
    assert sends["entities"] == len(RUNS)
    assert shown["checked"]["connections"]["unknown"] == shown["checked"]["bytes"]["unknown"] == 0
