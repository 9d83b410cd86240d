"""The protocol-facts layer's bounds, named once with their reasons.

Input: nothing.
Output: the limits every per-connection state machine applies, whoever reads its facts (the
timeline, the diagnoses, the journeys): one number each, here.
Rule: a bound passed never loses a fact silently: what waits beyond MAX_PENDING is reported
unanswered (the oldest first); what is forgotten beyond ACKED_MEMORY, MAX_RETIRED and
MAX_ENTITIES only makes a later fact less precise (a stray ack not told apart from a repeated
one; a replaced producer's row dropped; a frame naming a retired producer without a topic).
"""

from __future__ import annotations

__all__ = ["ACKED_MEMORY", "MAX_ENTITIES", "MAX_PENDING", "MAX_RETIRED"]

#: Requests and SENDs awaiting an answer, and deliveries not acknowledged, per connection
#: before the oldest are declared unanswered (a delivery a redelivery request already paired
#: is just forgotten): a client that never gets (or a capture that never shows) answers must
#: not grow memory with the capture's length. The diagnoses keep the requests and SENDs
#: reported unanswered up to this many per connection (requests) or producer (SENDs) too, and
#: the acked ids of a subscription (across connections).
MAX_PENDING = 100_000
#: Acknowledged message ids remembered per consumer, to tell a repeated ack (a cumulative ack
#: covering individually acked messages, an ack sent twice) from a stray one.
ACKED_MEMORY = 10_000
#: Replaced producers and consumers kept per connection (a client re-creating one id forever
#: keeps the rows of its last MAX_RETIRED predecessors).
MAX_RETIRED = 1024
#: Live producers, and live consumers, per connection: beyond, the oldest is retired (its row
#: kept as MAX_RETIRED allows; frames naming its id then concern no topic). Ids come from the
#: wire: a flood of PRODUCER or SUBSCRIBE commands with ever new ids must not grow memory. The
#: diagnoses keep their producers and consumers (a connection's rule state) to this bound too.
MAX_ENTITIES = 50_000
