"""One truth across tables: what the timeline, messages, journeys, entities and findings of
one capture each say about the same SEND, delivery, ack, request and producer or consumer.

Input: a `Capture` read with every table (`read_capture(path)`), and the thresholds it was
read with.
Output: one function per claim, each giving the disagreements it found as sentences naming
the capture's rows (an empty list: the tables agree):
- `sends`: each SEND pair of the timeline is the same SEND and receipt in journeys (producer,
  sequence id, send/receipt times and packets, message id, error) and in messages (produced
  rows of its packet), and each journey's send and receipt are timeline SEND pairs; a batch
  whose payload does not hold what it claims (`payload.batch_invalid`) has a journey per
  claimed batch index (dissector.facts.batches), each of its message rows among them;
- `deliveries`: each delivered message is a delivery of its journey (first delivery's
  consumer and packet, the count of deliveries);
- `acks`: each MESSAGE the timeline pairs with an ACK is acked in its journeys at that ACK;
- `entities`: every producer_id/consumer_id the timeline, messages, journeys and findings
  name on a connection is an entity of that connection with the same topic;
- `receipts_as_recorded`: the samples' receipts are the ids the client recorded.
The findings' claims are in tests/support/agreement_findings.py.
Rule: each side is computed from its own table only; the claim is their agreement.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from dissector.read import Capture

Row = dict[str, Any]
#: Findings keep the first evidence packets and the last (diagnose/state.py MAX_EVIDENCE).
RECEIPTS = ("SEND_RECEIPT", "SEND_ERROR")


def rows(cap: Capture, table: str) -> list[Row]:
    """A table's rows as dicts, times as µs since the epoch."""
    t = cap.arrow[table]
    schema = pa.schema(
        [f.with_type(pa.int64()) if pa.types.is_timestamp(f.type) else f for f in t.schema]
    )
    out: list[Row] = t.cast(schema).to_pylist()
    return out


def label(row: Row, *cols: str) -> str:
    return "{" + ", ".join(f"{c}={row.get(c)!r}" for c in cols) + "}"


# ------------------------------------------------------------------------------- SENDs

_SIDE = (
    "producer_conn_id", "producer_id", "sequence_id", "send_ts", "send_packet", "receipt_ts",
    "receipt_packet", "ledger_id", "entry_id", "error", "chunks", "batch_index", "batch_size",
)  # fmt: skip


def produce_sides(journeys: Iterable[Row]) -> list[Row]:
    """The journeys' produce sides, once per message (a row per subscription repeats it)."""
    seen: dict[tuple[Any, ...], Row] = {}
    for j in journeys:
        if j["send_packet"] is not None or j["receipt_packet"] is not None:
            side = {c: j[c] for c in _SIDE}
            seen.setdefault(tuple(side.values()), side)
    return list(seen.values())


def sends(cap: Capture) -> list[str]:
    pairs = [r for r in rows(cap, "timeline") if r["request_command"] == "SEND"]
    sides = produce_sides(rows(cap, "journeys"))
    produced = [m for m in rows(cap, "messages") if m["kind"] == "produced"]
    by_send: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for s in sides:
        by_send[s["producer_conn_id"], s["send_packet"]].append(s)
    chunked = [m for m in produced if m["chunked"]]
    invalid = {
        (a["conn_id"], a["packet"])
        for a in rows(cap, "anomalies")
        if a["code"] == "payload.batch_invalid"
    }
    bad: list[str] = []
    for p in pairs:
        where = label(p, "conn_id", "request_packet", "producer_id", "sequence_id")
        conn, packet = p["conn_id"], p["request_packet"]
        pid = p["producer_id"]
        mine = [s for s in by_send.get((conn, packet), []) if s["producer_id"] == pid]
        chunk_of = [
            m for m in chunked
            if m["conn_id"] == conn and m["first_packet"] <= packet <= m["last_packet"]
        ]  # fmt: skip
        if not mine:
            if not chunk_of:
                bad.append(f"timeline SEND {where} has no journey whose send it is")
            continue
        if min(s["sequence_id"] for s in mine) != p["sequence_id"]:
            bad.append(f"timeline SEND {where}: journeys' sequence ids {_seqs(mine)}")
        for s in mine:
            if s["send_ts"] != p["request_ts"]:
                bad.append(f"timeline SEND {where}: journey's send_ts {s['send_ts']}")
            if s["chunks"]:
                continue  # its receipt is the last chunk's: checked below
            bad.extend(_receipt(p, s, where))
        frame = [
            m for m in produced
            if (m["conn_id"], m["last_packet"], m["producer_id"]) == (conn, packet, pid)
        ]  # fmt: skip
        if not chunk_of and _seqs(frame) != _seqs(mine) and not _claimed(frame, mine, invalid):
            bad.append(
                f"timeline SEND {where}: messages' sequence ids {_seqs(frame)}, "
                f"journeys' {_seqs(mine)}"
            )
    bad.extend(_sides_are_pairs(sides, pairs, chunked))
    return bad


