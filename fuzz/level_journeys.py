"""The `journeys` level (issue 42): adversarial ack, batch and chunk sequences of consumers.

Input: a `random.Random`. Output: `make` gives a `Case` (a capture built from scratch:
fuzz.craft) whose settings hold the message ids the capture names and its frame count;
`run` reads every table (fuzz.checks.read_checked), with `--values` on half the inputs.
What the captures hold: a producer's SENDs and receipts, then 1 to 3 consumers given
MESSAGEs (single, or batches whose `num_messages_in_batch` claims up to 10,000 entries while
the payload holds 0 to 5), then ACKs: individual, cumulative (of ids below, inside or past
those delivered), with `ack_set` words and `batch_size` claims of entries never delivered,
REDELIVER_UNACKNOWLEDGED_MESSAGES, and ids never seen.
Invariants beyond the common ones: journeys rows at most ROWS_PER_FRAME per frame plus one
per BYTES_PER_ROW bytes of capture (a row is backed by data: issue 42 item 6); every row's
(ledger, entry) is an id some frame of the capture names; with values on, a row without a
value says why in `value_error` (item 13). One input in GROWTH_EVERY is instead a cumulative
ACK scan (item 1) at n, 2n and 4n: the dissector's lines must grow as the bytes (fuzz.work).
"""

from __future__ import annotations

from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa

from dissector.read import ReaderOptions
from fuzz import work
from fuzz.checks import Case, Seen, read_checked, require
from fuzz.craft import B2C, C2B, Talk, batch, capture, frame, meta
from fuzz.seeds import Corpus

TOPIC = "persistent://public/default/journeys"
#: Rows a frame may back (a 64-bit ack_set word names 64 entries), and bytes per other row.
ROWS_PER_FRAME = 64
BYTES_PER_ROW = 4
GROWTH_EVERY = 20
#: Share of the inputs whose batches and ack sets claim huge sizes.
CLAIMS = 0.25
GROWTH_N = 200


def _mid(ledger: int, entry: int, **extra: Any) -> dict[str, Any]:
    return {"ledgerId": ledger, "entryId": entry, **extra}


def _producer(rng: Random, talk: Talk, ids: set[tuple[int, int]], n: int) -> None:
    talk.send(C2B, frame("PRODUCER", topic=TOPIC, producer_id=1, request_id=1))
    talk.send(B2C, frame("PRODUCER_SUCCESS", request_id=1, producer_name="fuzz-producer"))
    for seq in range(n):
        talk.send(
            C2B, frame("SEND", producer_id=1, sequence_id=seq, payload=b"v", metadata=meta(seq))
        )
        if rng.random() < 0.8:
            entry = rng.choice((seq, seq, rng.randrange(1 << 20)))
            ids.add((1, entry))
            talk.send(
                B2C,
                frame("SEND_RECEIPT", producer_id=1, sequence_id=seq, message_id=_mid(1, entry)),
            )


def _consumer(
    rng: Random, talk: Talk, cid: int, ids: set[tuple[int, int]], n: int, claims: bool
) -> None:
    talk.send(
        C2B,
        frame(
            "SUBSCRIBE",
            topic=TOPIC,
            subscription=f"s{cid}",
            subType=rng.randrange(4),
            consumer_id=cid,
            request_id=10 + cid,
        ),
    )
    talk.send(B2C, frame("SUCCESS", request_id=10 + cid))
    delivered: list[tuple[int, int]] = []
    for i in range(n):
        key = (1, rng.choice((i, i, rng.randrange(1 << 20))))
        extra: dict[str, Any] = {}
        payload = b"v"
        roll = rng.random()
        if roll < 0.3:  # a batch: claimed size against the entries really there
            real = rng.randrange(6)
            claimed = rng.choice((real, real, 0, 1, 64, *((10_000, 0x7FFFFFFF) * claims)))
            extra["num_messages_in_batch"] = claimed
            payload = batch([b"e"] * real)
        elif roll < 0.35:
            extra.update(num_chunks_from_msg=rng.choice((2, 3)), chunk_id=rng.randrange(3))
            extra.update(uuid=f"u{rng.randrange(3)}", total_chunk_msg_size=2)
        ids.add(key)
        delivered.append(key)
        talk.send(
            B2C,
            frame(
                "MESSAGE",
                consumer_id=cid,
                message_id=_mid(*key),
                redelivery_count=rng.choice((0, 0, 0, 1, 5)),
                payload=payload,
                metadata=meta(i, **extra),
            ),
        )
    for _ in range(rng.randrange(2 * n + 1)):
        _ack(rng, talk, cid, ids, delivered, claims)


