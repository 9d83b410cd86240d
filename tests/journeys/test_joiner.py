"""The joiner fed events as the pipeline feeds it (each frame, then its facts: tests.journeys.
fed): its bounds, counted, not timed.

Each test feeds a flood larger than a bound (monkeypatched small, so that the test is
quick) and checks the structure the bound limits after every event: messages held, SENDs
waiting per connection, a subscription's heap of unacknowledged messages. Rows pushed out
by the bound are marked `evicted`; every message still gets its row.
"""

from __future__ import annotations

from typing import Any

import pytest

from dissector.events import Direction, Frame, Journey
from dissector.facts import bounds
from dissector.journeys import index as index_module
from dissector.journeys.state import Stored
from dissector.pulsar.encoder import command
from dissector.pulsar.wire import BODY_FIELDS, COMMAND_TYPES, MessageMetadata
from tests.journeys.fed import Fed

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
#: Counting tests: they see the index's lookups and comparisons through Python-level
#: overrides (a dict subclass, `Stored.__eq__`), which the compiled index (setup.py HOT)
#: calls as C; tests/test_pure_python.py runs them on the pure-Python package.
counts_python_calls = pytest.mark.skipif(
    (index_module.__file__ or "").endswith(".so"),
    reason="compiled index: Python-level overrides are not called (run on the pure package)",
)


def frame(
    conn_id: int, name: str, ts: int, meta: MessageMetadata | None = None, **kw: Any
) -> Frame:
    cmd = command(name, **kw)
    ctype = COMMAND_TYPES[name]
    direction = C2B if name in ("PRODUCER", "SEND", "SUBSCRIBE", "ACK") else B2C
    return Frame(
        conn_id, direction, ts, 10, 5, ctype, name, cmd, getattr(cmd, BODY_FIELDS[ctype]), None,
        metadata=meta, last_ts=ts, last_packet=ts, topic="t",
    )  # fmt: skip


def send(seq: int) -> Frame:
    meta = MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1)
    return frame(1, "SEND", seq, meta, producer_id=1, sequence_id=seq)