def _claimed(frame: list[Row], mine: list[Row], invalid: set[tuple[int, int]]) -> bool:
    """A batch whose payload does not hold what it claims (dissector.facts.batches): its
    journeys are the claim (a batch index each, below the claimed size), its message rows
    what the payload holds, each of them a journey, and the SEND marked
    `payload.batch_invalid`."""
    marked = all((m["conn_id"], m["last_packet"]) in invalid for m in frame)
    indexes = sorted(j["batch_index"] for j in mine if j["batch_index"] is not None)
    size = {j["batch_size"] for j in mine}
    return (
        bool(frame)
        and marked
        and set(_seqs(frame)) <= set(_seqs(mine))
        and len(size) == 1
        and indexes == list(range(len(mine)))
        and len(mine) <= (size.pop() or 0)
    )


def _seqs(rs: Iterable[Row]) -> list[int]:
    return sorted(r["sequence_id"] for r in rs)


def _receipt(p: Row, s: Row, where: str) -> list[str]:
    receipt = p["response_command"] == "SEND_RECEIPT"  # a SEND_ERROR is the journey's error
    want = (
        p["response_packet"] if receipt else None,
        p["response_ts"] if receipt else None,
        p["error_code"] if p["response_command"] == "SEND_ERROR" else None,
    )
    got = (s["receipt_packet"], s["receipt_ts"], s["error"])
    bad = []
    if got != want:
        bad.append(f"timeline SEND {where} answered {want}: journey's receipt {got}")
    if p["response_command"] == "SEND_RECEIPT":
        ids = (s["ledger_id"], s["entry_id"])
        if ids != (p["ledger_id"], p["entry_id"]):
            bad.append(f"timeline SEND {where}: receipt's id, journey's {ids}")
    return bad


def _sides_are_pairs(sides: list[Row], pairs: list[Row], chunked: list[Row]) -> list[str]:
    """Each journey's send and receipt are a timeline SEND pair's (a chunked message's:
    its first chunk's SEND, its last chunk's receipt)."""
    # one packet may carry several SENDs or receipts: keyed by producer too
    sent = {(p["conn_id"], p["request_packet"], p["producer_id"]): p for p in pairs}
    answered = {
        (p["conn_id"], p["response_packet"], p["producer_id"]): p
        for p in pairs
        if p["response_command"] == "SEND_RECEIPT"
    }
    bad = []
    for s in sides:
        where = label(s, "producer_conn_id", "producer_id", "sequence_id", "send_packet")
        conn = s["producer_conn_id"]
        for packet, index, what in (
            (s["send_packet"], sent, "send"),
            (s["receipt_packet"], answered, "receipt"),
        ):
            if packet is None:
                continue
            if (conn, packet, s["producer_id"]) not in index:
                bad.append(f"journey {where}: its {what} is no timeline SEND pair's")
        if s["chunks"] and s["send_packet"] is not None:
            (m,) = [
                m for m in chunked
                if m["conn_id"] == conn
                and m["first_packet"] <= s["send_packet"] <= m["last_packet"]
            ]  # fmt: skip
            last = sent.get((conn, m["last_packet"], s["producer_id"]))
            want = last["response_packet"] if last else None
            if s["receipt_packet"] != want:
                bad.append(f"journey {where}: receipt, the last chunk's is {want}")
    return bad