def _ack(
    rng: Random,
    talk: Talk,
    cid: int,
    ids: set[tuple[int, int]],
    delivered: list[tuple[int, int]],
    claims: bool,
) -> None:
    key = rng.choice(delivered) if delivered and rng.random() < 0.7 else (1, rng.randrange(1 << 20))
    roll = rng.random()
    if roll < 0.15:
        ledgers = rng.sample(delivered, min(len(delivered), rng.randrange(1, 4))) or [key]
        ids.update(ledgers)
        talk.send(
            C2B,
            frame(
                "REDELIVER_UNACKNOWLEDGED_MESSAGES",
                consumer_id=cid,
                message_ids=[_mid(*k) for k in ledgers],
            ),
        )
        return
    extra: dict[str, Any] = {}
    if roll < 0.45:
        words = rng.choice((1, 1, 2, 8))
        extra["ack_set"] = [rng.choice((0, 1, 3, (1 << 63) - 1, -1)) for _ in range(words)]
        extra["batch_size"] = rng.choice((0, 1, 5, 64, *((10_000, 0x7FFFFFFF) * claims)))
    cumulative = rng.random() < 0.3
    if cumulative and rng.random() < 0.3:
        key = (0, key[1])  # below everything delivered
    ids.add(key)
    talk.send(
        C2B,
        frame("ACK", consumer_id=cid, ack_type=int(cumulative), message_id=[_mid(*key, **extra)]),
    )


def make(rng: Random, corpus: Corpus) -> Case:
    if rng.randrange(GROWTH_EVERY) == 0:
        data = cumulative_scan(GROWTH_N)  # the input at n (the others are made as it runs)
        return Case("journeys", len(data), ["growth"], data, {"growth": GROWTH_N})
    ids: set[tuple[int, int]] = set()
    talks = []
    prod = Talk(40001)
    _producer(rng, prod, ids, rng.randrange(0, 30))
    talks.append(prod)
    claims = rng.random() < CLAIMS  # batch sizes of 10,000 and 2^31 - 1 claimed
    for cid in range(rng.randrange(1, 4)):
        talk = Talk(40010 + cid)
        _consumer(rng, talk, cid, ids, rng.randrange(1, 40), claims)
        talks.append(talk)
    for talk in talks:
        if rng.random() < 0.8:
            talk.close()
    data = capture(*talks)
    frames = sum(t.frames for t in talks)
    settings = {"ids": ids, "frames": frames, "values": rng.random() < 0.5}
    return Case("journeys", len(data), [f"{len(talks) - 1} consumers"], data, settings)


def run(case: Case, workdir: Path) -> Seen:
    if "growth" in case.settings:
        return _growth(case.settings["growth"], workdir)
    path = workdir / "input.pcap"
    path.write_bytes(case.data)
    seen = Seen()
    tables = read_checked(str(path), ReaderOptions(values=case.settings["values"]), seen)
    check_journeys(tables["journeys"], case.settings, case.size)
    return seen


def check_journeys(table: pa.Table, settings: dict[str, Any], size: int) -> None:
    """Rows backed by data, ids the capture names, and values or their errors."""
    cols = table.select(["ledger_id", "entry_id", "value", "value_error"]).to_pydict()
    ids = settings["ids"]
    for ledger, entry in zip(cols["ledger_id"], cols["entry_id"], strict=True):
        if ledger is not None and entry is not None:
            require((ledger, entry) in ids, "journey_unseen_id", (ledger, entry))
    if settings.get("values"):
        for value, error in zip(cols["value"], cols["value_error"], strict=True):
            require(value is not None or error is not None, "journey_value_unexplained")
    rows = table.num_rows
    bound = ROWS_PER_FRAME * settings["frames"] + size // BYTES_PER_ROW
    frames = settings["frames"]
    require(rows <= bound, "journey_rows", f"{rows} rows from {frames} frames, {size} bytes")


def cumulative_scan(n: int) -> bytes:
    """n deliveries, then n cumulative ACKs of ids below all of them (issue 42 item 1)."""
    talk = Talk()
    talk.send(
        C2B,
        frame("SUBSCRIBE", topic=TOPIC, subscription="s", subType=0, consumer_id=1, request_id=1),
    )
    talk.send(B2C, frame("SUCCESS", request_id=1))
    for i in range(n):
        talk.send(
            B2C,
            frame("MESSAGE", consumer_id=1, message_id=_mid(2, i), payload=b"v", metadata=meta(i)),
        )
    for i in range(n):
        talk.send(C2B, frame("ACK", consumer_id=1, ack_type=1, message_id=[_mid(1, i)]))
    return capture(talk)


def _growth(n: int, workdir: Path) -> Seen:
    return work.growth_case("cumulative acks", cumulative_scan, n, workdir, ReaderOptions())
