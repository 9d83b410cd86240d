"""Refusals and reconnects across connections: the engine's one door to three rule modules.

Input: from the engine, the request facts (`on_pair`: an ERROR answering anything, a LOOKUP
answered), the producers' and consumers' lifecycle facts (`on_life`), each connection's end
(`ended`: the Conversation), its rows (`close`), and the capture's end (`finish`).
Output: findings consumer.busy (dissector.diagnose.holders), reconnect.retry_loop
(dissector.diagnose.retries) and reconnect.storm (dissector.diagnose.storms).
Rules: the error of a refused PRODUCER or SUBSCRIBE is its ERROR's code (the Lifecycle
fact's frame); what each rule makes of it is its module's.
"""

from __future__ import annotations

from dissector.diagnose.holders import BUSY, Holders
from dissector.diagnose.retries import Retries
from dissector.diagnose.state import ConnState, Context
from dissector.diagnose.storms import Storms
from dissector.events import CloseReason, Conversation, EntityKind, Lifecycle, LifeStep, Pair
from dissector.pulsar.wire import COMMAND_TYPES, enum_name

T = COMMAND_TYPES
_ERROR, _LOOKUP = T["ERROR"], T["LOOKUP"]
_CLOSED = frozenset({CloseReason.FIN, CloseReason.RST, CloseReason.PORT_REUSE})
_CLOSES = frozenset({LifeStep.CLOSED_BY_CLIENT, LifeStep.CLOSED_BY_BROKER})


class Refusals:
    """The state of the three rules; see the module docstring."""

    def __init__(self, ctx: Context) -> None:
        self.holders = Holders(ctx)
        self.retries = Retries(ctx)
        self.storms = Storms(ctx)

    def on_pair(self, conn: ConnState, pair: Pair) -> None:
        """A request's fact: an ERROR (whatever it answers), a LOOKUP answered."""
        response, request = pair.response, pair.request
        if response is None:
            return
        if response.command_type == _ERROR and response.body is not None:
            body = response.body
            code = enum_name(body, "error") if body.HasField("error") else "with no code"
            asked = f" to {request.command_name}" if request is not None else ""
            self.storms.said(conn, f"ERROR {code}{asked}")
        if request is not None and request.command_type == _LOOKUP and request.body is not None:
            self.retries.looked_up(conn, request.body.topic)  # answered, whatever the answer

    def on_life(self, conn: ConnState, fact: Lifecycle) -> None:
        step = fact.step
        if step is LifeStep.CREATED or step is LifeStep.FAILED:
            request = fact.request
            if request is None or request.body is None:
                return
            error = None
            if step is LifeStep.FAILED:
                body = fact.frame.body
                error = enum_name(body, "error") if body.HasField("error") else ""
            self.retries.answered(conn, fact, error)
            if fact.kind is EntityKind.CONSUMER:
                sub = (request.body.topic, request.body.subscription)
                if error is None:
                    self.holders.created(conn, fact, sub)
                elif error == BUSY:
                    self.holders.refused_with(conn, fact, sub, fact.frame)
            return
        if fact.kind is EntityKind.CONSUMER and step in _CLOSES:
            self.holders.closed(conn, fact.entity_id)
        if step is LifeStep.CLOSED_BY_BROKER:
            self.storms.said(conn, f"the broker's CLOSE_{fact.kind.name}")
        if step is LifeStep.CLOSED_BY_BROKER or step is LifeStep.MIGRATED:
            entity = fact.entity
            topic = None if entity is None else entity.topic
            if topic is None:  # its PRODUCER/SUBSCRIBE not captured: the rules' record
                table = conn.producers if fact.kind is EntityKind.PRODUCER else conn.consumers
                known = table.get(fact.entity_id)
                topic = None if known is None else known.topic
            self.retries.moved(conn, fact, topic)

    def ended(self, conn: ConnState, ev: Conversation) -> None:
        """A connection ended (FIN/RST, the capture's end, a bound of the dissector)."""
        if ev.ended in _CLOSED:
            self.holders.ended(conn, ev.ended, ev.end_ts)
        self.storms.ended(conn, ev)

    def close(self, conn: ConnState) -> None:
        """The connection's rows (after it ended, or at the capture's end)."""
        self.holders.close(conn)

    def finish(self) -> None:
        self.retries.finish()
        self.storms.finish()