# -------------------------------------------------------------------- deliveries, acks


def _subscriptions(cap: Capture) -> dict[tuple[int, int], tuple[Any, ...]]:
    """(conn_id, consumer_id) -> its subscription's key, from the entities table."""
    subs: dict[tuple[int, int], tuple[Any, ...]] = {}
    for e in rows(cap, "entities"):
        if e["kind"] == "consumer" and e["subscription"] is not None:
            subs[e["conn_id"], e["entity_id"]] = (e["topic"], e["subscription"])
    return subs


def _sub_of(subs: dict[tuple[int, int], tuple[Any, ...]], conn: int, cid: int) -> tuple[Any, ...]:
    return subs.get((conn, cid), ("consumer", conn, cid))


def _journey_sub(j: Row) -> tuple[Any, ...]:
    if j["subscription"] is not None:
        return (j["topic"], j["subscription"])
    return ("consumer", j["consumer_conn_id"], j["consumer_id"])


def deliveries(cap: Capture) -> list[str]:
    """Delivered messages, grouped by subscription and message (producer name, sequence id:
    what the message's metadata says, not the dissector's join), against journeys."""
    subs = _subscriptions(cap)
    seen: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for m in rows(cap, "messages"):
        if m["kind"] == "delivered":
            sub = _sub_of(subs, m["conn_id"], m["consumer_id"])
            seen[(sub, m["producer_name"], m["sequence_id"])].append(m)
    made: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for j in rows(cap, "journeys"):
        if j["delivered_packet"] is not None:
            made[(_journey_sub(j), j["producer_name"], j["sequence_id"])].append(j)
    bad = []
    for key, ms in seen.items():
        js = made.get(key, [])
        if len(js) != 1:
            bad.append(f"delivered {key}: {len(js)} journeys deliver it")
            continue
        (j,) = js
        first = min(ms, key=lambda m: m["last_packet"])
        want = (first["conn_id"], first["consumer_id"], first["last_packet"], first["ts"], len(ms))
        got = (
            j["consumer_conn_id"], j["consumer_id"], j["delivered_packet"], j["delivered_ts"],
            j["deliveries"],
        )  # fmt: skip
        if got != want:
            bad.append(f"delivered {key}: messages say {want}, journey {got}")
        if not first["chunked"]:
            ids = (first["ledger_id"], first["entry_id"], first["batch_index"])
            if (j["ledger_id"], j["entry_id"], j["batch_index"]) != ids:
                bad.append(f"delivered {key}: message id {ids}, journey's differs")
    for key in made.keys() - seen.keys():
        bad.append(f"journey {key} delivered, no delivered message row")
    return bad


def acks(cap: Capture) -> list[str]:
    """A MESSAGE frame the timeline pairs with an ACK is acknowledged in its subscription by
    then: the journeys of the messages it carried were each first acked at or before that
    ACK, the last of them at the first ACK the timeline pairs with it (or an earlier one)."""
    subs = _subscriptions(cap)
    acked: dict[tuple[Any, ...], Row] = {}  # (sub, ledger, entry) -> its first ACK pair
    for p in rows(cap, "timeline"):
        if p["request_command"] == "MESSAGE" and p["response_command"] == "ACK":
            key = (_sub_of(subs, p["conn_id"], p["consumer_id"]), p["ledger_id"], p["entry_id"])
            if key not in acked or p["response_packet"] < acked[key]["response_packet"]:
                acked[key] = p
    by_frame: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for j in rows(cap, "journeys"):
        if j["delivered_packet"] is not None and not j["chunks"]:
            by_frame[(_journey_sub(j), j["ledger_id"], j["entry_id"])].append(j)
    bad = []
    for key, p in acked.items():
        js = by_frame.get(key)
        if not js:
            continue  # a chunk, or a delivery no journey has (deliveries() tells)
        where = label(p, "conn_id", "consumer_id", "ledger_id", "entry_id", "response_packet")
        last = [j["acked_packet"] for j in js]
        if None in last or max(last) > p["response_packet"]:
            bad.append(f"timeline ACK {where}: journeys' first acks {sorted(last, key=str)}")
        elif len(js) == 1 and (js[0]["acked_packet"], js[0]["acked_ts"]) != (
            p["response_packet"],
            p["response_ts"],
        ):
            bad.append(f"timeline ACK {where}: journey acked at {js[0]['acked_packet']}")
    return bad


