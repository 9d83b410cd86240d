"""ACKs that cross a delivery on the wire: when a MESSAGE of an acknowledged id proves nothing.

Input: a connection's request/response pairs (`timed`: a client's request and the broker's
answer), its consumers' FLOWs (`flowed`) and MESSAGEs (`dispatched`); then, for a MESSAGE of
an id the subscription acknowledged, the ACK's time (`crossed`).
Output: the connection's round trip (ConnState.round_trip), each consumer's dispatch
(ConsumerState.flow_ts, dispatch_first) and whether the MESSAGE may have been on its way
before the broker could have seen the ACK (consumer.redelivered_after_ack then has no proof).
Rules:
- The round trip is the shortest time, on the connection, from a client's request to the
  broker's answer (a request and its response, a SEND and its receipt, a PING and its
  PONG): the broker acts on nothing faster. A MESSAGE within it of the ACK left the broker
  before the ACK could reach it.
- A FLOW starts a dispatch: the broker reads entries from the subscription's cursor for the
  permits and sends them; its time is from the FLOW to its first MESSAGE. An ACK sent
  during it (after the FLOW, before that first MESSAGE) may reach the broker after the read:
  the dispatch's MESSAGEs up to its time after the ACK prove nothing. Seen on Apache
  Pulsar's broker (tests/test_apache_errors.py, the unload scenario): the client subscribes
  again, sends FLOW, then flushes its grouped ACK of the message it had; the broker, reading
  from the cursor's mark-delete position since the FLOW, sends that message again 11 ms
  after the ACK (21 ms after the FLOW).
- A FLOW while a dispatch waits for its first MESSAGE does not start another (the read began
  at the first). Times are the capture's (the ACK may be on another connection).
"""

from __future__ import annotations

from dissector.diagnose.state import ConnState, ConsumerState
from dissector.events import Direction, Pair

C2B = Direction.CLIENT_TO_BROKER


def timed(conn: ConnState, pair: Pair) -> None:
    """A pair: a client's request answered by the broker shortens the round trip."""
    request, response = pair.request, pair.response
    if request is None or response is None or request.direction is not C2B:
        return
    if response.direction is C2B:
        return
    took = max(0, response.first_ts - request.last_ts)
    if conn.round_trip is None or took < conn.round_trip:
        conn.round_trip = took


def flowed(c: ConsumerState, ts: int) -> None:
    """A FLOW: a dispatch starts, unless one is waiting for its first MESSAGE."""
    if c.flow_ts is None or c.dispatch_first is not None:
        c.flow_ts, c.dispatch_first = ts, None


def dispatched(c: ConsumerState, ts: int) -> None:
    """A MESSAGE: the first one ends its dispatch's wait."""
    if c.flow_ts is not None and c.dispatch_first is None:
        c.dispatch_first = ts


def crossed(conn: ConnState, c: ConsumerState, acked_ts: int, ts: int) -> bool:
    """Whether a MESSAGE at `ts` of an id acked at `acked_ts` may have been on its way (sent,
    or read for sending) before the broker could have seen the ACK."""
    gap = ts - acked_ts
    if conn.round_trip is not None and gap <= conn.round_trip:
        return True
    start, first = c.flow_ts, c.dispatch_first
    if start is None or first is None:
        return False
    # within the dispatch's time of an ACK sent before its first MESSAGE (so after its FLOW)
    return acked_ts < first and gap <= first - start
