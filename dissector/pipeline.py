"""The one place the stages are wired together: packets in, frames and conversations out.

Input: RawPackets in capture order (from a file reader or live capture), among them, fed to
`feed_parsed`, the TCP segments the compiled stage already parsed; then `close()`.
Output: `ConversationOpened` (once a connection is known to be Pulsar or TLS), `Frame`,
`FrameRun`, `Anomaly` and `Conversation` (when a connection ends) events.
Rules:
- Wiring only: headers (tunnels decapsulated) -> IP fragment reassembly -> TCP reassembly ->
  one `conversation.connection.Connection` per TCP connection, which holds everything else
  (its mode by `flow.classify`'s table, roles, held events, preamble sniffing, TLS, frame
  decoding, conversation state, application messages) -> events out.
- Sharded (`shard`): every worker reassembles every fragmented datagram, then keeps the
  segments of its own connections, as it does with packets whose shard their bytes do not tell.
- Idle timeout: every packet fed, of any protocol and any shard, is the flow table's clock
  (`Reassembler.expire`) before it is parsed, so that connections end at the same packet
  in a one-process read and in each worker of a parallel one. The compiled walk of a worker
  (`dealer`) skips other shards' packets: a run of them is one tick at its latest time
  (`skipped`), which ends the same connections in the same order (oldest first).
- TCP keys a connection once; when its roles are judged the other way round later
  (`flow.classify.SWAPS`), every TCP event of it is swapped on its way in
  (`flow.sides.swap`), those of the batch being routed when the swap came included.
"""

from __future__ import annotations

from collections.abc import Iterable

from dissector._core import Dealer
from dissector.conversation.connection import Connection
from dissector.conversation.shared import Shared
from dissector.events import (
    Anomaly,
    ConnClosed,
    ConnOpened,
    Dealt,
    NetIssue,
    PipelineEvent,
    RawPacket,
    Segment,
    Skipped,
    StreamData,
    StreamGap,
    TcpEvent,
)
from dissector.flow.shard import Sharder
from dissector.flow.sides import swap
from dissector.flow.tcp import Reassembler
from dissector.net.fragments import Datagram, Fragment, FragmentReassembler
from dissector.net.headers import parse_datagram, parse_layers
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE
from dissector.pulsar.messages import MessageExtractor
from dissector.tls.keylog import KeyLog

DEFAULT_BROKER_PORTS = frozenset({6650, 6651})
DEFAULT_TLS_PORTS = frozenset({6651})

