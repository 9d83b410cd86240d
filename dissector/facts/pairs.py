"""A completion fact (one timeline row): the `Pair` record and how it is filled in.

Input: a request frame and/or its response, the request_id or the (ledger, entry) acknowledged
when the caller knows it, and the connection's entities (for the topic).
Output: a `Pair`.
Rules:
- outcome: unanswered without a response, unmatched without a request, redelivered when the
  response is a redelivery request, error when the response reports a failure (an error /
  error_code field, an ERROR command, a Failed lookup or partitioned-metadata response), else
  success; the caller may impose one (a MESSAGE delivered again is "redelivered").
- a SEND's fact carries what its caller knows of the producer's other SENDs waiting
  (`in_order`, `next_waiting`: acks.on_receipt).
- ids (request, producer, consumer, sequence) come from the request, or from the response
  alone; ledger/entry from the id acknowledged, the MESSAGE, or the SEND_RECEIPT.
"""

from __future__ import annotations

from typing import Any

from dissector.events import Frame, Outcome, Pair
from dissector.facts.entities import WITH_CONSUMER, WITH_PRODUCER, Entities
from dissector.pulsar.wire import COMMAND_TYPES, SINGULAR_FIELDS, enum_name, types_with

T = COMMAND_TYPES
_WITH_SEQUENCE = types_with("sequence_id")
_WITH_REQUEST = types_with("request_id")
_MESSAGE, _SEND_RECEIPT = T["MESSAGE"], T["SEND_RECEIPT"]
_REDELIVER, _ERROR = T["REDELIVER_UNACKNOWLEDGED_MESSAGES"], T["ERROR"]
_FAILED = {T["LOOKUP_RESPONSE"]: 2, T["PARTITIONED_METADATA_RESPONSE"]: 1}  # response == Failed
_NO_FIELDS: frozenset[str] = frozenset()


def error_of(body: Any, ctype: int) -> tuple[str | None, str | None]:
    """(error code, message) when a response reports a failure."""
    fields = SINGULAR_FIELDS.get(ctype, _NO_FIELDS)
    code = message = None
    for name in ("error", "error_code"):
        if name in fields and body.HasField(name):
            code = enum_name(body, name)
    for name in ("message", "error_message"):
        if name in fields and body.HasField(name):
            message = getattr(body, name)
    if code is None and ctype in _FAILED and body.response == _FAILED[ctype]:
        code = "Failed"
    return code, message


def make_pair(
    conn_id: int,
    entities: Entities,
    request: Frame | None,
    response: Frame | None,
    rid: int | None,
    *,
    ack_of: tuple[int, int] | None = None,
    outcome: Outcome | None = None,
    in_order: bool | None = None,
    next_waiting: Frame | None = None,
) -> Pair:
    """The row of `request` and `response` (at least one of them given)."""
    ref = request if request is not None else response
    assert ref is not None
    body = ref.body
    ctype = ref.command_type
    producer_id = (
        body.producer_id if ctype in WITH_PRODUCER and body.HasField("producer_id") else None
    )
    consumer_id = (
        body.consumer_id if ctype in WITH_CONSUMER and body.HasField("consumer_id") else None
    )
    sequence_id = (
        body.sequence_id if ctype in _WITH_SEQUENCE and body.HasField("sequence_id") else None
    )
    if rid is None and ctype in _WITH_REQUEST and body.HasField("request_id"):
        rid = body.request_id
    ledger = entry = None
    if ack_of is not None:
        ledger, entry = ack_of
    elif ctype == _MESSAGE:
        ledger, entry = body.message_id.ledgerId, body.message_id.entryId
    elif response is not None and response.command_type == _SEND_RECEIPT:
        mid = response.body.message_id
        ledger, entry = mid.ledgerId, mid.entryId
    code = message = None
    if outcome is not None:
        pass
    elif response is None:
        outcome = Outcome.UNANSWERED
    elif request is None:
        outcome = Outcome.UNMATCHED
    elif response.command_type == _REDELIVER:
        outcome = Outcome.REDELIVERED
    else:
        code, message = error_of(response.body, response.command_type)
        outcome = (
            Outcome.ERROR
            if code is not None or response.command_type == _ERROR
            else Outcome.SUCCESS
        )
    topic = entities.topic(request) or entities.topic(response)
    return Pair(
        conn_id,
        request,
        response,
        outcome,
        rid,
        producer_id,
        consumer_id,
        sequence_id,
        ledger,
        entry,
        topic,
        code,
        message,
        in_order=in_order,
        next_waiting=next_waiting,
    )
