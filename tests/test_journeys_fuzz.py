"""The joiner on arbitrary conversations: any frames, any order, any ids, any times.

Hypothesis draws sequences of the commands the joiner reads (and others), with random ids,
sequence ids, message ids, ack sets, batch sizes and chunk metadata, over a few
connections (the diagnosis engine's strategy: tests/test_diagnose_fuzz.py), each frame
followed by the protocol facts it completes, as the pipeline publishes them. Whatever it
draws, the joiner gives journeys and never an exception, its rows fit the table's Arrow
schema, and its indexes stay consistent: they name only messages it holds, and its count
of held messages is theirs.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.events import CloseReason, ConversationOpened, Frame
from dissector.facts import ConversationState
from dissector.journeys import Joiner
from dissector.journeys import index as index_module
from dissector.journeys.state import MAX_HELD
from dissector.tables.builders import TableBuilder
from tests.test_diagnose_fuzz import KEYS, _ended, frames


def _consistent(joiner: Joiner) -> None:
    ix = joiner.ix
    held = set(ix.held)
    assert ix.held_msgs == sum(len(s.messages()) for s in held)
    assert all(s in held for key in ix.ids for s in ix.at(key))
    assert all(key in s.ids() for key in ix.ids for s in ix.at(key))
    assert all(s in held for s in ix.names.values())
    assert all(s in held for sub in ix.subs.values() for s in sub.live.values())
    assert all(serial == s.serial for sub in ix.subs.values() for serial, s in sub.live.items())
    for conn in ix.conns.values():
        for s in conn.sends.values():  # a SEND whose answer is still due
            if s.waiting is not None:  # else it waits no more: its answer will find nothing
                assert s in held and s.due > 0 and s.waiting[0] == conn.conn_id
        assert all(s in held for s in [*conn.sending.values(), *conn.receiving.values()])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(frames(), max_size=60),
    st.sets(st.integers(1, 3)),
    st.sampled_from(list(CloseReason)),
    st.sampled_from([MAX_HELD, 3]),
)
def test_any_conversation_gives_journeys_never_an_exception(
    drawn: list[Frame], opened: set[int], reason: CloseReason, bound: int
) -> None:
    """Also with a bound of 3 messages held: messages pushed out of every index at once."""
    with mock.patch.object(index_module, "MAX_HELD", bound):
        _joined(drawn, opened, reason)


def _joined(drawn: list[Frame], opened: set[int], reason: CloseReason) -> None:
    builder = TableBuilder(tables=["journeys"])
    add = builder.feeder()
    joiner = builder.joiner
    assert joiner is not None
    states: dict[int, ConversationState] = {}
    for conn_id in sorted(opened):
        add(ConversationOpened(conn_id, KEYS[conn_id], 0, 1))
    for frame in sorted(drawn, key=lambda f: f.last_ts):
        state = states.setdefault(
            frame.conn_id, ConversationState(frame.conn_id, consumed=True, lifecycles=True)
        )
        _, facts = state.observe(frame)
        add(frame)
        for fact in facts:
            add(fact)
        _consistent(joiner)
    for conn_id in sorted(opened):
        for fact in states.pop(conn_id, ConversationState(conn_id)).close():
            add(fact)
        add(_ended(conn_id, reason))
    _consistent(joiner)
    builder.finish()
    rows = builder.tables()["journeys"].to_pylist()  # every row fits the schema
    for row in rows:
        assert row["deliveries"] >= 0 and row["redeliveries"] >= 0
        assert (row["deliveries"] == 0) == (row["delivered_ts"] is None)
        assert row["subscription"] is not None or row["sub_type"] is None
