"""Schema-bearing commands run through the protocol-facts layer, as a read runs them: one
`ConversationState` per connection (requests client to broker, answers broker to client),
its schema facts handed to a `SchemaTracker` or to `Values`.

Input: a tracker or `Values`, a connection id and BaseCommands (tests.support.schema_wire).
Output: `feed`: the facts learnt (and, for `Values`, the anomaly rows they made); `frame_of`:
the `Frame` a command travels in.
Rule: the facts layer pairs requests with answers; the tracker sees only what it makes.
"""

from __future__ import annotations

import weakref
from typing import Any

from dissector.events import Anomaly, Direction, Frame, SchemaFact
from dissector.facts import ConversationState
from dissector.facts.commands import RESPONSES
from dissector.pulsar.wire import BODY_FIELDS
from dissector.values import SchemaTracker, Values

#: target -> its connections' state machines (the requests in flight on each)
_STATES: weakref.WeakKeyDictionary[Any, dict[int, ConversationState]] = weakref.WeakKeyDictionary()


def frame_of(conn: int, cmd: Any, packet: int = 1) -> Frame:
    """The frame carrying `cmd`: an answer from the broker, anything else from the client."""
    return Frame(
        conn_id=conn,
        direction=Direction.BROKER_TO_CLIENT
        if cmd.type in RESPONSES
        else Direction.CLIENT_TO_BROKER,
        stream_offset=0,
        total_size=0,
        command_size=0,
        command_type=cmd.type,
        command_name=type(cmd).Type.Name(cmd.type),
        command=cmd,
        body=getattr(cmd, BODY_FIELDS[cmd.type]),
        checksum=None,
        first_packet=packet,
        last_packet=packet,
    )


def feed(target: SchemaTracker | Values, conn: int, *commands: Any) -> list[Anomaly]:
    """Send `commands` on connection `conn`; `target` learns their schema facts. Returns the
    anomaly rows `Values` made of them (none for a bare tracker)."""
    states = _STATES.setdefault(target, {})
    state = states.get(conn)
    if state is None:
        state = states[conn] = ConversationState(conn, pairs=False, schemas=True)
    rows: list[Anomaly] = []
    for cmd in commands:
        frame = frame_of(conn, cmd)
        state.observe(frame)
        facts: list[SchemaFact] = state.schemas.take()
        if isinstance(target, Values):
            rows += target.learn(facts, frame)
        else:
            for fact in facts:
                target.learn(fact)
    return rows
