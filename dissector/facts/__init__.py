"""The protocol-facts layer: each Pulsar connection understood once, by one state machine.

Input: a connection's decoded frames in stream order (`ConversationState.observe`).
Output: typed facts (docs/architecture.md, "Protocol facts"): each frame's topic; completion
facts (`Pair`: request answered / failed / unanswered / unmatched, SEND receipted / failed /
unanswered, MESSAGE acknowledged / redelivered / unacknowledged, stray acks);
`RequestIdReused`; per PRODUCER, SUBSCRIBE, their answers, CLOSE_* and TOPIC_MIGRATED,
`Lifecycle` (a producer's or consumer's step, when wanted); per ACK, `Acked` (the deliveries
it acknowledged, its consumer's oldest unacknowledged one before and after); per FLOW (and
MESSAGE leaving its consumer no permits), `Permits` (its consumer's permits granted and
used); schema facts (`SchemaFact`, when wanted); at the end, the connection's handshake,
auth and keep-alive counts and entities (`ConnectionInfo`).
Rule: nothing else pairs requests with answers, SENDs with receipts or deliveries with acks:
the timeline, the diagnoses, the journeys and the values' schema tracker read these facts.
Modules: `machine` (the state), `table` (its one transition table), `commands` (which
command is which), `requests`, `acks`, `permits` and `lifecycles` (the transitions),
`entities`, `schemas`, `pairs` (a fact's fields), `deliveries`, `bounds`.
"""

from __future__ import annotations

from dissector.facts.commands import is_request_pair, is_send_pair
from dissector.facts.machine import ConversationState

__all__ = ["ConversationState", "is_request_pair", "is_send_pair"]
