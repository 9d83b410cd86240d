"""The pipeline fed crafted packets, one test per path through the connection modes.

docs/cli.md, "Which connections are Pulsar": a broker port is Pulsar; any other port is
Pulsar when a side opens with a decodable CONNECT (that side is the client); 6651 and a TLS
ClientHello are reported as encrypted; a PROXY header before CONNECT gives the original
client; anything else is dropped. Expected values come from those rules and from the bytes
put in (frames, packet positions, addresses), never from the pipeline's own output.
"""

from __future__ import annotations

from collections.abc import Sequence

from dissector.events import (
    Anomaly,
    Conversation,
    ConversationOpened,
    FlowKey,
    Frame,
    PipelineEvent,
    RawPacket,
)
from dissector.pipeline import Pipeline
from tests.support.crafted import (
    B2C,
    C2B,
    TLS_CLIENT_HELLO,
    Conn,
    Item,
    Msg,
    Session,
    baseline_msgs,
    baseline_session,
    l3_of,
    link_frame,
    msg,
    proxy_v1,
    stream_of,
    ts_of,
)

ETHERNET = 1
OTHER = Conn(broker_port=8080)  # not a broker port: the CONNECT must tell


def packets(items: Sequence[Item]) -> list[RawPacket]:
    out = []
    for number, item in enumerate(items, start=1):
        frame = link_frame(l3_of(item), "ether")
        out.append(RawPacket(number, ts_of(number), ETHERNET, frame, len(frame)))
    return out


def run(items: Sequence[Item], **options: object) -> list[PipelineEvent]:
    pipe = Pipeline(**options)  # type: ignore[arg-type]
    events: list[PipelineEvent] = []
    for pkt in packets(items):
        events += pipe.feed(pkt)
    return events + pipe.close()


def key_of(conn: Conn) -> FlowKey:
    return FlowKey(conn.client_ip, conn.client_port, conn.broker_ip, conn.broker_port)


def frames(events: list[PipelineEvent]) -> list[tuple[str, str, int]]:
    return [
        (e.direction.value, e.command_name, e.stream_offset) for e in events if type(e) is Frame
    ]


def expected_frames(session: Session) -> list[tuple[str, str, int]]:
    return [(p.msg.direction.value, p.msg.name, p.offset) for p in session.placed]


def only(events: list[PipelineEvent], kind: type) -> list[PipelineEvent]:
    return [e for e in events if type(e) is kind]


def codes(events: list[PipelineEvent]) -> list[str]:
    return [e.code for e in events if type(e) is Anomaly]


def conversation(events: list[PipelineEvent]) -> Conversation:
    (conv,) = only(events, Conversation)
    assert isinstance(conv, Conversation)
    return conv


def bytes_of(msgs: list[Msg], direction: object) -> int:
    return len(stream_of(m for m in msgs if m.direction is direction))


def test_broker_port_is_pulsar() -> None:
    s = baseline_session()  # SYN to 6650, the baseline exchange, FIN both ways
    events = run(s.segs)
    opened = only(events, ConversationOpened)
    assert opened == [ConversationOpened(1, key_of(s.conn), ts_of(1), 1)]
    assert events[0] == opened[0]  # announced before its first frame
    assert frames(events) == expected_frames(s)
    assert codes(events) == []
    conv = conversation(events)
    msgs = baseline_msgs()
    assert (conv.key, conv.ended, conv.encrypted, conv.syn_seen) == (
        key_of(s.conn),
        "fin",
        False,
        True,
    )
    assert (conv.c2b.stream_bytes, conv.b2c.stream_bytes) == (
        bytes_of(msgs, C2B),
        bytes_of(msgs, B2C),
    )
    assert (conv.c2b.frames, conv.b2c.frames) == (7, 6)
    assert conv.info.client_version == "crafted-client"


def test_other_port_is_pulsar_when_the_client_opens_with_connect() -> None:
    s = baseline_session(OTHER)
    events = run(s.segs)
    # Held until CONNECT (packet 4: after SYN, SYN-ACK, ACK), then announced with the
    # connection's own first packet and time.
    assert only(events, ConversationOpened) == [ConversationOpened(1, key_of(OTHER), ts_of(1), 1)]
    assert type(events[0]) is ConversationOpened
    assert frames(events) == expected_frames(s)
    first = next(e for e in events if type(e) is Frame)
    assert (first.first_packet, first.first_ts) == (4, ts_of(4))
    assert conversation(events).key == key_of(OTHER)


def test_other_port_with_a_proxy_header_before_connect() -> None:
    s = Session(OTHER)
    s.handshake()
    header = proxy_v1(("192.0.2.7", 51234), (OTHER.broker_ip, OTHER.broker_port))
    msgs = baseline_msgs()
    s.frames(msgs[:1], prefix=header)
    s.exchange(msgs[1:])
    s.close()
    events = run(s.segs)
    assert len(only(events, ConversationOpened)) == 1
    assert frames(events) == expected_frames(s)  # CONNECT at offset len(header)
    conv = conversation(events)
    assert conv.proxied_client == ("192.0.2.7", 51234)
    assert conv.c2b.preamble_bytes == len(header)
    assert conv.c2b.stream_bytes == len(header) + bytes_of(msgs, C2B)


