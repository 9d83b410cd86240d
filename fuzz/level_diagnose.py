"""The `diagnose` level (issue 42): the findings table on conversations built to tempt rules.

Input: a `random.Random`. Output: `make` gives a `Case` (a capture built with fuzz.craft,
its packet count, and what must or must not be found); `run` reads every table
(fuzz.checks.read_checked), which makes the findings.
What the captures hold: connections with producers and consumers, some never closed; PINGs
answered or not over seconds; nacks of a poll sent as one REDELIVER request per id within
0.1 ms (as pulsar-rs does), or the same id asked again and again seconds apart; acks.
Invariants beyond the common ones: every finding's code is registered (dissector.findings);
its evidence packets exist in the capture; no consumer.redelivery_storm when no message was
asked again and every request came in one burst (issue 42 item 12); a storm when one id was
asked REDELIVER_AT_LEAST times seconds apart. One input in GROWTH_EVERY is instead the sweep
family (item 2): n consumers opened, then n/10 seconds of PINGs, at n, 2n and 4n: the
dissector's lines must grow as the bytes (fuzz.work).
"""

from __future__ import annotations

from pathlib import Path
from random import Random

import pyarrow as pa

from dissector.findings import REGISTRY
from dissector.read import ReaderOptions
from fuzz import work
from fuzz.checks import Case, Seen, read_checked, require
from fuzz.craft import B2C, C2B, T0, Talk, capture, frame, meta
from fuzz.seeds import Corpus

TOPIC = "persistent://public/default/diagnose"
STORM = "consumer.redelivery_storm"
#: Requests of one id, seconds apart, that every reading of the rule calls a storm (the
#: clients' default threshold is 3).
REDELIVER_AT_LEAST = 4
GROWTH_EVERY = 20
GROWTH_N = 300
SECOND = 1_000_000


def _subscribe(talk: Talk, cid: int) -> None:
    talk.send(
        C2B,
        frame(
            "SUBSCRIBE",
            topic=TOPIC,
            subscription=f"s{cid}",
            subType=1,
            consumer_id=cid,
            request_id=cid,
        ),
    )
    talk.send(B2C, frame("SUCCESS", request_id=cid))
    talk.send(C2B, frame("FLOW", consumer_id=cid, messagePermits=1000))


def _deliver(talk: Talk, cid: int, n: int) -> list[dict[str, int]]:
    mids = [{"ledgerId": 3, "entryId": cid * 1000 + i} for i in range(n)]
    for i, mid in enumerate(mids):
        talk.send(
            B2C,
            frame("MESSAGE", consumer_id=cid, message_id=mid, payload=b"v", metadata=meta(i)),
        )
    return mids


def make(rng: Random, corpus: Corpus) -> Case:
    if rng.randrange(GROWTH_EVERY) == 0:
        data = consumers_then_pings(GROWTH_N)  # the input at n (the others are made as it runs)
        return Case("diagnose", len(data), ["growth"], data, {"growth": GROWTH_N})
    talks = []
    quiet: set[int] = set()  # consumers that must not be called a storm
    stormy: set[int] = set()  # consumers that must be
    ops = []
    for c in range(rng.randrange(1, 4)):
        talk = Talk(40100 + c, step=rng.choice((10, 100, 1000)))
        talk.at(T0 + c * SECOND)
        cid = c + 1
        _subscribe(talk, cid)
        mids = _deliver(talk, cid, rng.randrange(1, 8))
        kind = rng.choice(("nack_poll", "storm", "acks", "idle"))
        ops.append(kind)
        if kind == "nack_poll":  # one nack of the poll: a request per id, 10 µs apart
            talk.step = 10
            for mid in mids:
                talk.send(
                    C2B,
                    frame("REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=cid, message_ids=[mid]),
                )
            quiet.add(cid)
        elif kind == "storm":
            for _ in range(REDELIVER_AT_LEAST):
                talk.at(talk.now + SECOND)
                talk.send(
                    C2B,
                    frame(
                        "REDELIVER_UNACKNOWLEDGED_MESSAGES", consumer_id=cid, message_ids=[mids[0]]
                    ),
                )
            stormy.add(cid)
        elif kind == "acks":
            for mid in mids:
                talk.send(C2B, frame("ACK", consumer_id=cid, ack_type=0, message_id=[mid]))
        for _ in range(rng.randrange(4)):  # pings over a few seconds, answered or not
            talk.at(talk.now + rng.choice((1, 20, 40)) * SECOND)
            talk.send(B2C, frame("PING"))
            if rng.random() < 0.5:
                talk.send(C2B, frame("PONG"))
        if rng.random() < 0.7:
            talk.close()
        talks.append(talk)
    data = capture(*talks)
    packets = sum(len(t.recs) for t in talks)
    settings = {"packets": packets, "quiet": quiet, "stormy": stormy}
    return Case("diagnose", len(data), ops, data, settings)


def run(case: Case, workdir: Path) -> Seen:
    if "growth" in case.settings:
        return _growth(case.settings["growth"], workdir)
    path = workdir / "input.pcap"
    path.write_bytes(case.data)
    seen = Seen()
    tables = read_checked(str(path), ReaderOptions(), seen)
    check_findings(tables["findings"], case.settings)
    return seen


def _consumer_of(entity: str | None) -> int | None:
    """The consumer id of a finding's entity ("consumer 3 (sub s3)")."""
    words = (entity or "").split()
    if len(words) >= 2 and words[0] == "consumer" and words[1].isdigit():
        return int(words[1])
    return None


def check_findings(table: pa.Table, settings: dict[str, object]) -> None:
    rows = table.select(["code", "entity", "evidence"]).to_pylist()
    packets = settings["packets"]
    assert isinstance(packets, int)
    storms: set[int | None] = set()
    for row in rows:
        require(row["code"] in REGISTRY, "unregistered_finding", row["code"])
        bad = [p for p in row["evidence"] or [] if not 1 <= p <= packets]
        require(not bad, "evidence_not_in_capture", f"{row['code']}: {bad} of {packets}")
        if row["code"] == STORM:
            storms.add(_consumer_of(row["entity"]))
    quiet, stormy = settings["quiet"], settings["stormy"]
    assert isinstance(quiet, set) and isinstance(stormy, set)
    require(not storms & quiet, "storm_false_alarm", sorted(storms & quiet, key=str))
    require(stormy <= storms, "storm_missed", sorted(stormy - storms, key=str))


def consumers_then_pings(n: int) -> bytes:
    """n consumers subscribed, then n // 10 seconds of PING and PONG (issue 42 item 2)."""
    talk = Talk(step=10)
    for cid in range(1, n + 1):
        _subscribe(talk, cid)
    for _ in range(n // 10):
        talk.at(talk.now + SECOND)
        talk.send(B2C, frame("PING"))
        talk.send(C2B, frame("PONG"))
    return capture(talk)


def _growth(n: int, workdir: Path) -> Seen:
    return work.growth_case(
        "consumers then pings", consumers_then_pings, n, workdir, ReaderOptions()
    )
