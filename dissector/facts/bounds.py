"""The protocol-facts layer's bounds, named once with their reasons.

Input: nothing.
Output: the limits every per-connection state machine applies, whoever reads its facts (the
timeline, the diagnoses, the journeys): one number each, here.
Rule: a bound passed never loses a fact silently: what waits beyond MAX_PENDING is reported
unanswered (the oldest first); what is forgotten beyond ACKED_MEMORY and MAX_RETIRED only
makes a later fact less precise (a stray ack not told apart from a repeated one; a replaced
producer's row dropped).
"""

from __future__ import annotations

__all__ = ["ACKED_MEMORY", "MAX_PENDING", "MAX_RETIRED"]

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
