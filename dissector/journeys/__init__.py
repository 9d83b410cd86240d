"""Message journeys: a message's way from its producer's SEND to each subscription's ACK,
across connections. Sans-IO.

Input: the pipeline's events (frames, the messages extractor's entries, connections
opening and ending).
Output: `Journey` records (the `journeys` table), made by `Joiner` (joiner.py) from the
state of state.py, kept findable by index.py, filled in by the producer's side
(produce.py) and the consumers' (consume.py), turned into records by rows.py.
Rule: every join key is on the wire (docs/journeys.md); nothing here runs unless the
journeys table is asked for; every collection is bounded (state.py).
"""

from dissector.journeys.joiner import Joiner

__all__ = ["Joiner"]
