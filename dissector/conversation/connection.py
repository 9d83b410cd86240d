"""One connection between TCP and the events out: its mode, roles, held events and TLS.

Input: one TCP connection's events, as the pipeline routes them (`open`, then `data`, `gap`,
`anomaly` per direction, then `close`), and the `Shared` settings and flow table of its
pipeline.
Output: the events it publishes, appended to the caller's list: `ConversationOpened` (once it
is known to be Pulsar or TLS), `Frame`s and `FrameRun`s with their topics, pairs, messages,
`Anomaly`s, and `Conversation` at its end.
Rules:
- The mode and the roles change only by `flow.classify`'s table: `_step` gives it a
  `Trigger` (the port the connection opened on, the client stream's first bytes, each side's
  first frame or first decrypted frame, a bound, the end) and acts on the mode returned:
  PENDING: decoded, events held; PULSAR: published; TLS modes: bytes to a
  `tls.session.TlsSession`; IGNORED: dropped, TCP told to deliver nothing more.
- The client stream's first bytes are sniffed (`flow.preamble`): a TLS ClientHello, a PROXY
  header (skipped; an invalid one reported, then frames are resynchronised), or Pulsar.
- A step the table says swaps the sides (`classify.SWAPS`: the side taken for the broker
  opened a PENDING connection with CONNECT) swaps everything kept per side with
  `flow.sides.swap`: the key, the decoders, the midstream marks, the events held and the
  `ConnClosed` being handled; the connection joins `Shared.swapped`, so that the pipeline
  swaps what TCP says of it from then on.
- TLS off the broker ports (TLS_PENDING) is held until its client's first decrypted frame
  (`classify.judge_decrypted`): CONNECT makes its frames published (TLS), anything else
  leaves it not framed (TLS_OTHER). Without a key log, TCP stops delivering once the
  handshake is over.
- Its end gives its `Conversation` (`records`), for PULSAR and TLS ones only.
"""

from __future__ import annotations

from dissector.anomalies import AnomalyCode
from dissector.conversation.publish import publish
from dissector.conversation.records import conversation, encrypted
from dissector.conversation.shared import Shared
from dissector.events import (
    Anomaly,
    ConnClosed,
    ConnOpened,
    ConversationOpened,
    Decoded,
    Direction,
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
from dissector.flow.sides import swap
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import COMMAND_TYPES
from dissector.tls.plain import Plain, PlainGap, TlsEvent
from dissector.tls.session import TlsSession

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
_CONNECT = COMMAND_TYPES["CONNECT"]
PENDING, PULSAR, TLS, IGNORED = Mode.PENDING, Mode.PULSAR, Mode.TLS, Mode.IGNORED
TLS_PENDING, TLS_OTHER = Mode.TLS_PENDING, Mode.TLS_OTHER

Out = list[PipelineEvent]  # where a method appends the events it emits


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
        self.state = ConversationState(
            opened.conn_id,
            pairs=shared.pairs,
            schemas=values or shared.schemas,
            consumed=shared.consumed,
            lifecycles=shared.lifecycles,
        )
        self.state.schemas.published = shared.schemas
        self.judged: set[Direction] = set()  # pending: sides that opened without CONNECT
        self.anomalies = 0
        self.tls: TlsSession | None = None  # TLS modes: the session
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
        """Give `event` to the classification table and act on its answer: the sides swapped
        when the step says so, then the mode it leads to."""
        old = self.mode
        mode = self.mode = classify.transition(old, event)
        if (old, event) in classify.SWAPS:
            self._swap()
        s, opened = self.shared, self.opened
        if mode is TLS_PENDING or (mode is TLS and old is not TLS_PENDING):
            self.held.clear()
            self.decoders.clear()
            self.tls = TlsSession(opened.conn_id, s.keylog, s.tls_waiting)
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
            held, self.held = self.held, []
            out.append(ConversationOpened(opened.conn_id, opened.key, opened.ts, opened.packet))
            self.anomalies += publish(self.state, self.messages, held, out)
            self._use_runs()
        elif mode is TLS:  # TLS_PENDING: its client's first decrypted frame is CONNECT
            held, self.held = self.held, []
            self.anomalies += publish(self.state, self.messages, held, out)
            self._use_runs()
        elif mode is TLS_OTHER:  # TLS_PENDING: its client's is not: not framed
            self.held = []
            self.decoders.clear()

    def _use_runs(self) -> None:
        """Roles and protocol are known: decoders made before (the client side of a broker
        port's connection, judged on its CONNECT) give frame runs from now on, if the reader
        takes them (dissector.pulsar.frame_runs)."""
        if self.shared.frame_runs:
            for dec in self.decoders.values():
                dec.use_runs()

    def _swap(self) -> None:
        """The side taken for the broker is the client: swap everything kept per side, and the
        events made with the old roles; TCP's are swapped by the pipeline from now on."""
        self.shared.swapped.add(self.opened.conn_id)
        self.opened = swap(self.opened)
        self.decoders = swap(self.decoders)
        self.midstream = swap(self.midstream)
        self.held = [swap(e) for e in self.held]
        if self.closing is not None:
            self.closing = swap(self.closing)

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
                runs=s.frame_runs and self.mode not in classify.JUDGING,
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
        elif events and (self.mode is TLS or self.mode is TLS_PENDING):
            self._tls_deliver(events, out)

    # ------------------------------------------------------------------ TLS

    def _tls(self, events: list[TlsEvent], out: Out) -> None:
        """A TLS session's events: decrypted bytes are framed, anomalies reported."""
        tls = self.tls
        assert tls is not None
        for ev in events:
            if type(ev) is Anomaly:
                self._emit(ev, out)
            elif self.mode is TLS_OTHER:
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
        if self.mode is TLS:
            self.anomalies += publish(self.state, self.messages, events, out)
            return
        self.held.extend(events)
        first: PipelineEvent | None = next(
            (e for e in self.held if isinstance(e, Frame | Anomaly) and e.direction is C2B), None
        )
        client_spoke = first is not None
        if first is None:
            if len(self.held) > classify.MAX_HELD:
                first = self.held[0]  # the client says nothing: not Pulsar
            else:
                return
        connect = type(first) is Frame and first.command_type == _CONNECT
        self._step(classify.judge_decrypted(client_spoke, connect), out)

    # ------------------------------------------------------------------ out

    def close(self, ev: ConnClosed, out: Out) -> None:
        """The connection ended: what its decoders and TLS session held back, then (Pulsar or
        TLS) its pending state and its `Conversation`."""
        self.closing = ev  # swapped by `_swap` if what is held back swaps the roles
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
            encrypted=self.mode in classify.ENCRYPTED,
            info=self.state.info,
            anomalies=self.anomalies,
            tls=tls_info,
        )
        out.append(end)
