"""The one place the stages are wired together: packets in, frames and conversations out.

Input: RawPackets in capture order (from a file reader or live capture), among them, fed to
`feed_parsed`, the TCP segments the compiled stage already parsed; then `close()`.
Output: `ConversationOpened` (once a connection is known to be Pulsar or TLS), `Frame`,
`Anomaly` and `Conversation` (when a connection ends) events.
Rules:
- Headers (tunnels decapsulated) -> IP fragment reassembly -> TCP reassembly -> (client
  stream: TLS / PROXY header sniffing) -> frame decoding -> conversation state (topics,
  pairs) -> application messages.
- Sharded (`shard`): every worker reassembles every fragmented datagram, then keeps the
  segments of its own connections, as it does with packets whose shard their bytes do not tell.
- Idle timeout: every packet fed, of any protocol and any shard, is the flow table's clock
  (`Reassembler.expire`) before it is parsed, so that connections end at the same packet
  in a one-process read and in each worker of a parallel one.
- Which connections are Pulsar is decided by `flow.classify` (its table and rules): this
  module only tells it what it saw and acts on the mode it returns: PENDING connections have
  their events held, PULSAR ones are published, TLS ones reported as encrypted, IGNORED ones
  dropped silently (other protocols in a capture are not our business).
- TLS connections go to a `tls.session.TlsSession` (the handshake in clear; with a key
  log, decryption): its decrypted streams are framed and published as plaintext ones are
  (a connection that became TLS off the broker ports only once its client's first
  decrypted frame is CONNECT). Without a key log, once the handshake is over, TCP stops
  delivering its bytes. Plaintext connections never touch TLS code.
- Per direction, preamble + frame + skipped + gap bytes add up to the stream's length (for
  TLS: the decrypted stream's, whose gap bytes include what could not be decrypted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    ConnClosed,
    ConnOpened,
    Conversation,
    ConversationOpened,
    Decoded,
    Direction,
    DirectionStats,
    FlowKey,
    Frame,
    FrameRun,
    NetIssue,
    PipelineEvent,
    Preamble,
    PreambleKind,
    RawPacket,
    Segment,
    StreamData,
    StreamGap,
    TcpEvent,
)
from dissector.flow import classify
from dissector.flow.classify import Mode, Trigger
from dissector.flow.fragments import Datagram, Fragment, FragmentReassembler
from dissector.flow.net import parse_datagram, parse_layers
from dissector.flow.preamble import sniff
from dissector.flow.shard import Sharder
from dissector.flow.tcp import Reassembler
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, StreamStats
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.pairing import ConversationState
from dissector.pulsar.wire import COMMAND_TYPES, PAYLOAD_TYPES
from dissector.tls.keylog import KeyLog
from dissector.tls.plain import Plain, PlainGap, TlsEvent
from dissector.tls.session import TlsSession, WaitingPool

DEFAULT_BROKER_PORTS = frozenset({6650, 6651})
DEFAULT_TLS_PORTS = frozenset({6651})
C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_CONNECT = COMMAND_TYPES["CONNECT"]
PENDING, PULSAR, TLS, IGNORED = Mode.PENDING, Mode.PULSAR, Mode.TLS, Mode.IGNORED


_Out = list[PipelineEvent]  # where a method appends the events it emits
#: A Frame with its topic set, built from a tuple: NamedTuple._replace costs several times
#: more, once per frame. `topic` is Frame's last field.
_new_frame = tuple.__new__
_TOPIC = Frame._fields.index("topic")
assert len(Frame._fields) - 1 == _TOPIC
_TOPICS = FrameRun._fields.index("topics")
assert len(FrameRun._fields) - 1 == _TOPICS


class _Conv:
    __slots__ = (
        "anomalies",
        "decoders",
        "head",
        "held",
        "judged",
        "midstream",
        "mode",
        "opened",
        "preamble",
        "state",
        "tls",
        "tls_judge",
    )

    def __init__(self, opened: ConnOpened, pairs: bool) -> None:
        self.opened = opened
        self.mode = Mode.NEW  # flow.classify's transitions only
        self.decoders: dict[Direction, FrameDecoder] = {}
        self.midstream = {C2B: False, B2C: False}
        self.head: bytes | None = b""  # client bytes awaiting preamble sniffing; None: done
        self.preamble: Preamble | None = None
        self.held: list[PipelineEvent] = []  # events of a pending connection
        self.state = ConversationState(opened.conn_id, pairs=pairs)
        self.judged: set[Direction] = set()  # pending: sides that opened without CONNECT
        self.anomalies = 0
        self.tls: TlsSession | None = None  # TLS mode: the session
        # TLS off the broker ports: None (a broker port, or judged Pulsar), True (its
        # client's first decrypted frame must be CONNECT), False (it was not: not framed).
        self.tls_judge: bool | None = None


class Pipeline:
    """Dissect one capture source; see the module docstring."""

    def __init__(
        self,
        *,
        broker_ports: Iterable[int] = DEFAULT_BROKER_PORTS,
        tls_ports: Iterable[int] = DEFAULT_TLS_PORTS,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        first_conn_id: int = 1,
        messages: MessageExtractor | None = None,
        shard: tuple[int, int] | None = None,
        pairs: bool = True,
        idle_timeout: int | None = None,
        frame_bytes: bool = False,
        keylog: KeyLog | None = None,
        frame_runs: bool = False,
    ) -> None:
        """messages: the extractor of application messages, or None not to extract them.

        frame_bytes: every complete frame carries its bytes as on the wire (`Frame.raw`).

        frame_runs: frames of the commonest commands come as `FrameRun` events (columns, no
        object per frame; dissector.pulsar.frame_runs), for a reader of the frames and
        entities tables only: taken only without pairs, messages and frame bytes.

        keylog: TLS secrets (NSS key log) to decrypt TLS connections with; it may gain
        secrets while the pipeline runs (live), sessions waiting for theirs then retry.

        shard (k, n): dissect only the connections of shard k of n (dissector.flow.shard);
        `opened` then lists (packet, conn_id) of every connection opened, so that the ids
        of several shards can be renumbered as one pipeline would have them (`log_opened`
        asks for that list without sharding).
        """
        self.broker_ports = frozenset(broker_ports)
        self.tls_ports = frozenset(tls_ports)
        self.max_frame_size = max_frame_size
        self.messages = messages
        self.tcp = Reassembler(self.broker_ports, first_id=first_conn_id, idle_timeout=idle_timeout)
        self._idle = idle_timeout is not None
        self.fragments = FragmentReassembler()
        self._convs: dict[int, _Conv] = {}
        self.packets = 0
        self.non_tcp_packets = 0
        # TCP conversations found not to be Pulsar, by server port (what a user may have
        # meant with --port when no Pulsar traffic is found).
        self.other_ports: dict[int, int] = {}
        self.shard = shard
        self._sharder = None if shard is None else Sharder(shard[1])
        self._mine = 0 if shard is None else shard[0]
        self.pairs = pairs
        self.frame_bytes = frame_bytes
        self.frame_runs = frame_runs and not pairs and messages is None and not frame_bytes
        self.keylog = keylog
        self.tls_waiting = WaitingPool()  # records waiting for a key, all sessions together
        self.opened: list[tuple[int, int]] = []
        self.log_opened = shard is not None  # append to `opened` (sharded or merged reads)
        self._swapped: set[int] = set()  # connections whose roles the current batch swapped

    @property
    def next_conn_id(self) -> int:
        """The id the next connection opened would get."""
        return self.tcp.next_id

    def feed(self, pkt: RawPacket) -> list[PipelineEvent]:
        self.packets += 1
        if self._idle:
            # every packet is the flow table's clock (of every shard, parsed or not)
            ended = self.tcp.tick(pkt.ts)
            if ended is not None:
                out: list[PipelineEvent] = []
                self._route_all(ended, out)
                out.extend(self._packet(pkt))
                return out
        return self._packet(pkt)

    def feed_parsed(self, seg: Segment) -> list[PipelineEvent]:
        """A packet the compiled stage (dissector._core) parsed to `seg`: counted, the clock
        and its shard as `feed` has them for that packet."""
        self.packets += 1
        if self._idle:
            ended = self.tcp.tick(seg.ts)
            if ended is not None:
                out: list[PipelineEvent] = []
                self._route_all(ended, out)
                out.extend(self._parsed(seg))
                return out
        return self._parsed(seg)

    def _parsed(self, seg: Segment) -> list[PipelineEvent]:
        sharder = self._sharder
        if sharder is not None and sharder.of(seg) != self._mine:
            return []  # one deal per packet, as `of_raw` or `of` makes it in `_packet`
        return self.feed_segment(seg)

    def _packet(self, pkt: RawPacket) -> list[PipelineEvent]:
        sharder = self._sharder
        shard = -1
        if sharder is not None:
            shard = sharder.of_raw(pkt.linktype, pkt.data)  # -1: not told without parsing
            if shard >= 0 and shard != self._mine:
                return []  # another worker's connection: not even parsed
        seg = parse_layers(pkt)
        if type(seg) is Segment:
            if sharder is not None and shard < 0 and sharder.of(seg) != self._mine:
                return []
            return self.feed_segment(seg)
        rest: list[PipelineEvent] = []
        self._other(seg, shard, rest)
        return rest

    def feed_segment(self, seg: Segment) -> list[PipelineEvent]:
        out: list[PipelineEvent] = []
        self._route_all(self.tcp.feed(seg), out)
        return out

    def _other(self, parsed: Segment | NetIssue | Fragment | None, shard: int, out: _Out) -> None:
        """A packet that is not (yet) a segment of ours, or a reassembled datagram's.

        shard: the packet's shard if its bytes told it (then it is ours), else -1."""
        if parsed is None:
            self.non_tcp_packets += 1
        elif type(parsed) is Fragment:
            for item in self.fragments.feed(parsed):
                if type(item) is Datagram:
                    self._other(parse_datagram(item), -1, out)
                elif type(item) is NetIssue:
                    self._issue(item, -1, out)
        elif type(parsed) is NetIssue:
            self._issue(parsed, shard, out)
        elif type(parsed) is Segment:  # reassembled from fragments
            sharder = self._sharder
            if sharder is None or sharder.of(parsed) == self._mine:
                out.extend(self.feed_segment(parsed))

    def _issue(self, issue: NetIssue, shard: int, out: _Out) -> None:
        ports = (issue.src_port, issue.dst_port)
        if issue.src_port is not None and not self.broker_ports.intersection(ports):
            return  # another protocol's packet: not ours to report
        sharder = self._sharder
        if sharder is None or shard >= 0 or sharder.of(issue) == self._mine:
            out.append(issue.anomaly())

    def expire(self, now: int) -> list[PipelineEvent]:
        """End the connections idle past the idle timeout at `now` (µs since the epoch), and
        the fragmented datagrams older than their timeout."""
        out: list[PipelineEvent] = []
        for issue in self.fragments.expire(now):
            self._issue(issue, -1, out)
        self._route_all(self.tcp.expire(now), out)
        return out

    def retry_tls(self) -> list[PipelineEvent]:
        """The key log gained secrets (live): TLS sessions waiting for theirs try again now
        rather than at their next packet."""
        out: list[PipelineEvent] = []
        for conv in list(self._convs.values()):
            if conv.tls is not None:
                self._tls(conv, conv.tls.retry(), out)
        return out

    def close(self) -> list[PipelineEvent]:
        out: list[PipelineEvent] = []
        for issue in self.fragments.close():
            self._issue(issue, -1, out)
        self._route_all(self.tcp.close(), out)
        return out

    # ------------------------------------------------------------------ routing

    def _route_all(self, events: list[TcpEvent], out: _Out) -> None:
        """Route one batch of TCP events. TCP made them all before the first was routed: when
        routing one swaps a connection's roles (`_swap_roles`), the rest of its events in the
        batch still carry the old ones, and are flipped (fuzzing finding 11)."""
        swapped = self._swapped
        for ev in events:
            if swapped and ev.conn_id in swapped:
                ev = _flip_tcp(ev)
            self._route(ev, out)
        swapped.clear()

    def _route(self, ev: TcpEvent, out: _Out) -> None:
        if type(ev) is StreamData:
            conv = self._convs[ev.conn_id]
            if conv.mode is PULSAR or conv.mode is PENDING:
                self._data(conv, ev, out)
            elif conv.tls is not None:
                synced = not conv.midstream[ev.direction]
                events = conv.tls.feed(ev.direction, ev.data, ev.packet, ev.ts, synced)
                self._tls(conv, events, out)
        elif type(ev) is StreamGap:
            conv = self._convs[ev.conn_id]
            if conv.mode is PULSAR or conv.mode is PENDING:
                self._gap(conv, ev, out)
            elif conv.tls is not None:
                self._tls(conv, conv.tls.gap(ev.direction, ev.length, ev.packet, ev.ts), out)
        elif type(ev) is ConnOpened:
            conv = self._convs[ev.conn_id] = _Conv(ev, self.pairs)
            if self.log_opened:
                self.opened.append((ev.packet, ev.conn_id))
            event = classify.on_open(
                ev.key.broker_port, ev.guessed, self.broker_ports, self.tls_ports
            )
            self._step(conv, event, out)
        elif type(ev) is ConnClosed:
            self._closed(ev, out)
        elif isinstance(ev, Anomaly):
            owner = self._convs.get(ev.conn_id)
            if owner is None:
                out.append(ev)
                return
            if ev.code == AnomalyCode.TCP_MIDSTREAM_START and ev.direction is not None:
                owner.midstream[ev.direction] = True
            self._emit(owner, ev, out)

    def _emit(self, conv: _Conv, ev: PipelineEvent, out: _Out) -> None:
        if conv.mode is PENDING:
            conv.held.append(ev)
        elif conv.mode is not IGNORED:
            if type(ev) is Anomaly:
                conv.anomalies += 1
            out.append(ev)

    # ------------------------------------------------------------------ modes

    def _step(self, conv: _Conv, event: Trigger, out: _Out) -> None:
        """Give `event` to the classification table and act on the mode it leads to."""
        old = conv.mode
        mode = conv.mode = classify.transition(old, event)
        opened = conv.opened
        if mode is TLS:
            conv.held.clear()
            conv.decoders.clear()
            conv.tls = TlsSession(opened.conn_id, self.keylog, self.tls_waiting)
            conv.tls_judge = True if old is PENDING else None
            why = "TLS port" if event is Trigger.TLS_PORT else "TLS ClientHello"
            out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
            if self.keylog is None:  # else reported at its end if nothing was decrypted
                out.append(_encrypted(opened, f"{why}: encrypted, not decoded"))
        elif mode is IGNORED:
            port = opened.key.broker_port
            self.other_ports[port] = self.other_ports.get(port, 0) + 1
            conv.held.clear()
            conv.decoders.clear()
            self.tcp.ignore(opened.conn_id)
        elif mode is PULSAR and old is Mode.NEW:
            out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
        elif mode is PULSAR:  # a PENDING connection's side opened with CONNECT
            held, conv.held = conv.held, []
            if event is Trigger.CONNECT_FROM_BROKER:
                held = self._swap_roles(conv, held)
            key = conv.opened.key
            out.append(ConversationOpened(opened.conn_id, key, opened.ts, opened.packet))
            self._publish(conv, held, out)
            if self.frame_runs and conv.tls_judge is None:  # roles and protocol now known
                for dec in conv.decoders.values():
                    dec.use_runs()

    def _swap_roles(self, conv: _Conv, held: list[PipelineEvent]) -> list[PipelineEvent]:
        """The side taken for the broker is the client: swap everything kept per side."""
        conn_id = conv.opened.conn_id
        if self.tcp.is_open(conn_id):
            key = self.tcp.swap_roles(conn_id)
        else:  # TCP ended it in this batch: its ConnClosed is being routed, or follows
            k = conv.opened.key
            key = FlowKey(k.broker_ip, k.broker_port, k.client_ip, k.client_port)
        self._swapped.add(conn_id)
        conv.opened = conv.opened._replace(key=key)
        decoders = conv.decoders
        conv.decoders = {C2B: decoders[B2C], **({B2C: decoders[C2B]} if C2B in decoders else {})}
        for direction, dec in conv.decoders.items():
            dec.relabel(direction)
        conv.midstream = {C2B: conv.midstream[B2C], B2C: conv.midstream[C2B]}
        return [_flip(e) for e in held]

    def _decide(self, conv: _Conv, events: list[Decoded], out: _Out) -> None:
        """A PENDING connection's decoded events: held, and each side judged on its first."""
        first = events[0]
        direction = first.direction
        assert direction is not None
        connect = isinstance(first, Frame) and first.command_type == _CONNECT
        event = classify.judge(direction, connect, conv.judged)
        conv.held.extend(events)
        if event is not None:
            conv.judged.add(direction)
            self._step(conv, event, out)
        if conv.mode is PENDING and len(conv.held) > classify.MAX_HELD:
            self._step(conv, Trigger.OVER_LIMIT, out)

    # ------------------------------------------------------------------ decoding

    def _decoder(
        self, conv: _Conv, direction: Direction, offset: int, synced: bool | None = None
    ) -> FrameDecoder:
        """The direction's frame decoder, made at its first bytes (synced: whether they
        start a frame; by default, unless the capture began mid-connection)."""
        dec = conv.decoders.get(direction)
        if dec is None:
            dec = FrameDecoder(
                conn_id=conv.opened.conn_id,
                direction=direction,
                max_frame_size=self.max_frame_size,
                synced=not conv.midstream[direction] if synced is None else synced,
                offset=offset,
                keep_raw=self.frame_bytes,
                # runs only where no role or protocol is left to judge from frames
                runs=self.frame_runs and conv.mode is not PENDING and conv.tls_judge is None,
            )
            conv.decoders[direction] = dec
        return dec

    def _data(self, conv: _Conv, ev: StreamData, out: _Out) -> None:
        direction, data, offset = ev.direction, ev.data, ev.offset
        if direction is C2B and conv.head is not None:
            if conv.midstream[C2B]:
                conv.head = None
            else:
                head = conv.head + data
                found = sniff(head)
                if found is None:
                    conv.head = head
                    return
                conv.head = None
                conv.preamble = found
                if found.kind is PreambleKind.TLS:
                    self._step(conv, Trigger.CLIENT_HELLO, out)
                    if conv.tls is not None:
                        tls = conv.tls.feed(C2B, head, ev.packet, ev.ts)
                        self._tls(conv, tls, out)
                    return
                if found.kind is PreambleKind.PROXY_INVALID:
                    # Skip what looked like the header and resynchronise on the first frame.
                    self._emit(conv, found.anomaly(ev.conn_id, ev.packet, ev.ts), out)
                    conv.midstream[C2B] = True
                data = head[found.length :]
                offset = found.length
                if not data:
                    self._decoder(conv, C2B, offset)
                    return
        dec = self._decoder(conv, direction, offset)
        events = dec.feed(data, packet=ev.packet, ts=ev.ts)
        if conv.mode is PENDING and not events and dec.pending > classify.PENDING_LIMIT:
            self._step(conv, Trigger.OVER_LIMIT, out)
        self._deliver(conv, events, out)

    def _gap(self, conv: _Conv, ev: StreamGap, out: _Out) -> None:
        if ev.direction is C2B:  # bytes lost before the preamble was known
            self._unsniffed(conv, out, ev.packet, ev.ts)
        events = self._decoder(conv, ev.direction, ev.offset).gap(ev.length)
        self._deliver(conv, events, out)

    def _unsniffed(self, conv: _Conv, out: _Out, packet: int, ts: int) -> None:
        """Client bytes too few to classify (the stream ended or lost bytes before the
        preamble was known) are still part of the stream: hand them to the decoder."""
        head, conv.head = conv.head, None
        if head:
            self._deliver(conv, self._decoder(conv, C2B, 0).feed(head, packet=packet, ts=ts), out)

    def _deliver(self, conv: _Conv, events: list[Decoded], out: _Out) -> None:
        if conv.mode is PENDING and events:
            self._decide(conv, list(events), out)
        elif conv.mode is PULSAR:
            self._publish(conv, events, out)
        elif conv.mode is TLS and events:
            self._tls_deliver(conv, events, out)

    # ------------------------------------------------------------------ TLS

    def _tls(self, conv: _Conv, events: list[TlsEvent], out: _Out) -> None:
        """A TLS session's events: decrypted bytes are framed, anomalies reported."""
        tls = conv.tls
        assert tls is not None
        for ev in events:
            if type(ev) is Anomaly:
                self._emit(conv, ev, out)
            elif conv.tls_judge is False:
                continue  # decrypted, but not Pulsar
            elif type(ev) is Plain:
                dec = self._decoder(conv, ev.direction, 0, synced=True)  # decrypted: whole
                self._deliver(conv, dec.feed(ev.data, packet=ev.packet, ts=ev.ts), out)
            elif type(ev) is PlainGap:
                dec = self._decoder(conv, ev.direction, 0, synced=True)
                self._deliver(conv, dec.gap(ev.length), out)
        if tls.idle:
            tls.stop()
            self.tcp.ignore(conv.opened.conn_id)

    def _tls_deliver(self, conv: _Conv, events: list[Decoded], out: _Out) -> None:
        """A decrypted stream's events; off the broker ports, held until the client's first
        decrypted event says whether it is Pulsar (CONNECT)."""
        if conv.tls_judge is None:
            self._publish(conv, events, out)
            return
        if conv.tls_judge is False:
            return
        conv.held.extend(events)
        first: PipelineEvent | None = next(
            (e for e in conv.held if isinstance(e, Frame | Anomaly) and e.direction is C2B), None
        )
        if first is None:
            if len(conv.held) > classify.MAX_HELD:
                first = conv.held[0]  # the client says nothing: not Pulsar
            else:
                return
        held, conv.held = conv.held, []
        if type(first) is Frame and first.command_type == _CONNECT:
            conv.tls_judge = None
            self._publish(conv, held, out)
            if self.frame_runs:
                for dec in conv.decoders.values():
                    dec.use_runs()
        else:
            conv.tls_judge = False
            conv.decoders.clear()

    def _publish(self, conv: _Conv, events: Sequence[PipelineEvent], out: _Out) -> None:
        """Emit a Pulsar connection's events: frames with their topic, pairs, messages."""
        state = conv.state
        messages = self.messages
        for ev in events:
            if type(ev) is Frame:
                topic, pairs = state.observe(ev)
                if topic is not None:
                    ev = _new_frame(Frame, (*ev[:_TOPIC], topic))  # ev._replace(topic=...)
                out.append(ev)
                if pairs:
                    out.extend(pairs)
                if messages is not None and ev.command_type in PAYLOAD_TYPES:
                    for item in messages.feed(ev):
                        if type(item) is Anomaly:
                            conv.anomalies += 1
                        out.append(item)
            elif type(ev) is FrameRun:
                out.append(_new_frame(FrameRun, (*ev[:_TOPICS], state.observe_run(ev))))
            else:
                if type(ev) is Anomaly:
                    conv.anomalies += 1
                out.append(ev)

    def _closed(self, ev: ConnClosed, out: _Out) -> None:
        conv = self._convs.pop(ev.conn_id)
        swapped = ev.conn_id in self._swapped  # then `ev` was made for the new roles
        if conv.mode in classify.DECODED:
            self._unsniffed(conv, out, 0, 0)  # their packets are no longer known
        tls = conv.tls
        if tls is not None:
            self._tls(conv, tls.close(), out)
        for dec in list(conv.decoders.values()):
            self._deliver(conv, dec.close(), out)
        if not swapped and ev.conn_id in self._swapped:  # by what the decoders held back
            ev = _flip_closed(ev)
        if tls is not None and tls.keylog is not None and not tls.decrypted:
            why = "no application data decrypted with the key log"
            self._emit(conv, _encrypted(conv.opened, why), out)
        conv.mode = classify.transition(conv.mode, Trigger.CLOSED)
        if conv.mode not in classify.REPORTED:
            return  # not Pulsar: nothing to report
        if conv.mode is PULSAR or (tls is not None and conv.decoders):
            if self.messages is not None:
                self._publish(conv, self.messages.close_conn(ev.conn_id), out)
            out.extend(conv.state.close())
        opened = conv.opened
        proxied = conv.preamble.source if conv.preamble is not None else None
        pre = conv.preamble.length if conv.preamble is not None else 0
        out.append(
            Conversation(
                conn_id=ev.conn_id,
                key=opened.key,
                start_ts=opened.ts,
                end_ts=ev.ts,
                first_packet=opened.packet,
                last_packet=ev.packet,
                ended=ev.reason,
                syn_seen=opened.syn_seen,
                encrypted=conv.mode is TLS,
                proxied_client=proxied,
                c2b=_stats(conv.decoders.get(C2B), ev.packets_c2b, ev.bytes_c2b, pre),
                b2c=_stats(conv.decoders.get(B2C), ev.packets_b2c, ev.bytes_b2c, 0),
                info=conv.state.info,
                anomalies=conv.anomalies,
                tls=None if tls is None else tls.info(),
            )
        )


