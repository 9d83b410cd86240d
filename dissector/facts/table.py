"""The state machine's one transition table: what each Pulsar command does to a connection.

Input: the entity steps (`entities.entity_steps`: producers, consumers, handshake, auth
and keep-alive counts, the frame's topic) and the pairing handlers (`requests.py`,
`acks.py`, `permits.py`, `consumed.py`, `schemas.py`, `lifecycles.py`), by command type.
Output: `TRANSITIONS`: BaseCommand.type -> (entity step or None, pairing handler or None),
the one lookup the machine makes per frame; commands absent do nothing.
Rule (the pairing column, first match): a command with a request_id is a request or a
response (`commands.RESPONSES`); CLOSE_PRODUCER/CLOSE_CONSUMER a request unless a broker's
notification; then SEND, SEND_RECEIPT/SEND_ERROR, MESSAGE (its delivery, its permits, then
its journeys' fact: `consumed.py`), FLOW, ACK (its permits processed, then its journeys'
fact), REDELIVER (counted by `permits.py`), the FIFO pairs and CONNECT/CONNECTED, whose
handlers run after the request_id one when a command has both (an ACK with a request_id is
a request and names deliveries); PRODUCER, SUBSCRIBE and GET_OR_CREATE_SCHEMA then declare
their schema (`schemas.py`; their answers' schema facts are made where requests pair them),
a SUBSCRIBE then forgets its consumer id's earlier debits (`permits.py`); last, PRODUCER,
SUBSCRIBE, CLOSE_PRODUCER, CLOSE_CONSUMER and TOPIC_MIGRATED make their `Lifecycle` fact
(`lifecycles.py`; the answers' where requests pair them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dissector.events import Frame
from dissector.facts import acks, consumed, lifecycles, permits, requests
from dissector.facts.commands import CLOSES, FIFO_PAIRS, FIFO_REQUESTS, RESPONSES, WITH_REQUEST
from dissector.facts.entities import Step, entity_steps
from dissector.facts.schemas import DECLARING
from dissector.facts.store import Fact, Store
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
#: A pairing handler: (state, frame, type, sub-message, the facts so far) -> appends facts.
Handler = Callable[[Store, Frame, int, Any, list[Fact]], None]


def _then(first: Handler, second: Handler) -> Handler:
    def both(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
        first(state, frame, ctype, body, facts)
        second(state, frame, ctype, body, facts)

    return both


def _declared(state: Store, frame: Frame, ctype: int, body: Any, facts: list[Fact]) -> None:
    """PRODUCER, SUBSCRIBE, GET_OR_CREATE_SCHEMA: a schema fact (schemas.py), after their
    request step."""
    state.schemas.declared(frame, body)


def _pairing() -> dict[int, Handler]:
    """BaseCommand.type -> its pairing handler (the rule of the module docstring)."""
    on: dict[int, Handler] = {}
    for t in WITH_REQUEST:  # the request_id rule first
        on[t] = requests.on_response if t in RESPONSES else requests.on_request
    for t in CLOSES:
        on[t] = requests.on_close
    special: dict[int, Handler] = {
        T["SEND"]: acks.on_send,
        T["SEND_RECEIPT"]: acks.on_receipt,
        T["SEND_ERROR"]: acks.on_receipt,
        T["MESSAGE"]: _then(_then(acks.on_message, permits.on_message), consumed.on_message),
        T["FLOW"]: permits.on_flow,
        T["ACK"]: _then(_then(acks.on_ack, permits.on_ack), consumed.on_ack),
        T["REDELIVER_UNACKNOWLEDGED_MESSAGES"]: _then(acks.on_ack, permits.on_ack),
    }
    special.update(dict.fromkeys(FIFO_REQUESTS, requests.on_fifo_request))
    special.update(dict.fromkeys(FIFO_PAIRS, requests.on_fifo_response))
    special[T["CONNECT"]] = requests.on_connect
    special[T["CONNECTED"]] = requests.on_connected
    special.update(dict.fromkeys(DECLARING, _declared))
    special[T["SUBSCRIBE"]] = _then(special[T["SUBSCRIBE"]], permits.on_subscribe)
    for steps in (special, lifecycles.STEPS):  # a producer's or consumer's step last
        for t, handler in steps.items():
            first = on.get(t)
            on[t] = handler if first is None else _then(first, handler)
    return on


def _transitions() -> dict[int, tuple[Step | None, Handler | None]]:
    steps, pairing = entity_steps(), _pairing()
    return {t: (steps.get(t), pairing.get(t)) for t in sorted(steps.keys() | pairing.keys())}


#: BaseCommand.type -> (entity step, pairing handler): see the module docstring.
TRANSITIONS: dict[int, tuple[Step | None, Handler | None]] = _transitions()
