"""The state machine's request transitions: request_id requests, FIFO pairs, the handshake.

Input: (state, frame, command type, its sub-message, the facts so far) from the machine's
table (`table.TRANSITIONS`).
Output: the completion facts appended (`Pair`: answered, failed, unmatched), a
`RequestIdReused` for a request sent while its id is in flight; the entities told of
answers (PRODUCER / SUBSCRIBE created or failed; their `Lifecycle` facts: `lifecycles.py`)
and of the handshake, the schema facts of answers (`schemas.py`).
Rules (`commands.py` says which command is which):
- A request waits by (direction, request_id); a response pairs with the request of its id
  sent the other way. An id in flight twice (a client numbering with two counters) keeps
  both requests: a response goes to the oldest one it answers by type (X_RESPONSE or
  X_SUCCESS to X; SUCCESS to a request without a response of its own; ERROR to any), else to
  the oldest.
- PRODUCER_SUCCESS with producer_ready false (the producer waits for exclusive access) is no
  answer yet: the PRODUCER pairs with the one that says ready.
- A response nobody asked for is `unmatched`. request_id -1 on CLOSE_PRODUCER /
  CLOSE_CONSUMER is a broker's notification: no request.
- CONNECT/CONNECTED, PING/PONG, AUTH_CHALLENGE/AUTH_RESPONSE pair first in first out, per
  direction.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dissector.events import Direction, Frame, RequestIdReused
from dissector.facts import lifecycles
from dissector.facts.commands import ANSWERED, ANSWERS, FIFO_PAIRS, NO_ID
from dissector.facts.store import Fact, Store
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_SUCCESS = T["SUCCESS"]
_PRODUCER_SUCCESS = T["PRODUCER_SUCCESS"]


def _opposite(d: Direction) -> Direction:
    return B2C if d is C2B else C2B


def on_request(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    if body.HasField("request_id"):
        key = (frame.direction, body.request_id)
        state._pending += 1
        if key in state._by_request:
            again = state._again.setdefault(key, [])
            if state.pairing:
                waiting = (state._by_request[key].command_type, *[f.command_type for f in again])
                facts.append(RequestIdReused(state.conn_id, frame, waiting))
            again.append(frame)
        else:
            state._by_request[key] = frame


def on_close(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """A request, unless it is a broker's notification (request_id -1)."""
    if body.HasField("request_id") and body.request_id != NO_ID:
        on_request(state, frame, ctype, body, facts)


def on_response(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    if ctype == _PRODUCER_SUCCESS and not body.producer_ready:
        # the producer waits for exclusive access: its answer is the ready one (the schema
        # version this one may tell is a fact already)
        key = (_opposite(frame.direction), body.request_id)
        state.schemas.producer_answered(state._by_request.get(key), frame)
        return
    if body.HasField("request_id"):
        rid = body.request_id
        key = (_opposite(frame.direction), rid)
        if key in state._again:
            request: Frame | None = _answered(state, key, ctype)
        else:
            request = state._by_request.pop(key, None)
        if request is not None:
            state._pending -= 1
        facts.append(state.pair(request, frame, rid))
        state.entities.responded(request, frame)
        if state.lifecycles and request is not None:
            lifecycles.answered(state, request, frame, facts)
        state.schemas.answered(request, frame)


def _answered(state: Store, key: tuple[Direction, int], ctype: int) -> Frame:
    """Of the requests in flight with this key, the oldest a response of `ctype` answers
    by type, else the oldest; the others keep waiting."""
    waiting = [state._by_request.pop(key), *state._again.pop(key)]
    only = ANSWERS.get(ctype)
    chosen = next(
        (
            f
            for f in waiting
            if (f.command_type == only if only is not None else True)
            and (ctype != _SUCCESS or f.command_type not in ANSWERED)
        ),
        waiting[0],
    )
    waiting.remove(chosen)
    state._by_request[key] = waiting[0]
    if len(waiting) > 1:
        state._again[key] = waiting[1:]
    return chosen


def on_fifo_request(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    state._fifo.setdefault((frame.direction, ctype), deque()).append(frame)
    state._pending += 1


def on_fifo_response(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    queue = state._fifo.get((_opposite(frame.direction), FIFO_PAIRS[ctype]))
    request = queue.popleft() if queue else None
    if request is not None:
        state._pending -= 1
    facts.append(state.pair(request, frame, None))


def on_connect(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    on_fifo_request(state, frame, ctype, body, facts)
    state.entities.connect(body)


def on_connected(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    on_fifo_response(state, frame, ctype, body, facts)
    state.entities.connected(body)
