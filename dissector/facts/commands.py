"""What each Pulsar command is to the protocol-facts layer: request, response, notification.

Input: the wire schema (`pulsar.wire`: command names and the fields each carries).
Output: the command classes the state machine's table is built from (`RESPONSES`, `ANSWERS`,
`FIFO_PAIRS`, ...), and `is_request_pair`, which tells a completion fact of the request_id
kind from a SEND, delivery or FIFO one (what the diagnoses' request rules read).
Rules:
- A command carrying a request_id is a request unless its name says response (…_RESPONSE,
  SUCCESS, ERROR, PRODUCER_SUCCESS, WATCH_TOPIC_LIST_SUCCESS): the one place this set is
  written.
- X_RESPONSE and X_SUCCESS answer X alone (`ANSWERS`); SUCCESS answers a request without a
  response of its own; ERROR answers any.
- request_id -1 (all bits set) on CLOSE_PRODUCER / CLOSE_CONSUMER marks a broker's
  notification, which expects no answer.
- PING/PONG, AUTH_CHALLENGE/AUTH_RESPONSE and CONNECT/CONNECTED pair first in first out.
"""

from __future__ import annotations

from dissector.events import Pair
from dissector.pulsar.wire import COMMAND_NAMES, COMMAND_TYPES, types_with

T = COMMAND_TYPES

#: Commands carrying a request_id (requests and responses).
WITH_REQUEST = types_with("request_id")
#: Responses: commands with a request_id that answer a request.
RESPONSES = frozenset(
    t
    for t, n in COMMAND_NAMES.items()
    if n.endswith("_RESPONSE")
    or n in ("SUCCESS", "ERROR", "PRODUCER_SUCCESS", "WATCH_TOPIC_LIST_SUCCESS")
)
#: response type -> the request type it alone answers (X_RESPONSE, X_SUCCESS -> X)
ANSWERS = {
    t: T[n.rsplit("_", 1)[0]]
    for t, n in COMMAND_NAMES.items()
    if t in RESPONSES and n.rsplit("_", 1)[0] in T and n.rsplit("_", 1)[0] != n
}
#: Requests with a response of their own (SUCCESS does not answer them).
ANSWERED = frozenset(ANSWERS.values())
#: response type -> request type, paired first in first out per direction.
FIFO_PAIRS = {
    T["PONG"]: T["PING"],
    T["AUTH_RESPONSE"]: T["AUTH_CHALLENGE"],
    T["CONNECTED"]: T["CONNECT"],
}
FIFO_REQUESTS = frozenset(FIFO_PAIRS.values())
#: request_id -1: brokers' CLOSE_PRODUCER/CLOSE_CONSUMER notifications.
NO_ID = (1 << 64) - 1
CLOSES = frozenset({T["CLOSE_PRODUCER"], T["CLOSE_CONSUMER"]})


def is_request_pair(pair: Pair) -> bool:
    """Whether a completion fact pairs a request with its response by request_id (answered,
    failed, unanswered or unmatched), not a SEND, a delivery or a FIFO pair. (SEND, MESSAGE,
    CONNECT, PING and AUTH_CHALLENGE carry no request_id; an ACK naming deliveries is their
    response, a request only when it is itself unanswered.)"""
    response = pair.response
    if response is not None:
        return response.command_type in RESPONSES
    request = pair.request
    return request is not None and request.command_type in WITH_REQUEST


_SEND = T["SEND"]


def is_send_pair(pair: Pair) -> bool:
    """Whether a completion fact is a SEND's (receipted, failed or never answered): what the
    diagnoses' producer rules read (a receipt of no SEND waiting is not one)."""
    request = pair.request
    return request is not None and request.command_type == _SEND
