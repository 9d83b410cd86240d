"""Connection rules: handshake facts, message size, checksums, the wrong protocol.

Input: the facts' handshake after CONNECT and CONNECTED (`on_handshake`: events.Handshake),
SEND and MESSAGE frames (`HANDLERS`), the connection's anomalies (`on_anomaly`) and its end
(`close`, with whether the conversation was TLS).
Output: findings message.oversize, checksum.mismatch_hop and connection.wrong_protocol, one
row per connection (and hop); the facts other rules need: `whole` (CONNECT captured),
`intact` (no TCP gap), the client version, the broker a proxy connection goes to
(`proxy_to`) and the broker's max_message_size.
Rules:
- A SEND or MESSAGE whose payload is larger than CONNECTED.max_message_size (5 MiB when the
  broker does not send it, as clients assume) is oversize; so is a frame larger than the
  dissector's frame limit (pulsar.frame_too_large) once the connection has started.
- Frames whose CRC32C failed are counted per hop: SEND (producer -> broker) and MESSAGE
  (broker -> consumer), with the client's version.
- A broker port whose client stream opens with HTTP (the first four bytes, read as a frame
  size, spell an HTTP method) or with a TLS ClientHello on a port that is not a TLS port is
  the wrong protocol.
- So is a server side answering a client that spoke Pulsar (its CONNECT captured, from the
  stream's start) with HTTP (its first four bytes spell "HTTP": a proxy, an ingress or a web
  server; the anomaly's detail gives the status line's start, nothing after it) or with a
  TLS record (handshake or alert: 0x16 or 0x15, then version 3.x; an alert alone is 7
  bytes, a frame cut short). On a TLS port the client's plaintext is what is wrong (the
  rule above), so a TLS answer is one on a port that is not a TLS port. A server stream
  captured from its middle (no SYN-ACK) says nothing: its first bytes are skipped while
  the framing resynchronises, no header is read there.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from dissector.anomalies import AnomalyCode
from dissector.diagnose.state import ConnState, Context, Evidence, RuleStep, finding
from dissector.events import Anomaly, Checksum, Conversation, Direction, Frame, Handshake
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_TYPES

T = COMMAND_TYPES
C2B = Direction.CLIENT_TO_BROKER
_CONNECT = T["CONNECT"]

#: What clients assume when CONNECTED carries no max_message_size (5 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
_HOPS = {T["SEND"]: "producer -> broker (SEND)", T["MESSAGE"]: "broker -> consumer (MESSAGE)"}
_HTTP = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"HTTP", b"CONN")
_TOTAL_SIZE = re.compile(r"totalSize (\d+)")
_STATUS = re.compile(r"an HTTP status line: '([^']*)'")
#: TLS record content types a server may open with: alert (21), handshake (22)
_TLS_RECORDS = {0x15: "an alert", 0x16: "a handshake"}
_SIZE_FAULTS = frozenset(
    {
        AnomalyCode.PULSAR_FRAME_TOO_LARGE,
        AnomalyCode.PULSAR_FRAME_TOO_SMALL,
        AnomalyCode.PULSAR_COMMAND_SIZE_INVALID,
    }
)


def on_handshake(ctx: Context, conn: ConnState, fact: Handshake) -> None:
    """The facts' handshake after a CONNECT (the client's version; whether the connection
    was captured from its start) or a CONNECTED (the broker's max_message_size)."""
    frame = fact.frame
    if frame.command_type == _CONNECT:
        conn.whole = frame.direction is C2B and not conn.midstream
        conn.client_version = fact.info.client_version
        conn.proxy_to = fact.info.proxy_to_broker_url
    else:
        conn.max_message_size = fact.info.max_message_size


def on_payload(ctx: Context, conn: ConnState, frame: Frame, body: Any) -> None:
    """A SEND or MESSAGE: its size and its checksum."""
    if frame.payload is not None:
        size = len(frame.payload)
        if size > (conn.max_message_size or DEFAULT_MAX_MESSAGE_SIZE):
            conn.oversize.add(frame)
            conn.oversize_largest = max(conn.oversize_largest, size)
            conn.oversize_topic = frame.topic
    if frame.checksum is Checksum.INVALID:
        hop = _HOPS[frame.command_type]
        ev = conn.bad_checksums.get(hop)
        if ev is None:
            ev = conn.bad_checksums[hop] = Evidence()
        ev.add(frame)


def on_anomaly(ctx: Context, conn: ConnState, anomaly: Anomaly) -> None:
    code = anomaly.code
    if code == AnomalyCode.TCP_GAP:
        conn.intact = False
        return
    if code == AnomalyCode.TCP_MIDSTREAM_START:
        conn.midstream = conn.midstream or anomaly.direction is C2B
        return
    if code == AnomalyCode.TLS_SKIPPED_BYTES and anomaly.direction is C2B:
        if anomaly.stream_offset == 0 and not conn.midstream:  # a TLS port, and no TLS
            conn.wrong.add_at(anomaly.packet, anomaly.ts)
            conn.wrong_detail = "its client stream on a TLS port does not open with TLS"
        return
    server = anomaly.direction is not C2B
    if code not in _SIZE_FAULTS and not (server and code == AnomalyCode.PULSAR_TRUNCATED_FRAME):
        return
    found = _TOTAL_SIZE.search(anomaly.detail)
    if found is None:
        return
    total = int(found.group(1))
    if server:
        if anomaly.stream_offset == 0:  # a stream captured from its middle resyncs instead
            _served(conn, anomaly, total)
        return
    if anomaly.stream_offset == 0 and not conn.whole and not conn.midstream:
        head = total.to_bytes(4, "big") if total < 1 << 32 else b""
        if head in _HTTP:
            conn.wrong.add_at(anomaly.packet, anomaly.ts)
            conn.wrong_detail = f"its client stream opens with {head.decode()!r}: HTTP"
    elif code == AnomalyCode.PULSAR_FRAME_TOO_LARGE and conn.whole:
        conn.oversize.add_at(anomaly.packet, anomaly.ts)
        conn.oversize_largest = max(conn.oversize_largest, total + 4)


def _served(conn: ConnState, anomaly: Anomaly, total: int) -> None:
    """The server's stream opens with no frame: HTTP or a TLS record? (judged at `close`)"""
    head = total.to_bytes(4, "big") if total < 1 << 32 else b""
    if head == b"HTTP":
        status = _STATUS.search(anomaly.detail)
        said = status.group(1) if status is not None else "HTTP"
        conn.served_detail = f"the broker side answers with HTTP ({said!r})"
    elif head[:1] and head[0] in _TLS_RECORDS and head[1] == 3 and head[2] <= 4:
        record = _TLS_RECORDS[head[0]]
        conn.served_detail = (
            f"the broker side answers with TLS ({record} record) on a port that is not a TLS port"
        )
    else:
        return
    conn.served.add_at(anomaly.packet, anomaly.ts)


def on_conversation(
    conn: ConnState, ev: Conversation, broker_ports: Collection[int], tls_ports: Collection[int]
) -> None:
    """A conversation ended: TLS on a broker port that is not a TLS port."""
    port = ev.key.broker_port
    if ev.encrypted and ev.tls is not None and port in broker_ports and port not in tls_ports:
        conn.wrong.add_at(ev.first_packet, ev.start_ts)
        conn.wrong_detail = f"a TLS handshake on port {port}, which is not a TLS port"


def close(ctx: Context, conn: ConnState, horizon: int, closed: bool) -> None:
    if conn.served and conn.whole and not conn.wrong:  # a Pulsar client, answered otherwise
        conn.wrong, conn.wrong_detail = conn.served, conn.served_detail
    if conn.oversize:
        limit = conn.max_message_size
        said = f"{limit} bytes (CONNECTED)" if limit else "5 MiB (CONNECTED sent no limit)"
        ctx.emit(
            finding(
                FindingCode.MESSAGE_OVERSIZE,
                conn.oversize,
                conn=conn,
                topic=conn.oversize_topic,
                summary=f"{conn.oversize.count} messages larger than {said}; the largest "
                f"{conn.oversize_largest} bytes",
                value=float(conn.oversize_largest),
                unit="bytes",
            )
        )
    for hop, ev in sorted(conn.bad_checksums.items()):
        version = conn.client_version or "unknown"
        ctx.emit(
            finding(
                FindingCode.CHECKSUM_MISMATCH_HOP,
                ev,
                conn=conn,
                entity=hop,
                summary=f"{ev.count} checksum failures on the hop {hop} (client {version})",
                value=ev.count,
                unit="frames",
            )
        )
    if conn.wrong:
        ctx.emit(
            finding(
                FindingCode.CONNECTION_WRONG_PROTOCOL,
                conn.wrong,
                conn=conn,
                summary=f"connection to broker port: {conn.wrong_detail}",
            )
        )


HANDLERS: dict[int, RuleStep] = {
    T["SEND"]: on_payload,
    T["MESSAGE"]: on_payload,
}
