"""A joiner fed as the pipeline feeds it: each frame, then the protocol facts it completes.

Input: events (frames made by the tests, the messages extractor's entries), one by one.
Output: `Fed`, a Joiner's stand-in: `feed` hands the joiner each frame and then the facts
one `dissector.facts.ConversationState` per connection makes of it, the journeys' facts of
deliveries and acks among them (as dissector.conversation.publish does for a read of the
journeys), `finish` the joiner's end, `ix` its index.
Rule: the facts are the product's own state machine's, never made up by the test.
"""

from __future__ import annotations

from collections.abc import Iterator

from dissector.events import Frame, Journey
from dissector.facts import ConversationState
from dissector.journeys import Joiner
from dissector.journeys.index import Index


class Fed:
    """A Joiner and the facts of each connection; see the module docstring."""

    def __init__(self, *, values: bool = False) -> None:
        self.joiner = Joiner(values=values)
        self.states: dict[int, ConversationState] = {}

    @property
    def ix(self) -> Index:
        return self.joiner.ix

    def feed(self, ev: object) -> list[Journey]:
        if type(ev) is not Frame:
            return self.joiner.feed(ev)
        assert isinstance(ev, Frame)
        state = self.states.get(ev.conn_id)
        if state is None:
            state = self.states[ev.conn_id] = ConversationState(
                ev.conn_id, consumed=True, lifecycles=True
            )
        _, facts = state.observe(ev)
        rows = self.joiner.feed(ev)
        for fact in facts:
            rows += self.joiner.feed(fact)
        return rows

    def finish(self) -> Iterator[Journey]:
        return self.joiner.finish()
