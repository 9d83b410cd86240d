"""Messages a consumer discarded as corrupt: ACKs that carry a validation error.

Input: the facts of the connection's ACKs (`on_acked`: events.Acked, whose `discarded` are
the unacknowledged deliveries its ids named, as the facts had them before the ACK), the
connection's end (`close`).
Output: consumer.discarded_corrupt, one row per consumer: the messages it discarded, the
validation errors and their counts (in its summary), and as evidence the ACKs and the
MESSAGE frames that delivered the ids they name (those the capture holds).
Rules:
- A client that cannot use a delivered message (checksum mismatch, a codec it lacks, a
  batch it cannot parse, keys it cannot decrypt) acknowledges it with
  CommandAck.validation_error (proto/pulsar_api.proto; pulsar-client-go and the Java
  client's discardCorruptedMessage do): the broker counts it acknowledged, the application
  never sees it. Each id such an ACK names is one message discarded (a batch's entry once).
- The ACK is also an acknowledgement for every other rule (ack holes, redelivery after
  ack), as it is for the broker.
"""

from __future__ import annotations

from dissector.diagnose.consumers import consumer_of
from dissector.diagnose.state import ConnState, Context, finding
from dissector.events import Acked
from dissector.findings import FindingCode
from dissector.pulsar.wire import enum_name


def on_acked(ctx: Context, conn: ConnState, fact: Acked) -> None:
    """An ACK's fact: with a validation_error, the messages it discarded."""
    frame, body = fact.ack, fact.ack.body
    if not body.HasField("validation_error"):
        return
    c = consumer_of(conn, frame, fact.consumer_id)
    kind = enum_name(body, "validation_error")
    ids = len(body.message_id)
    for delivered in fact.discarded:  # the MESSAGEs it discarded
        c.discarded.add_at(delivered.first_packet, delivered.first_ts, count=0)
    c.discarded.add_at(frame.last_packet, frame.last_ts, count=ids)
    c.discard_kinds[kind] = c.discard_kinds.get(kind, 0) + ids


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    """The connection ended: a row per consumer that discarded messages."""
    for c in conn.consumers.values():
        ev = c.discarded
        if not ev:
            continue
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(c.discard_kinds.items()))
        ctx.emit(
            finding(
                FindingCode.CONSUMER_DISCARDED_CORRUPT,
                ev,
                conn=conn,
                topic=c.topic,
                entity=c.label(),
                summary=f"{c.label()} discarded {ev.count} messages as corrupt ({kinds}) and "
                "acknowledged them: the broker will not deliver them again",
                value=ev.count,
                unit="messages",
            )
        )