def test_tls_port_is_reported_not_decoded() -> None:
    conn = Conn(broker_port=6651)
    s = Session(conn)
    s.handshake()
    s.send(C2B, TLS_CLIENT_HELLO)
    s.send(B2C, b"\x16\x03\x03\x00\x04" + b"\x02\x00\x00\x00")  # a ServerHello record head
    s.close()
    events = run(s.segs)
    opened = ConversationOpened(1, key_of(conn), ts_of(1), 1)
    assert events[0] == opened
    enc, *tls = only(events, Anomaly)
    assert isinstance(enc, Anomaly)
    assert (enc.code, enc.detail, enc.packet) == (
        "pulsar.encrypted",
        "TLS port: encrypted, not decoded",
        1,
    )
    # The broker answers with an empty ServerHello: the handshake never completes.
    assert [(a.code, a.detail) for a in tls] == [  # type: ignore[union-attr]
        (
            "tls.handshake_failure",
            "the connection ended before the handshake completed (no ServerHello)",
        )
    ]
    assert frames(events) == []
    conv = conversation(events)
    assert (conv.encrypted, conv.ended) == (True, "fin")
    assert (conv.c2b.packets, conv.c2b.wire_bytes) == (4, len(TLS_CLIENT_HELLO))


def test_client_hello_on_another_port_is_tls() -> None:
    s = Session(OTHER)
    s.handshake()
    s.send(C2B, TLS_CLIENT_HELLO)
    s.close()
    events = run(s.segs)
    assert only(events, ConversationOpened) == [ConversationOpened(1, key_of(OTHER), ts_of(1), 1)]
    assert [(e.code, e.detail) for e in only(events, Anomaly)][:1] == [  # type: ignore[union-attr]
        ("pulsar.encrypted", "TLS ClientHello: encrypted, not decoded")
    ]
    assert frames(events) == []
    assert conversation(events).encrypted is True


def test_other_protocol_on_another_port_is_dropped() -> None:
    s = Session(OTHER)
    s.handshake()
    s.send(C2B, b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
    s.send(B2C, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    s.close()
    assert run(s.segs) == []


def test_other_port_without_a_complete_frame_is_dropped() -> None:
    s = Session(OTHER)
    s.handshake()
    # A size field announcing a 100,000-byte frame, then 70 KiB that never complete it:
    # more than the 64 KiB a CONNECT may take, so not Pulsar.
    head = (100_000).to_bytes(4, "big") + (20).to_bytes(4, "big")
    for piece in [head + bytes(1392)] + [bytes(1400)] * 50:
        s.send(C2B, piece)
    s.close()
    assert run(s.segs) == []


def test_roles_swap_when_the_first_packet_seen_goes_broker_to_client() -> None:
    """No handshake in the capture and port 8080: the first packet's sender is taken for
    the client. It is the broker's CONNECTED; the CONNECT comes from the other side, so the
    roles swap and every event is reported with its true direction."""
    msgs = baseline_msgs()
    connect, connected, rest = msgs[0], msgs[1], msgs[2:]
    s = Session(OTHER)
    s.exchange([connected, connect, *rest])
    events = run(s.segs)
    assert only(events, ConversationOpened) == [ConversationOpened(1, key_of(OTHER), ts_of(1), 1)]
    assert type(events[0]) is ConversationOpened
    # Stream offsets count from the first byte seen in each direction (no SYN).
    assert frames(events) == expected_frames(s)
    first_two = [e for e in events if type(e) is Frame][:2]
    assert [(f.first_packet, f.direction) for f in first_two] == [(1, B2C), (2, C2B)]
    midstream = [
        (e.direction, e.packet)
        for e in events
        if type(e) is Anomaly and e.code == "tcp.midstream_start"
    ]
    assert midstream == [(B2C, 1), (C2B, 2)]
    conv = conversation(events)
    assert (conv.key, conv.syn_seen, conv.ended) == (key_of(OTHER), False, "capture_end")
    assert (conv.c2b.stream_bytes, conv.b2c.stream_bytes) == (
        bytes_of(msgs, C2B),
        bytes_of(msgs, B2C),
    )
    assert (conv.c2b.packets, conv.b2c.packets) == (7, 6)
    assert conv.info.client_version == "crafted-client"


def test_a_swap_keeps_other_connections_apart() -> None:
    """Two connections, the first swapped: the second one's packets keep their own roles."""
    msgs = baseline_msgs()
    one = Session(OTHER)
    one.exchange([msgs[1], msgs[0]])
    two = baseline_session(Conn(client_port=40001), close=False)
    events = run([*one.segs, *two.segs])
    keys = [e.key for e in only(events, ConversationOpened)]  # type: ignore[union-attr]
    assert keys == [key_of(OTHER), key_of(two.conn)]
    second = [(e.direction.value, e.command_name, e.stream_offset)
              for e in events if type(e) is Frame and e.conn_id == 2]  # fmt: skip
    assert second == expected_frames(two)


def test_a_lone_pending_side_is_dropped_at_the_end() -> None:
    """Off the broker ports, one side sends a frame that is not CONNECT and the capture
    ends: undecided connections are not reported."""
    s = Session(OTHER)
    s.handshake()
    s.exchange([msg(C2B, "PING")])
    assert run(s.segs) == []


def test_a_swapped_connection_is_forgotten_with_tcp() -> None:
    """The pipeline keeps the id of a connection whose roles swapped (to swap TCP's later
    events of it) until TCP forgets the connection: an idle timeout forgets it at once, so
    the set does not grow with every swapped connection of a long capture or live run."""
    msgs = baseline_msgs()
    s = Session(OTHER)
    s.exchange([msgs[1], msgs[0], *msgs[2:]])
    pipe = Pipeline(idle_timeout=1_000_000)
    events: list[PipelineEvent] = []
    for pkt in packets(s.segs):
        events += pipe.feed(pkt)
    assert frames(events) == expected_frames(s)  # swapped: every frame with its true side
    assert pipe._shared.swapped == {1}
    last = max(e.last_ts for e in events if type(e) is Frame)
    ended = pipe.expire(last + 2_000_000)
    assert [type(e).__name__ for e in ended][-1] == "Conversation"
    assert pipe._shared.swapped == set()
