"""One connection between TCP and the events out: its mode, roles, held events and TLS.

Input: one TCP connection's events, as the pipeline routes them (`open`, then `data`, `gap`,
`anomaly` per direction, then `close`), and the `Shared` settings and flow table of its
pipeline.
Output: the events it publishes, appended to the caller's list: `ConversationOpened` (once it
is known to be Pulsar or TLS), `Frame`s and `FrameRun`s with their topics, pairs, messages,
`Anomaly`s, and `Conversation` at its end.
Rules:
- The mode changes only by `flow.classify`'s table: `_step` gives it a `Trigger` (the port
  the connection opened on, the client stream's first bytes, each side's first frame, a
  bound, the end) and acts on the mode returned: PENDING: decoded, events held; PULSAR:
  published; TLS: bytes to a `tls.session.TlsSession`; IGNORED: dropped, TCP told to deliver
  nothing more.
- The client stream's first bytes are sniffed (`flow.preamble`): a TLS ClientHello, a PROXY
  header (skipped; an invalid one reported, then frames are resynchronised), or Pulsar.
- Roles are decided once: when the side taken for the broker opens a PENDING connection with
  CONNECT, `_swap_roles`, the one place roles change, swaps everything kept per side: TCP's
  (the flow table's key, halves and counts), the decoders, the midstream marks, and the
  events already made (those held, the `ConnClosed` being handled; the rest of TCP's batch is
  flipped by the pipeline with `records.flip_tcp`, for the connections
  `Shared.stale` lists).
- TLS off the broker ports (a PENDING connection whose client said ClientHello) is held until
  its client's first decrypted frame: CONNECT makes it Pulsar, anything else leaves it not
  framed. Without a key log, TCP stops delivering once the handshake is over.
- Its end gives its `Conversation` (`records`), for PULSAR and TLS ones only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissector.anomalies import AnomalyCode
from dissector.conversation.publish import publish
from dissector.conversation.records import conversation, encrypted, flip, flip_closed
from dissector.events import (
    Anomaly,
    ConnClosed,
    ConnOpened,
    ConversationOpened,
    Decoded,
    Direction,
    FlowKey,
    Frame,
    PipelineEvent,
    Preamble,
    PreambleKind,
    StreamData,
    StreamGap,
)
from dissector.facts import ConversationState
from dissector.flow import classify
from dissector.flow.classify import Mode, Trigger
from dissector.flow.preamble import sniff
from dissector.flow.tcp import Reassembler
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.messages import MessageExtractor
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.tls.keylog import KeyLog
from dissector.tls.plain import Plain, PlainGap, TlsEvent
from dissector.tls.session import TlsSession, WaitingPool

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_CONNECT = COMMAND_TYPES["CONNECT"]
PENDING, PULSAR, TLS, IGNORED = Mode.PENDING, Mode.PULSAR, Mode.TLS, Mode.IGNORED

Out = list[PipelineEvent]  # where a method appends the events it emits


@dataclass
class Shared:
    """What the connections of one pipeline share: its settings, its TCP flow table (told to
    ignore a connection or swap its roles), the TLS key log and the records waiting for keys,
    and what they report back."""

    tcp: Reassembler
    broker_ports: frozenset[int]
    tls_ports: frozenset[int]
    max_frame_size: int
    messages: MessageExtractor | None
    pairs: bool
    frame_bytes: bool
    frame_runs: bool
    keylog: KeyLog | None
    tls_waiting: WaitingPool = field(default_factory=WaitingPool)  # of all sessions together
    #: TCP connections found not to be Pulsar, by server port (what a user may have meant
    #: with --port when no Pulsar traffic is found).
    other_ports: dict[int, int] = field(default_factory=dict)
    #: Connections whose roles swapped while a TCP batch was routed: that batch's later
    #: events of theirs carry the old roles (the pipeline flips them).
    stale: set[int] = field(default_factory=set)


class Connection:
    """One connection's state; see the module docstring."""

    __slots__ = (
        "anomalies",
        "closing",
        "decoders",
        "head",
        "held",
        "judged",
        "messages",
        "midstream",
        "mode",
        "opened",
        "preamble",
        "shared",
        "state",
        "tls",
        "tls_judge",
    )

    def __init__(self, opened: ConnOpened, shared: Shared) -> None:
        self.opened = opened
        self.shared = shared
        self.messages = shared.messages
        self.mode = Mode.NEW  # flow.classify's transitions only
        self.decoders: dict[Direction, FrameDecoder] = {}
        self.midstream = {C2B: False, B2C: False}
        self.head: bytes | None = b""  # client bytes awaiting preamble sniffing; None: done
        self.preamble: Preamble | None = None
        self.held: list[PipelineEvent] = []  # events of a pending connection
        values = self.messages is not None and self.messages.values is not None
        self.state = ConversationState(opened.conn_id, pairs=shared.pairs, schemas=values)
        self.judged: set[Direction] = set()  # pending: sides that opened without CONNECT
        self.anomalies = 0
        self.tls: TlsSession | None = None  # TLS mode: the session
        # TLS off the broker ports: None (a broker port, or judged Pulsar), True (its
        # client's first decrypted frame must be CONNECT), False (it was not: not framed).
        self.tls_judge: bool | None = None
        self.closing: ConnClosed | None = None  # the end being handled (`close`)

    # ------------------------------------------------------------------ TCP's events

    def open(self, out: Out) -> None:
        """Classify the connection by the port it opened on."""
        s, opened = self.shared, self.opened
        port = opened.key.broker_port
        self._step(classify.on_open(port, opened.guessed, s.broker_ports, s.tls_ports), out)

    def data(self, ev: StreamData, out: Out) -> None:
        mode = self.mode
        if mode is not PULSAR and mode is not PENDING:
            if self.tls is not None:
                synced = not self.midstream[ev.direction]
                self._tls(self.tls.feed(ev.direction, ev.data, ev.packet, ev.ts, synced), out)
            return
        direction, data, offset = ev.direction, ev.data, ev.offset
        if direction is C2B and self.head is not None:
            if self.midstream[C2B]:
                self.head = None
            else:
                head = self.head + data
                found = sniff(head)
                if found is None:
                    self.head = head
                    return
                self.head = None
                self.preamble = found
                if found.kind is PreambleKind.TLS:
                    self._step(Trigger.CLIENT_HELLO, out)
                    if self.tls is not None:
                        self._tls(self.tls.feed(C2B, head, ev.packet, ev.ts), out)
                    return
                if found.kind is PreambleKind.PROXY_INVALID:
                    # Skip what looked like the header and resynchronise on the first frame.
                    self._emit(found.anomaly(ev.conn_id, ev.packet, ev.ts), out)
                    self.midstream[C2B] = True
                data = head[found.length :]
                offset = found.length
                if not data:
                    self._decoder(C2B, offset)
                    return
        dec = self._decoder(direction, offset)
        events = dec.feed(data, packet=ev.packet, ts=ev.ts)
        if self.mode is PENDING and not events and dec.pending > classify.PENDING_LIMIT:
            self._step(Trigger.OVER_LIMIT, out)
        self._deliver(events, out)

    def gap(self, ev: StreamGap, out: Out) -> None:
        mode = self.mode
        if mode is PULSAR or mode is PENDING:
            if ev.direction is C2B:  # bytes lost before the preamble was known
                self._unsniffed(out, ev.packet, ev.ts)
            self._deliver(self._decoder(ev.direction, ev.offset).gap(ev.length), out)
        elif self.tls is not None:
            self._tls(self.tls.gap(ev.direction, ev.length, ev.packet, ev.ts), out)

    def anomaly(self, ev: Anomaly, out: Out) -> None:
        if ev.code == AnomalyCode.TCP_MIDSTREAM_START and ev.direction is not None:
            self.midstream[ev.direction] = True
        self._emit(ev, out)

    def retry_tls(self, out: Out) -> None:
        """The key log gained secrets: a TLS session waiting for them tries again."""
        if self.tls is not None:
            self._tls(self.tls.retry(), out)

    def _emit(self, ev: PipelineEvent, out: Out) -> None:
        if self.mode is PENDING:
            self.held.append(ev)
        elif self.mode is not IGNORED:
            if type(ev) is Anomaly:
                self.anomalies += 1
            out.append(ev)

    # ------------------------------------------------------------------ modes and roles

    def _step(self, event: Trigger, out: Out) -> None:
        """Give `event` to the classification table and act on the mode it leads to."""
        old = self.mode
        mode = self.mode = classify.transition(old, event)
        s, opened = self.shared, self.opened
        if mode is TLS:
            self.held.clear()
            self.decoders.clear()
            self.tls = TlsSession(opened.conn_id, s.keylog, s.tls_waiting)
            self.tls_judge = True if old is PENDING else None
            why = "TLS port" if event is Trigger.TLS_PORT else "TLS ClientHello"
            out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
            if s.keylog is None:  # else reported at its end if nothing was decrypted
                out.append(encrypted(opened, f"{why}: encrypted, not decoded"))
        elif mode is IGNORED:
            port = opened.key.broker_port
            s.other_ports[port] = s.other_ports.get(port, 0) + 1
            self.held.clear()
            self.decoders.clear()
            s.tcp.ignore(opened.conn_id)
        elif mode is PULSAR and old is Mode.NEW:
            out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
        elif mode is PULSAR:  # a PENDING connection's side opened with CONNECT
            if event is Trigger.CONNECT_FROM_BROKER:
                self._swap_roles()
            held, self.held = self.held, []
            opened = self.opened
            out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
            self.anomalies += publish(self.state, self.messages, held, out)
            if self.tls_judge is None:
                self._use_runs()

    def _use_runs(self) -> None:
        """Roles and protocol are known: decoders made before (the client side of a broker
        port's connection, judged on its CONNECT) give frame runs from now on, if the reader
        takes them (dissector.pulsar.frame_runs)."""
        if self.shared.frame_runs:
            for dec in self.decoders.values():
                dec.use_runs()

    def _swap_roles(self) -> None:
        """The side taken for the broker is the client: swap everything kept per side, and the
        events made with the old roles (see the module docstring)."""
        s, conn_id = self.shared, self.opened.conn_id
        if s.tcp.is_open(conn_id):
            key = s.tcp.swap_roles(conn_id)
        else:  # TCP ended it in this batch: its ConnClosed is being handled, or follows
            k = self.opened.key
            key = FlowKey(k.broker_ip, k.broker_port, k.client_ip, k.client_port)
        s.stale.add(conn_id)
        self.opened = self.opened._replace(key=key)
        old = self.decoders
        self.decoders = {C2B: old[B2C], **({B2C: old[C2B]} if C2B in old else {})}
        for direction, dec in self.decoders.items():
            dec.relabel(direction)
        self.midstream = {C2B: self.midstream[B2C], B2C: self.midstream[C2B]}
        self.held = [flip(e) for e in self.held]
        if self.closing is not None:
            self.closing = flip_closed(self.closing)

    def _decide(self, events: list[Decoded], out: Out) -> None:
        """A PENDING connection's decoded events: held, and each side judged on its first."""
        first = events[0]
        direction = first.direction
        assert direction is not None
        connect = isinstance(first, Frame) and first.command_type == _CONNECT
        event = classify.judge(direction, connect, self.judged)
        self.held.extend(events)
        if event is not None:
            self.judged.add(direction)
            self._step(event, out)
        if self.mode is PENDING and len(self.held) > classify.MAX_HELD:
            self._step(Trigger.OVER_LIMIT, out)

    # ------------------------------------------------------------------ decoding

    def _decoder(
        self, direction: Direction, offset: int, synced: bool | None = None
    ) -> FrameDecoder:
        """The direction's frame decoder, made at its first bytes (synced: whether they
        start a frame; by default, unless the capture began mid-connection)."""
        dec = self.decoders.get(direction)
        if dec is None:
            s = self.shared
            dec = FrameDecoder(
                conn_id=self.opened.conn_id,
                direction=direction,
                max_frame_size=s.max_frame_size,
                synced=not self.midstream[direction] if synced is None else synced,
                offset=offset,
                keep_raw=s.frame_bytes,
                # runs only where no role or protocol is left to judge from frames
                runs=s.frame_runs and self.mode is not PENDING and self.tls_judge is None,
            )
            self.decoders[direction] = dec
        return dec

    def _unsniffed(self, out: Out, packet: int, ts: int) -> None:
        """Client bytes too few to classify (the stream ended or lost bytes before the
        preamble was known) are still part of the stream: hand them to the decoder."""
        head, self.head = self.head, None
        if head:
            self._deliver(self._decoder(C2B, 0).feed(head, packet=packet, ts=ts), out)

    def _deliver(self, events: list[Decoded], out: Out) -> None:
        if self.mode is PENDING and events:
            self._decide(list(events), out)
        elif self.mode is PULSAR:
            self.anomalies += publish(self.state, self.messages, events, out)
        elif self.mode is TLS and events:
            self._tls_deliver(events, out)

    # ------------------------------------------------------------------ TLS

    def _tls(self, events: list[TlsEvent], out: Out) -> None:
        """A TLS session's events: decrypted bytes are framed, anomalies reported."""
        tls = self.tls
        assert tls is not None
        for ev in events:
            if type(ev) is Anomaly:
                self._emit(ev, out)
            elif self.tls_judge is False:
                continue  # decrypted, but not Pulsar
            elif type(ev) is Plain:
                dec = self._decoder(ev.direction, 0, synced=True)  # decrypted: whole
                self._deliver(dec.feed(ev.data, packet=ev.packet, ts=ev.ts), out)
            elif type(ev) is PlainGap:
                dec = self._decoder(ev.direction, 0, synced=True)
                self._deliver(dec.gap(ev.length), out)
        if tls.idle:
            tls.stop()
            self.shared.tcp.ignore(self.opened.conn_id)

    def _tls_deliver(self, events: list[Decoded], out: Out) -> None:
        """A decrypted stream's events; off the broker ports, held until the client's first
        decrypted event says whether it is Pulsar (CONNECT)."""
        if self.tls_judge is None:
            self.anomalies += publish(self.state, self.messages, events, out)
            return
        if self.tls_judge is False:
            return
        self.held.extend(events)
        first: PipelineEvent | None = next(
            (e for e in self.held if isinstance(e, Frame | Anomaly) and e.direction is C2B), None
        )
        if first is None:
            if len(self.held) > classify.MAX_HELD:
                first = self.held[0]  # the client says nothing: not Pulsar
            else:
                return
        held, self.held = self.held, []
        if type(first) is Frame and first.command_type == _CONNECT:
            self.tls_judge = None
            self.anomalies += publish(self.state, self.messages, held, out)
            self._use_runs()
        else:
            self.tls_judge = False
            self.decoders.clear()

    # ------------------------------------------------------------------ out

    def close(self, ev: ConnClosed, out: Out) -> None:
        """The connection ended: what its decoders and TLS session held back, then (Pulsar or
        TLS) its pending state and its `Conversation`."""
        self.closing = ev  # flipped by `_swap_roles` if what is held back swaps the roles
        if self.mode in classify.DECODED:
            self._unsniffed(out, 0, 0)  # their packets are no longer known
        tls = self.tls
        if tls is not None:
            self._tls(tls.close(), out)
        for dec in list(self.decoders.values()):
            self._deliver(dec.close(), out)
        ev, self.closing = self.closing, None
        if tls is not None and tls.keylog is not None and not tls.decrypted:
            why = "no application data decrypted with the key log"
            self._emit(encrypted(self.opened, why), out)
        self.mode = classify.transition(self.mode, Trigger.CLOSED)
        if self.mode not in classify.REPORTED:
            return  # not Pulsar: nothing to report
        if self.mode is PULSAR or (tls is not None and self.decoders):
            if self.messages is not None:
                ended = self.messages.close_conn(ev.conn_id)
                self.anomalies += publish(self.state, self.messages, ended, out)
            out.extend(self.state.close())
        tls_info = None if tls is None else tls.info()
        end = conversation(
            self.opened,
            ev,
            self.decoders,
            self.preamble,
            encrypted=self.mode is TLS,
            info=self.state.info,
            anomalies=self.anomalies,
            tls=tls_info,
        )
        out.append(end)