def test_messages_held_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 SENDs with a bound of 1,000 messages: never more than 1,000 held; the 2,000
    oldest make their rows as they are pushed out (evicted), the rest at the end."""
    monkeypatch.setattr(index_module, "MAX_HELD", 1_000)
    joiner = Fed()
    rows: list[Journey] = []
    for seq in range(3_000):
        rows += joiner.feed(send(seq))
        assert joiner.ix.held_msgs <= 1_000 and len(joiner.ix.held) <= 1_000
    assert len(rows) == 2_000 and all(j.evicted for j in rows)
    assert [j.sequence_id for j in rows] == list(range(2_000))
    last = list(joiner.finish())
    assert [j.sequence_id for j in last] == list(range(2_000, 3_000))
    assert not any(j.evicted for j in last)


def test_waiting_sends_are_bounded_per_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """SENDs never receipted: the facts' bound (dissector.facts.bounds.MAX_PENDING) declares
    the oldest unanswered, and they stop waiting in the joiner too (their rows stay)."""
    monkeypatch.setattr(bounds, "MAX_PENDING", 100)
    joiner = Fed()
    for seq in range(1_000):
        joiner.feed(send(seq))
        conn = joiner.ix.conns[1]
        assert len(conn.sends) <= 100
        assert sum(s.due for s in conn.sends.values()) == len(conn.sends)
    assert len(list(joiner.finish())) == 1_000


def test_individual_acks_keep_the_heap_small() -> None:
    """A Shared subscription acks one by one: its heap (for cumulative acks) is rebuilt
    whenever it holds more than twice the unacknowledged messages (plus 64)."""
    joiner = Fed()
    joiner.feed(frame(2, "SUBSCRIBE", 0, topic="t", subscription="s", subType=1,
                      consumer_id=1, request_id=1))  # fmt: skip
    meta = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    sub = joiner.ix.subs[("t", "s")]
    for entry in range(5_000):
        mid = {"ledgerId": 1, "entryId": entry}
        joiner.feed(frame(2, "MESSAGE", entry, meta, consumer_id=1, message_id=mid))
        joiner.feed(frame(2, "ACK", entry, consumer_id=1, ack_type=0, message_id=[mid]))
        assert len(sub.live) == 0 and len(sub.heap) <= 64
    rows = list(joiner.finish())
    assert len(rows) == 5_000 and all(j.acked_ts is not None for j in rows)


def chunk(seq: int, uuid: str) -> Frame:
    meta = MessageMetadata(
        producer_name="p", sequence_id=seq, publish_time=1, uuid=uuid, chunk_id=0,
        num_chunks_from_msg=3,
    )  # fmt: skip
    return frame(1, "SEND", seq, meta, producer_id=1, sequence_id=seq, is_chunk=True)


class _CountedDict(dict[Any, Any]):
    """A dict that counts the entries looked at (by key, or by walking its items)."""

    looked = 0

    def get(self, key: Any, default: Any = None) -> Any:
        _CountedDict.looked += 1
        return super().get(key, default)

    def items(self) -> Any:
        _CountedDict.looked += len(self)
        return super().items()


def _chunk_flood(n: int, bound: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """First chunks of n chunked messages never finished, `bound` held at most: the
    entries of the connection's table of chunked messages being sent looked at."""
    monkeypatch.setattr(index_module, "MAX_HELD", bound)
    joiner = Fed()
    joiner.feed(frame(1, "PRODUCER", 0, topic="t", producer_id=1, request_id=1))
    joiner.ix.conns[1].sending = _CountedDict()
    _CountedDict.looked = 0
    for seq in range(n):
        joiner.feed(chunk(seq, f"u-{seq}"))
    assert len(joiner.ix.conns[1].sending) <= bound  # the bound forgot the others there too
    return _CountedDict.looked


@counts_python_calls
def test_forgetting_a_chunked_message_looks_only_where_it_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each chunked message pushed out looks only where it waits, not at every chunked
    message still held: ten times the bound, not ten times the work (the table of
    messages being sent grows with the bound, 200,000 by default)."""
    small, large = _chunk_flood(4_000, 100, monkeypatch), _chunk_flood(4_000, 1_000, monkeypatch)
    assert small > 0 and large <= 1.5 * small


def _searched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the comparisons of stored messages with others (what a search through a
    queue does: `in`, `remove`); identity and hashing (dict keys) are not counted."""
    count = [0]

    def eq(self: object, other: object) -> bool:
        count[0] += 1
        return self is other

    monkeypatch.setattr(Stored, "__eq__", eq)
    return count