def _stats(dec: FrameDecoder | None, packets: int, wire: int, preamble: int) -> DirectionStats:
    s = dec.stats if dec is not None else StreamStats()
    return DirectionStats(
        packets=packets,
        wire_bytes=wire,
        stream_bytes=preamble if dec is None else dec.offset,
        preamble_bytes=preamble,
        frames=s.frames,
        frame_bytes=s.frame_bytes,
        skipped_bytes=s.skipped_bytes,
        gap_bytes=s.gap_bytes,
    )


def _encrypted(opened: ConnOpened, detail: str) -> Anomaly:
    return Anomaly.of(
        AnomalyCode.PULSAR_ENCRYPTED,
        conn_id=opened.conn_id,
        direction=None,
        stream_offset=None,
        detail=detail,
        packet=opened.packet,
        ts=opened.ts,
    )


def _flip_closed(ev: ConnClosed) -> ConnClosed:
    return ev._replace(
        packets_c2b=ev.packets_b2c,
        packets_b2c=ev.packets_c2b,
        bytes_c2b=ev.bytes_b2c,
        bytes_b2c=ev.bytes_c2b,
    )


def _flip_tcp(ev: TcpEvent) -> TcpEvent:
    """A TCP event made before its connection's roles were swapped, as made after."""
    if type(ev) is ConnClosed:
        return _flip_closed(ev)
    if isinstance(ev, StreamData | StreamGap | Anomaly) and ev.direction is not None:
        return ev._replace(direction=B2C if ev.direction is C2B else C2B)
    return ev


def _flip(ev: PipelineEvent) -> PipelineEvent:
    if isinstance(ev, Frame | Anomaly) and ev.direction is not None:
        return ev._replace(direction=B2C if ev.direction is C2B else C2B)
    return ev