_Out = list[PipelineEvent]  # where a method appends the events it emits


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
        dealer: Dealer | None = None,
        pairs: bool = True,
        idle_timeout: int | None = None,
        frame_bytes: bool = False,
        keylog: KeyLog | None = None,
        frame_runs: bool = False,
        consumed: bool = False,
        lifecycles: bool = False,
        schemas: bool = False,
    ) -> None:
        """messages: the extractor of application messages, or None not to extract them.

        frame_bytes: every complete frame carries its bytes as on the wire (`Frame.raw`).

        frame_runs: frames of the commonest commands come as `FrameRun` events (columns, no
        object per frame; dissector.pulsar.frame_runs), for a reader of the frames and
        entities tables only: never with pairs, messages or frame bytes, which read every
        frame (a read's plan decides, dissector.read.plan; ValueError if asked with them).

        consumed: with pairs, the journeys' facts of deliveries and acks follow each MESSAGE
        and ACK (`Delivering`, `AckedIds`: dissector.facts.consumed).

        lifecycles: with pairs, each producer's and consumer's step (declared, created,
        failed, closed, migrated) follows the frame that made it (`Lifecycle`:
        dissector.facts.lifecycles).

        schemas: with pairs, the schema facts (`SchemaFact`: dissector.facts.schemas) follow
        the frame that made them (the findings' schema rule reads them).

        keylog: TLS secrets (NSS key log) to decrypt TLS connections with; it may gain
        secrets while the pipeline runs (live), sessions waiting for theirs then retry.

        shard (k, n): dissect only the connections of shard k of n (dissector.flow.shard);
        `opened` then lists (packet, conn_id) of every connection opened, so that the ids
        of several shards can be renumbered as one pipeline would have them (`log_opened`
        asks for that list without sharding). dealer: the compiled dealer the walk deals
        with (dissector.flow.shard), whose state the sharder shares.
        """
        self.broker_ports = frozenset(broker_ports)
        self.tls_ports = frozenset(tls_ports)
        self.max_frame_size = max_frame_size
        self.messages = messages
        self.tcp = Reassembler(self.broker_ports, first_id=first_conn_id, idle_timeout=idle_timeout)
        self._idle = idle_timeout is not None
        self.fragments = FragmentReassembler()
        self.packets = 0
        self.non_tcp_packets = 0
        self.shard = shard
        self._sharder = None if shard is None else Sharder(shard[1], dealer=dealer)
        self._mine = 0 if shard is None else shard[0]
        self.pairs = pairs
        self.frame_bytes = frame_bytes
        if frame_runs and (pairs or messages is not None or frame_bytes):
            raise ValueError("frame_runs: not with pairs, messages or frame bytes")
        self.frame_runs = frame_runs
        self.keylog = keylog
        self._shared = Shared(
            tcp=self.tcp,
            broker_ports=self.broker_ports,
            tls_ports=self.tls_ports,
            max_frame_size=max_frame_size,
            messages=messages,
            pairs=pairs,
            frame_bytes=frame_bytes,
            frame_runs=self.frame_runs,
            keylog=keylog,
            consumed=consumed,
            lifecycles=lifecycles,
            schemas=schemas,
        )
        # a swapped connection's id is kept until TCP forgets the connection: no event of
        # it comes after (the anomalies of data after its close come before)
        self.tcp.on_forget = self._shared.swapped.discard
        self._convs: dict[int, Connection] = {}  # the open connections, by id
        self.tls_waiting = self._shared.tls_waiting  # records waiting for a key
        # TCP conversations found not to be Pulsar, by server port (what a user may have
        # meant with --port when no Pulsar traffic is found).
        self.other_ports = self._shared.other_ports
        self.opened: list[tuple[int, int]] = []
        self.log_opened = shard is not None  # append to `opened` (sharded or merged reads)

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

    def feed_dealt(self, pkt: Segment | RawPacket) -> list[PipelineEvent]:
        """A packet the compiled walk dealt to this shard (flow.shard.Dealt, DealtRaw): as
        `feed_parsed` and `feed`, without dealing it again."""
        self.packets += 1
        out: list[PipelineEvent] = []
        if self._idle:
            ended = self.tcp.tick(pkt.ts)
            if ended is not None:
                self._route_all(ended, out)
        if type(pkt) is not Dealt:
            assert isinstance(pkt, RawPacket)
            seg = parse_layers(pkt)
            if type(seg) is not Segment:
                self._other(seg, self._mine, out)
                return out
            pkt = seg
        assert isinstance(pkt, Segment)
        self._route_all(self.tcp.feed(pkt), out)
        return out

    def skipped(self, run: Skipped) -> list[PipelineEvent]:
        """A run of other shards' packets the compiled walk skipped: the clock reads its
        latest time (see the module rules)."""
        return self.tick(run.top)

    def tick(self, now: int) -> list[PipelineEvent]:
        """The idle clock reads `now`, a packet's time, before the packet is fed (which then
        finds the clock there): the connections it ends (dissector.read.row_order keeps
        them apart from the packet's own events)."""
        if self._idle:
            ended = self.tcp.tick(now)
            if ended is not None:
                out: list[PipelineEvent] = []
                self._route_all(ended, out)
                return out
        return []

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
            conv.retry_tls(out)
        return out

    def close(self) -> list[PipelineEvent]:
        out: list[PipelineEvent] = []
        for issue in self.fragments.close():
            self._issue(issue, -1, out)
        self._route_all(self.tcp.close(), out)
        return out

    # ------------------------------------------------------------------ routing

    def _route_all(self, events: list[TcpEvent], out: _Out) -> None:
        """Route one batch of TCP events to their connections, each as its connection's roles
        say it: TCP's roles swapped for the connections `Shared.swapped` lists, also for the
        rest of a batch whose routing swapped them (fuzzing finding 11)."""
        swapped = self._shared.swapped
        for ev in events:
            if swapped and ev.conn_id in swapped:
                ev = swap(ev)
            self._route(ev, out)

    def _route(self, ev: TcpEvent, out: _Out) -> None:
        if type(ev) is StreamData:
            self._convs[ev.conn_id].data(ev, out)
        elif type(ev) is StreamGap:
            self._convs[ev.conn_id].gap(ev, out)
        elif type(ev) is ConnOpened:
            conv = self._convs[ev.conn_id] = Connection(ev, self._shared)
            if self.log_opened:
                self.opened.append((ev.packet, ev.conn_id))
            conv.open(out)
        elif type(ev) is ConnClosed:
            self._convs.pop(ev.conn_id).close(ev, out)
        elif isinstance(ev, Anomaly):
            owner = self._convs.get(ev.conn_id)
            if owner is None:
                out.append(ev)
            else:
                owner.anomaly(ev, out)