@counts_python_calls
def test_sends_of_one_sequence_id_are_answered_without_a_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5,000 SENDs of one (producer, sequence id), past the facts' bound of 1,000 waiting,
    then 1,000 receipts: each answers the oldest SEND still waiting (the facts' pairing),
    found by its offset, no search; the receipts left over make messages of their own."""
    monkeypatch.setattr(bounds, "MAX_PENDING", 1_000)
    searched = _searched(monkeypatch)
    joiner = Fed()
    for t in range(5_000):
        joiner.feed(frame(1, "SEND", t, MessageMetadata(producer_name="p", sequence_id=0,
                                                         publish_time=1),
                          producer_id=1, sequence_id=0))  # fmt: skip
    waiting = sorted(s.send_ts or 0 for s in joiner.ix.conns[1].sends.values())
    # past the bound the oldest are shed down to 9/10 of it: between 900 and 1,000 wait,
    # the newest
    assert 900 <= len(waiting) <= 1_000 and waiting == list(range(5_000 - len(waiting), 5_000))
    for t in range(1_000):
        mid = {"ledgerId": 1, "entryId": t}
        joiner.feed(frame(1, "SEND_RECEIPT", 10_000 + t, producer_id=1, sequence_id=0,
                          message_id=mid))  # fmt: skip
    assert searched[0] == 0 and not joiner.ix.conns[1].sends
    rows = list(joiner.finish())
    receipted = [j for j in rows if j.receipt_ts is not None and j.send_ts is not None]
    assert [j.send_ts for j in receipted] == waiting
    assert [j.entry_id for j in receipted] == list(range(len(waiting)))
    unknown = [j for j in rows if j.send_ts is None]
    assert [j.entry_id for j in unknown] == list(range(len(waiting), 1_000))


def test_with_values_a_message_without_value_cells_says_why() -> None:
    """issue 42 item 13: with --values, a journey whose payload gave no message row had
    value, value_schema and value_error all null, as if values were not asked for."""
    # the wording docs/journeys.md and docs/values.md promise
    not_decoded = (
        "payload not decoded: its SEND or MESSAGE frame gave no message (metadata not decodable)"
    )
    not_seen = "payload not seen: only its receipt or acks are in the capture"

    def fed(joiner: Fed) -> list[Journey]:
        # a SEND whose metadata did not decode (no AppMessage follows it), receipted
        rows = joiner.feed(frame(1, "PRODUCER", 1, producer_id=1, request_id=1, topic="t"))
        rows += joiner.feed(frame(1, "SEND", 2, None, producer_id=1, sequence_id=0))
        rows += joiner.feed(
            frame(
                1, "SEND_RECEIPT", 3, producer_id=1, sequence_id=0,
                message_id={"ledgerId": 5, "entryId": 1},
            )
        )  # fmt: skip
        # a consumer acking an entry whose MESSAGE the capture does not hold
        sub: dict[str, Any] = dict(
            topic="t", subscription="s", consumer_id=2, request_id=2, subType=0
        )
        rows += joiner.feed(frame(2, "SUBSCRIBE", 4, **sub))
        ack: dict[str, Any] = dict(
            consumer_id=2, ack_type=0, message_id=[{"ledgerId": 9, "entryId": 9}]
        )
        rows += joiner.feed(frame(2, "ACK", 5, **ack))
        return rows + list(joiner.finish())

    rows = {(j.ledger_id, j.entry_id): j for j in fed(Fed(values=True))}
    assert rows[(5, 1)].value_error == not_decoded
    assert rows[(9, 9)].value_error == not_seen
    assert all(j.value is None and j.value_schema is None for j in rows.values())
    # without values, nothing of a value appears
    assert all(j.value_error is None for j in fed(Fed()))


def test_values_held_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """--values: each held message keeps its value's JSON for its row (up to 1 MiB): past
    MAX_HELD_VALUE_BYTES of them the oldest make their rows at once, as past MAX_HELD, and
    every row keeps its value."""
    from dissector.events import AppMessage, MessageKind

    bound = 10_000
    monkeypatch.setattr(index_module, "MAX_HELD_VALUE_BYTES", bound)
    blank: dict[str, Any] = dict.fromkeys(AppMessage._fields)
    joiner = Fed(values=True)
    rows: list[Journey] = []
    for seq in range(100):
        rows += joiner.feed(send(seq))
        value = f'"{seq:04d}{"v" * 994}"'  # 1,000 characters
        joiner.feed(
            AppMessage(
                **{
                    **blank,
                    "kind": MessageKind.PRODUCED,
                    "conn_id": 1,
                    "batch_index": None,
                    "sequence_id": seq,
                    "value": value,
                    "value_schema": "JSON v0",
                }
            )
        )
        # the newest message's value is counted once its frame's messages are in
        assert joiner.ix.held_value_bytes <= bound + 1_000
    assert rows and all(j.evicted for j in rows)
    assert len(joiner.ix.held) <= bound // 1_000 + 1
    rows += list(joiner.finish())
    assert [j.sequence_id for j in rows] == list(range(100))
    assert [j.value[1:5] if j.value else None for j in rows] == [f"{s:04d}" for s in range(100)]