# ---------------------------------------------------------------------------- entities

ENTITY = re.compile(r"^(producer|consumer) (\d+)\b")


def named_ids(cap: Capture) -> list[tuple[str, str, int, int, Any]]:
    """(table, kind, conn_id, id, topic) of every producer and consumer the other tables name."""
    out: list[tuple[str, str, int, int, Any]] = []
    for table in ("timeline", "messages"):
        for r in rows(cap, table):
            for kind in ("producer", "consumer"):
                if r[f"{kind}_id"] is not None:
                    out.append((table, kind, r["conn_id"], r[f"{kind}_id"], r["topic"]))
    for j in rows(cap, "journeys"):
        if j["producer_id"] is not None:
            out.append(
                ("journeys", "producer", j["producer_conn_id"], j["producer_id"], j["topic"])
            )
        if j["consumer_id"] is not None:
            out.append(
                ("journeys", "consumer", j["consumer_conn_id"], j["consumer_id"], j["topic"])
            )
    for f in rows(cap, "findings"):
        m = ENTITY.match(f["entity"] or "")
        if m:
            out.append(("findings", m[1], f["conn_id"], int(m[2]), f["topic"]))
    return out


def entities(cap: Capture) -> list[str]:
    """Every id named is an entity of its connection with the same topic, unless the capture
    holds no command creating it (PRODUCER/SUBSCRIBE of that id: the frames table says)."""
    known: dict[tuple[str, int, int], set[Any]] = defaultdict(set)
    for e in rows(cap, "entities"):
        known[e["kind"], e["conn_id"], e["entity_id"]].add(e["topic"])
    created = set()
    for f in rows(cap, "frames"):
        if f["command"] == "PRODUCER" and f["producer_id"] is not None:
            created.add(("producer", f["conn_id"], f["producer_id"]))
        if f["command"] == "SUBSCRIBE" and f["consumer_id"] is not None:
            created.add(("consumer", f["conn_id"], f["consumer_id"]))
    bad = []
    for table, kind, conn, ident, topic in sorted(set(named_ids(cap)), key=str):
        key = (kind, conn, ident)
        if key not in known:
            if key in created:
                bad.append(f"{table} names {kind} {ident} of conn {conn}: no entity")
        elif topic is not None and topic not in known[key]:
            bad.append(f"{table} names {kind} {ident} of conn {conn} on {topic}: {known[key]}")
    return bad


def receipts_as_recorded(cap: Capture, manifest: dict[str, Any]) -> list[str]:
    """The ids the client recorded for its sends (pcaps/*.manifest.json) are the timeline's
    SEND_RECEIPT ids and the journeys' message ids (batch index -1: not batched)."""
    sent = [s for s in manifest["sent"] if s.get("result") == "Ok" and s.get("message_id")]

    def of(s: dict[str, Any]) -> tuple[Any, ...]:
        mid = s["message_id"]
        return (s["partition_topic"], mid["ledger_id"], mid["entry_id"], mid["batch_index"])

    recorded = {of(s) for s in sent}
    timeline = {
        (p["topic"], p["ledger_id"], p["entry_id"])
        for p in rows(cap, "timeline")
        if p["response_command"] == "SEND_RECEIPT"
    }
    journeys = {
        (
            j["topic"],
            j["ledger_id"],
            j["entry_id"],
            -1 if j["batch_index"] is None else j["batch_index"],
        )
        for j in rows(cap, "journeys")
        if j["receipt_packet"] is not None and not j["chunks"]
    }
    chunked = any(j["chunks"] for j in rows(cap, "journeys"))
    bad = []
    missing = {r[:3] for r in recorded} - timeline
    if missing:
        bad.append(f"recorded ids with no timeline SEND_RECEIPT: {sorted(missing)[:5]}")
    if not chunked and journeys != recorded:
        bad.append(f"journeys' ids {sorted(journeys ^ recorded)[:5]} differ from the record")
    return bad
